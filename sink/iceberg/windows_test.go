package iceberg

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestWindowsRecycledAfterCommit: a backlog of inserts, updates and
// deletes, read in 64 KiB fetches into pooled windows and committed a
// quarter MiB at a time, is mirrored exactly while the windows go round:
// the tests poison every window handed back (poisonWindows, TestMain), so
// a window handed back while a change, a key or a position still refers to
// it makes a wrong row, a wrong key or an undecodable change. And windows
// were reused, or the check would hold vacuously.
func TestWindowsRecycledAfterCommit(t *testing.T) {
	if !poisonWindows {
		t.Fatal("the package's tests run without poisoned windows (TestMain)")
	}
	for _, tc := range []struct {
		mode     string
		version  int
		pipeline bool // commits land beside the loop (flight.go): windows go back at launch
	}{{ModeUpsert, 3, false}, {ModeUpsert, 3, true}, {ModeUpsert, 2, false}, {ModeAppend, 3, false}} {
		name := fmt.Sprintf("%s-v%d", tc.mode, tc.version)
		if tc.pipeline {
			name += "-in-flight"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cat := testCatalog(t)
			reg := memRegistry(t)
			f := newFeed(t, filepath.Join(dir, "log"), reg, 2)
			want, changes := model{}, map[string]int{}
			rng := rand.New(rand.NewPCG(7, uint64(tc.version)))
			for round := range 16 {
				var recs []log.Record
				for id := int64(0); id < 3000; id++ {
					_, live := want[id]
					op := byte('c')
					switch {
					case live && rng.IntN(10) == 0:
						op = 'd'
					case live && rng.IntN(10) < 6:
						op = 'u'
					case live || round > 0 && rng.IntN(2) == 0:
						continue
					}
					recs = append(recs, f.change(op, id, round, want, changes))
				}
				for len(recs) > 0 { // in log batches smaller than a fetch, as the emitter writes them
					n := min(len(recs), 50)
					if err := f.lg.Produce(t.Context(), "t", recs[:n]); err != nil {
						t.Fatal(err)
					}
					recs = recs[n:]
				}
			}
			end := f.end()

			s := New(Config{Pipeline: "p", Group: "g", Mode: tc.mode, FormatVersion: tc.version, IndexDir: filepath.Join(dir, "index"),
				Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
				CommitInterval: 50 * time.Millisecond, MaxBufferedBytes: 256 << 10, FetchBytes: 64 << 10, RetryInterval: 200 * time.Millisecond,
				Compaction: CompactionConfig{Disabled: true}, PipelineCommits: tc.pipeline}, cat, f.lg, reg, slog.New(slog.DiscardHandler))
			w := runBacklog(t, s, end) // a table that pauses is what a window reused too early does
			if commits := s.Stats()[0].Commits.Load(); commits < 4 {
				t.Errorf("%d commits; the test wants several, to reuse windows across them", commits)
			}
			if tc.pipeline && w.launched < 3 {
				t.Errorf("%d commits landed beside the loop; the test wants several", w.launched)
			}
			if w.windows.reused < 10 || w.windows.made > w.windows.reused {
				t.Errorf("windows made %d, reused %d: the pool was not used", w.windows.made, w.windows.reused)
			}
			if tc.mode == ModeUpsert {
				compareModel(t, want, scanTable(t, cat, table.Identifier{"ns", "tbl"}))
				return
			}
			got := changelogRows(t, cat)
			for k, n := range changes {
				if got[k] != n {
					t.Errorf("the changelog holds %d rows %q, want %d", got[k], k, n)
				}
			}
			if len(got) != len(changes) {
				t.Errorf("the changelog holds %d distinct rows, want %d", len(got), len(changes))
			}
		})
	}
}

// runBacklog runs the loop of s's first table until it has committed the
// log up to end, failing t if the table pauses or the loop ends first, and
// returns the writer.
func runBacklog(t *testing.T, s *Sink, end []int64) *tableWriter {
	t.Helper()
	w := &tableWriter{s: s, cfg: s.cfg.Tables[0], stats: s.stats[0], logger: s.logger, compactNow: s.compactNow[0]}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	waitFor(t, "the backlog committed", func() bool {
		if p := s.Stats()[0].Paused.Load(); p != nil {
			t.Fatalf("the table paused: %s", *p)
		}
		select {
		case err := <-done:
			t.Fatalf("the table's loop ended: %v", err)
		default:
		}
		return (&runningSink{s: s}).committedTo(end)
	})
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	return w
}

