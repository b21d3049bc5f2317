package compactor

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
)

func key(k int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(k)) }

// memRewriter holds data files as key-sorted rows of one int64 column.
type memRewriter struct {
	t       *testing.T
	files   map[string][]int64
	created []string
}

func (m *memRewriter) Open(df iceberg.DataFile) (Rows, error) {
	return &memRows{keys: m.files[df.FilePath()], i: -1}, nil
}

func (m *memRewriter) Create(name string, first []any) (FileWriter, error) {
	m.created = append(m.created, name)
	return &memWriter{m: m, name: name}, nil
}

type memRows struct {
	keys []int64
	i    int
	row  []any
}

func (r *memRows) Next() (bool, error) {
	r.i++
	if r.i >= len(r.keys) {
		return false, nil
	}
	r.row = []any{r.keys[r.i]}
	return true, nil
}
func (r *memRows) Pos() int64  { return int64(r.i) }
func (r *memRows) Row() []any  { return r.row }
func (r *memRows) Key() []byte { return key(r.keys[r.i]) }
func (r *memRows) Close()      {}

type memWriter struct {
	m    *memRewriter
	name string
	keys []int64
}

func (w *memWriter) Add(row []any) error { w.keys = append(w.keys, row[0].(int64)); return nil }
func (w *memWriter) Size() int           { return 8 * len(w.keys) }
func (w *memWriter) Abort()              {}
func (w *memWriter) Finish() (iceberg.DataFile, error) {
	w.m.files[w.name] = w.keys
	return testDataFile(w.m.t, w.name, int64(len(w.keys)), int64(w.Size())), nil
}

// memTable is a Table whose rewrites are only recorded.
type memTable struct {
	files     []File
	deleted   map[string]*dv.RoaringPositionBitmap
	committed *Rewrite
}

func (m *memTable) Current() *table.Table          { return nil }
func (m *memTable) Files() []File                  { return m.files }
func (m *memTable) DeleteFiles() int               { return 0 }
func (m *memTable) Manifests() (data, deletes int) { return 0, 0 }
func (m *memTable) Deleted(context.Context, []iceberg.DataFile) (map[string]*dv.RoaringPositionBitmap, error) {
	return m.deleted, nil
}
func (m *memTable) Rewriter(context.Context) (Rewriter, error) { return nil, nil }
func (m *memTable) CommitRewrite(_ context.Context, r *Rewrite) error {
	m.committed = r
	return nil
}
func (m *memTable) CommitMaintenance(context.Context, *table.Transaction) error { return nil }
func (m *memTable) Pending() []string                                           { return nil }

func positions(ps ...uint64) *dv.RoaringPositionBitmap {
	bm := dv.NewRoaringPositionBitmap()
	for _, p := range ps {
		bm.Set(p)
	}
	return bm
}

// TestRewriteAndCommit: the merge writes the files' rows live at the plan
// in key order, rolling files at MaxRows; its commit deletes in the new
// files the rows deleted in the old ones meanwhile and moves every other
// copied key, and only those.
func TestRewriteAndCommit(t *testing.T) {
	a, b := testDataFile(t, "a", 4, 32), testDataFile(t, "b", 4, 32)
	rw := &memRewriter{t: t, files: map[string][]int64{"a": {1, 3, 5, 7}, "b": {2, 4, 6, 8}}}
	run := &compaction{id: "0123456789abcdef0123456789abcdef", old: []iceberg.DataFile{a, b},
		oldDV: []*dv.RoaringPositionBitmap{positions(1), nil}, done: make(chan struct{})} // key 3 deleted when planned
	cc := CompactionConfig{MaxRows: 4}.WithDefaults()
	if err := run.rewrite(context.Background(), rw, cc); err != nil {
		t.Fatal(err)
	}
	var got [][]int64
	for _, df := range run.newFiles {
		got = append(got, rw.files[df.FilePath()])
	}
	if fmt.Sprint(got) != "[[1 2 4 5] [6 7 8]]" {
		t.Fatalf("new files hold %v, want [[1 2 4 5] [6 7 8]] (key 3 was deleted, 4 rows a file)", got)
	}
	if fmt.Sprint(run.moved) != "[[{0 0} {-1 0} {0 3} {1 1}] [{0 1} {0 2} {1 0} {1 2}]]" {
		t.Errorf("moved %v", run.moved)
	}

	// Meanwhile the writer deleted key 5 (a@2) and key 8 (b@3).
	mt := &memTable{files: []File{{DataFile: a, Deleted: 2}, {DataFile: b, Deleted: 1}},
		deleted: map[string]*dv.RoaringPositionBitmap{"a": positions(1, 2), "b": positions(3)}}
	c := New(cc, MaintenanceConfig{}, mt, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := c.commit(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	r := mt.committed
	if r == nil || r.ID != run.id || len(r.Old) != 2 || len(r.New) != 2 {
		t.Fatalf("committed %+v", r)
	}
	n0, n1 := run.newFiles[0].FilePath(), run.newFiles[1].FilePath()
	if !slices.Equal(r.Deleted[n0], []int64{3}) || !slices.Equal(r.Deleted[n1], []int64{2}) || len(r.Deleted) != 2 {
		t.Errorf("deleted in the new files %v, want %s@3 (key 5) and %s@2 (key 8)", r.Deleted, n0, n1)
	}
	var moves []string
	r.Moves(func(k []byte, file string, pos int64) {
		moves = append(moves, fmt.Sprintf("%d>%s@%d", binary.BigEndian.Uint64(k), file, pos))
	})
	want := []string{"1>" + n0 + "@0", "2>" + n0 + "@1", "4>" + n0 + "@2", "6>" + n1 + "@0", "7>" + n1 + "@1"}
	if !slices.Equal(moves, want) {
		t.Errorf("moves %v, want %v", moves, want)
	}
}

// TestFinishPlansNextWhenCapped: a compaction that left files of its
// group for the merge's memory (capped) makes the next plan due at once;
// one that took its whole group leaves the next an Interval away.
func TestFinishPlansNextWhenCapped(t *testing.T) {
	for _, capped := range []bool{true, false} {
		a, b := testDataFile(t, "a", 2, 16), testDataFile(t, "b", 2, 16)
		rw := &memRewriter{t: t, files: map[string][]int64{"a": {1, 3}, "b": {2, 4}}}
		run := &compaction{id: "0123456789abcdef0123456789abcdef", old: []iceberg.DataFile{a, b},
			oldDV: []*dv.RoaringPositionBitmap{nil, nil}, capped: capped, done: make(chan struct{})}
		cc := CompactionConfig{}.WithDefaults()
		if err := run.rewrite(context.Background(), rw, cc); err != nil {
			t.Fatal(err)
		}
		mt := &memTable{files: []File{{DataFile: a}, {DataFile: b}}}
		c := New(cc, MaintenanceConfig{}, mt, slog.New(slog.NewTextHandler(io.Discard, nil)))
		c.run, c.lastPlan = run, time.Now()
		if err := c.Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		if mt.committed == nil {
			t.Fatalf("capped %v: the rewrite was not committed", capped)
		}
		if due := time.Since(c.lastPlan) >= cc.Interval; due != capped {
			t.Errorf("capped %v: next plan due at once %v, want %v", capped, due, capped)
		}
	}
}
