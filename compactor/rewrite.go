package compactor

import (
	"bytes"
	"container/heap"
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table/dv"
)

// compaction is one rewrite in flight.
type compaction struct {
	id      string
	old     []iceberg.DataFile
	oldDV   []*dv.RoaringPositionBitmap // each old file's deleted rows when planned (nil: none)
	capped  bool                        // pick left files of the group for the merge's memory (mergeFiles)
	started time.Time

	// set by the rewrite
	newFiles []iceberg.DataFile
	moved    [][]newLoc // per old file, per old position: where the row went
	keys     movedKeys  // every row written, for the key index
	err      error
	done     chan struct{}
}

type newLoc struct {
	file int32 // index into newFiles; -1: the row was deleted when planned
	pos  int32
}

// movedKeys are the keys a rewrite copied and where each went, packed:
// the keys end to end in one buffer (a slice per key would take about
// three times the memory).
type movedKeys struct {
	buf  []byte
	ends []uint32 // ends[i]: where key i ends in buf
	locs []newLoc
}

func (m *movedKeys) add(key []byte, loc newLoc) {
	m.buf = append(m.buf, key...)
	m.ends = append(m.ends, uint32(len(m.buf)))
	m.locs = append(m.locs, loc)
}

func (m *movedKeys) len() int { return len(m.locs) }

// at returns key i (valid while m lives) and where it went.
func (m *movedKeys) at(i int) ([]byte, newLoc) {
	start := uint32(0)
	if i > 0 {
		start = m.ends[i-1]
	}
	return m.buf[start:m.ends[i]:m.ends[i]], m.locs[i]
}

// rewrite merges the old files' surviving rows into new files: each file
// is sorted by key, so a k-way merge keeps the output sorted and memory
// small. It records where every row went.
func (c *compaction) rewrite(ctx context.Context, rw Rewriter, cc CompactionConfig) error {
	var cursors mergeHeap
	defer func() {
		for _, cur := range cursors {
			cur.rows.Close()
		}
	}()
	c.moved = make([][]newLoc, len(c.old))
	for i, df := range c.old {
		rows, err := rw.Open(df)
		if err != nil {
			return fmt.Errorf("compactor: read %s: %w", df.FilePath(), err)
		}
		c.moved[i] = make([]newLoc, df.Count())
		for j := range c.moved[i] {
			c.moved[i][j] = newLoc{file: -1}
		}
		cur := &cursor{src: i, rows: rows, deleted: c.oldDV[i]}
		if ok, err := cur.next(); err != nil {
			rows.Close()
			return fmt.Errorf("compactor: read %s: %w", df.FilePath(), err)
		} else if ok {
			cursors = append(cursors, cur)
		} else {
			rows.Close()
		}
	}
	heap.Init(&cursors)
	var out FileWriter
	var pos int32
	defer func() {
		if out != nil {
			out.Abort() // failed or cancelled midway
		}
	}()
	for cursors.Len() > 0 {
		cur := cursors[0]
		if out == nil {
			name := fmt.Sprintf("compact-%s-%05d.parquet", c.id[:16], len(c.newFiles))
			w, err := rw.Create(name, cur.rows.Row())
			if err != nil {
				return err
			}
			out, pos = w, 0
		}
		if err := out.Add(cur.rows.Row()); err != nil {
			return err
		}
		at := newLoc{file: int32(len(c.newFiles)), pos: pos}
		if int(cur.pos) >= len(c.moved[cur.src]) {
			return fmt.Errorf("compactor: %s has a row at position %d past its %d rows", c.old[cur.src].FilePath(), cur.pos, len(c.moved[cur.src]))
		}
		c.moved[cur.src][cur.pos] = at
		c.keys.add(cur.rows.Key(), at)
		pos++
		if c.keys.len()%256 == 0 {
			// The rewrite is background work: every millisecond or so it
			// lets a woken goroutine of the table's commit have the CPU
			// rather than wait for the scheduler's 10 ms preemption.
			runtime.Gosched()
		}
		if out.Size() >= int(cc.TargetFileSize) || int64(pos) >= cc.MaxRows {
			df, err := out.Finish()
			if err != nil {
				return err
			}
			c.newFiles, out = append(c.newFiles, df), nil
		}
		if ok, err := cur.next(); err != nil {
			return fmt.Errorf("compactor: read %s: %w", c.old[cur.src].FilePath(), err)
		} else if ok {
			heap.Fix(&cursors, 0)
		} else {
			cur.rows.Close()
			heap.Pop(&cursors)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if out != nil {
		df, err := out.Finish()
		if err != nil {
			return err
		}
		c.newFiles, out = append(c.newFiles, df), nil
	}
	return nil
}

// cursor walks one data file's rows that were live when planned, in key
// order.
type cursor struct {
	src     int
	rows    Rows
	deleted *dv.RoaringPositionBitmap
	pos     int64
}

func (c *cursor) next() (bool, error) {
	for {
		ok, err := c.rows.Next()
		if err != nil || !ok {
			return false, err
		}
		c.pos = c.rows.Pos()
		if c.deleted == nil || !c.deleted.Contains(uint64(c.pos)) {
			return true, nil
		}
	}
}

type mergeHeap []*cursor

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return bytes.Compare(h[i].rows.Key(), h[j].rows.Key()) < 0 }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(*cursor)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