// change makes a record of op on key id with a value of about 300 bytes
// (round's), applying it to want, and counts its changelog row (the
// after-image, a delete's before-image) in changes.
func (f *feed) change(op byte, id int64, round int, want model, changes map[string]int) log.Record {
	f.t.Helper()
	pos := f.position()
	row := []any{id, fmt.Sprintf("r%d-%d-%s", round, id, strings.Repeat("x", 250+int(id%50))), id % 7}
	env := schema.Envelope{Op: op, After: row, Source: schema.SourceInfo{Position: pos}}
	if op == 'd' {
		old := strings.Split(want[id], "|")
		env.After, env.Before = nil, []any{id, old[0], id % 7}
		delete(want, id)
		changes[fmt.Sprintf("%d|%s", id, old[0])]++
	} else {
		want[id] = fmt.Sprintf("%s|%d", row[1], id%7)
		changes[fmt.Sprintf("%d|%s", id, row[1])]++
	}
	key := env.After
	if key == nil {
		key = env.Before
	}
	v, err := schema.AppendEnvelope(schema.AppendFrame(nil, f.vid), kv, &env)
	if err != nil {
		f.t.Fatal(err)
	}
	k, err := schema.AppendKey(schema.AppendFrame(nil, f.kid), kv, key)
	if err != nil {
		f.t.Fatal(err)
	}
	return log.Record{Key: k, Value: v, Partition: log.PartitionFor(k, f.parts), Headers: []log.Header{{Key: schema.HeaderPosition, Value: pos}}}
}

// changelogRows counts the changelog table's rows by "id|v".
func changelogRows(t *testing.T, cat catalog.Catalog) map[string]int {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"ns", "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	got := map[string]int{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		vs := rec.Column(rec.Schema().FieldIndices("v")[0]).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			got[fmt.Sprintf("%d|%s", ids.Value(i), vs.Value(i))]++
		}
	}
	return got
}

// TestWindowPool: a window is taken back only from minPooledWindow bytes
// and up to the pool's limit, poisoned; a read gets the smallest free one
// that fits and is at most four times its size, else a new one; a release
// without a large window empties the pool.
func TestWindowPool(t *testing.T) {
	p := newWindowPool(3 << 20)
	get := func(n int) []byte {
		b, ref := p.get(n)
		if n >= minPooledWindow && &ref[:1][0] != &b[:1][0] {
			t.Fatalf("a window of %d bytes is not its own reference", n)
		}
		return b
	}
	a, b, c := get(1<<20), get(1<<20), get(256<<10)
	if p.made != 3 || p.reused != 0 || len(a) != 1<<20 {
		t.Fatalf("made %d reused %d, length %d", p.made, p.reused, len(a))
	}
	a[0], c[0] = 1, 1
	p.release([][]byte{a, b, c, get(1 << 20)}) // the fourth is over the limit
	if len(p.free) != 3 || p.bytes != 2<<20+256<<10 {
		t.Fatalf("kept %d windows of %d bytes", len(p.free), p.bytes)
	}
	if poisonWindows && (a[0] != 0xa5 || c[0] != 0xa5) {
		t.Error("a window handed back was not poisoned")
	}
	if got := get(200 << 10); &got[:1][0] != &c[:1][0] || len(got) != 200<<10 {
		t.Error("a 200 KiB read did not get the 256 KiB window")
	}
	before := p.made
	if got := get(100 << 10); cap(got) != 100<<10 || p.made != before+1 {
		t.Errorf("a 100 KiB read took a window of %d bytes (only 1 MiB ones were free)", cap(got))
	}
	if got := get(1 << 20); cap(got) != 1<<20 || p.reused != 2 {
		t.Errorf("a 1 MiB read: a window of %d, %d reused", cap(got), p.reused)
	}
	p.release([][]byte{make([]byte, 1<<10)})
	if len(p.free) != 0 || p.bytes != 0 {
		t.Errorf("a release of small windows left %d windows, %d bytes", len(p.free), p.bytes)
	}
}

