package snapshot

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
)

// lowDB is a fakeDB with the LowReader ability: it records the low
// watermarks it wrote with their chunks' reads.
type lowDB struct {
	*fakeDB
	lmu  sync.Mutex
	lows []string
}

func (l *lowDB) ReadChunkAfterLow(ctx context.Context, id, table string, t *Table, q ChunkQuery) (*Chunk, error) {
	l.lmu.Lock()
	l.lows = append(l.lows, id)
	l.lmu.Unlock()
	if err := l.WriteWatermark(ctx, id); err != nil {
		return nil, err
	}
	return l.ReadChunk(ctx, table, t, q)
}

// lowParallelDB is a lowDB read several chunks at once, its readers
// LowReaders too.
type lowParallelDB struct{ *lowDB }

func (p *lowParallelDB) Bounds(ctx context.Context, table string, t *Table, q ChunkQuery, n int) ([]Key, bool, error) {
	return (&parallelDB{p.fakeDB}).Bounds(ctx, table, t, q, n)
}

func (p *lowParallelDB) Reader(context.Context) (ChunkReader, error) {
	return lowChunkReader{p.lowDB}, nil
}

type lowChunkReader struct{ *lowDB }

func (lowChunkReader) Close() {}

// TestLowReaderTakesLowWatermark: with a Database (or a Parallel one's
// ChunkReader) that is a LowReader, every chunk's low watermark is written
// by its read (ReadChunkAfterLow), none on its own, and the chunks come
// out as before: a key changed in a window is dropped, every other key
// emitted once, in key order.
func TestLowReaderTakesLowWatermark(t *testing.T) {
	for _, parallel := range []bool{false, true} {
		t.Run(map[bool]string{false: "one", true: "parallel"}[parallel], func(t *testing.T) {
			db := newFakeDB(10)
			db.updateDuringRead("4", 6)
			l := &lowDB{fakeDB: db}
			db.runAs = l
			if parallel {
				db.runAs = &lowParallelDB{l}
			}
			e, s, _ := start(t, &memState{}, db, 4)
			if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
				t.Fatal(err)
			}
			waitDone(t, e, s)
			if got, want := keysOf(s.rows()), []int64{1, 2, 3, 4, 5, 7, 8, 9, 10}; !slices.Equal(got, want) {
				t.Fatalf("emitted keys %v, want %v", got, want)
			}
			db.mu.Lock()
			var lows []string
			for _, id := range db.written {
				if strings.HasPrefix(id, kindLow+":") {
					lows = append(lows, id)
				}
			}
			db.mu.Unlock()
			l.lmu.Lock()
			defer l.lmu.Unlock()
			if len(lows) == 0 || !slices.Equal(lows, l.lows) {
				t.Fatalf("low watermarks written %v, of which by the chunks' reads %v: want all, and some", lows, l.lows)
			}
		})
	}
}