// TestWindowChunks: small reads are carved from one chunk; the chunk is
// carved again from its start only once every batch that took a piece of
// it handed it back (poisoned then), and a chunk a commit forgot (changes
// held back) is never carved again nor kept, whatever is released later.
func TestWindowChunks(t *testing.T) {
	p := newWindowPool(4 << 20)
	x, rx := p.get(1000)
	y, ry := p.get(2000)
	if len(rx) != 0 || cap(rx) < chunkBytes || &x[:1][0] != &rx[:1][0] || &y[0] != &rx[:1000+1][1000] || cap(x) != 1000 {
		t.Fatalf("two small reads were not carved one after the other from one chunk")
	}
	x[0], y[0] = 1, 2
	p.release([][]byte{rx}) // the first batch's; the second still reads y
	if y[0] != 2 {
		t.Fatal("a chunk still referred to was poisoned")
	}
	if z, _ := p.get(10); &z[0] != &rx[:3001][3000] {
		t.Fatal("a chunk still referred to was carved from its start again")
	}
	p.release([][]byte{ry, ry}) // the second batch's, and the third's (z)
	if poisonWindows && y[0] != 0xa5 {
		t.Error("a chunk handed back was not poisoned")
	}
	if z, _ := p.get(10); &z[0] != &x[:1][0] {
		t.Fatal("a chunk nothing refers to was not carved from its start again")
	}
	// A chunk filled up is replaced.
	first := unsafe.SliceData(rx)
	for i := 0; ; i++ {
		if _, r := p.get(minPooledWindow - 1); unsafe.SliceData(r) != first {
			break
		}
		if i > chunkBytes/(minPooledWindow-1) {
			t.Fatal("a full chunk was not replaced")
		}
	}
	// Forgotten: the chunk (its references are lost with the held
	// changes) is never reused.
	held, rh := p.get(100)
	p.forget([][]byte{rh})
	held[0] = 7
	p.release([][]byte{rh, rh, rh, rh, rh, rh, rh, rh})
	if held[0] != 7 {
		t.Fatal("a forgotten chunk was poisoned")
	}
	if n, _ := p.get(100); &n[0] == &held[:1][0] || (len(p.free) > 0 && &p.free[len(p.free)-1][:1][0] == &rh[:1][0]) {
		t.Fatal("a forgotten chunk was carved or kept again")
	}
}

// TestWindowsRecycledWhileTruncateWaits: a partition that reached a
// truncate waits there while another reads a backlog of several commits
// before its copy of the truncate; the windows of the waiting partition's
// fetch go round meanwhile (poisoned when handed back), so the fetcher
// must compare the second copy's position with its own copy of the first:
// the table ends with the rows after the truncate alone, not paused.
func TestWindowsRecycledWhileTruncateWaits(t *testing.T) {
	dir := t.TempDir()
	cat := testCatalog(t)
	reg := memRegistry(t)
	f := newFeed(t, filepath.Join(dir, "log"), reg, 2)
	want, changes := model{}, map[string]int{}
	produce := func(p int32, ids ...int64) {
		var recs []log.Record
		for _, id := range ids {
			rec := f.change('c', id, 0, want, changes)
			rec.Partition = p // each key in one partition all the same
			recs = append(recs, rec)
		}
		for len(recs) > 0 {
			n := min(len(recs), 50)
			if err := f.lg.Produce(t.Context(), "t", recs[:n]); err != nil {
				t.Fatal(err)
			}
			recs = recs[n:]
		}
	}
	var backlog []int64
	for id := int64(1000); id < 17000; id++ {
		backlog = append(backlog, id)
	}
	produce(0, 1, 2, 3)
	produce(1, backlog...) // about 5 MB: several commits before partition 1's truncate
	f.truncate("")
	want = model{}
	var after []int64 // enough that partition 0's fetch at its truncate reads a pooled window
	for id := int64(100); id < 600; id++ {
		after = append(after, id)
	}
	produce(0, after...)
	produce(1, 20, 21)
	end := f.end()

	s := New(Config{Pipeline: "p", Group: "g", Mode: ModeUpsert, FormatVersion: 3, IndexDir: filepath.Join(dir, "index"),
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: 50 * time.Millisecond, MaxBufferedBytes: 256 << 10, FetchBytes: 64 << 10, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Disabled: true}}, cat, f.lg, reg, slog.New(slog.DiscardHandler))
	w := runBacklog(t, s, end)
	if w.windows.reused == 0 {
		t.Error("no window was reused while the truncate waited")
	}
	compareModel(t, want, scanTable(t, cat, table.Identifier{"ns", "tbl"}))
}
