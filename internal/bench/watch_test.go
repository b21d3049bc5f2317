package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestWatcherReadsTheMetadataItNeeds: the watcher's poll through the
// catalog's row and a lean read of the metadata file gives the state
// iceberg-go's LoadTable gives, after each of several commits (one of them
// without offsets, as a compaction's), and a poll that finds the same file
// reads nothing more.
func TestWatcherReadsTheMetadataItNeeds(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	cfg := icebergsink.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Name: "cdcd",
		Warehouse: "file://" + filepath.Join(dir, "warehouse")}
	ident := table.Identifier{"ns", "t"}
	w, err := openWatcher(ctx, cfg, ident)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	cat := w.cat
	loc, ok := cat.(metadataLocator)
	if !ok {
		t.Fatal("the SQL catalog names no metadata location: every poll loads the table")
	}
	// The watcher's polls may not load the table: each must take the
	// catalog's row and the lean read.
	w.cat = noLoads{cat, loc}
	if st, err := w.poll(ctx); err != nil || st.snapshotID != 0 {
		t.Fatalf("before the table: %+v, %v; want the zero state", st, err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"ns"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, err := cat.CreateTable(ctx, ident, sc)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.poll(ctx); err != nil || st.snapshotID != 0 {
		t.Fatalf("a table without snapshots: %+v, %v; want the zero state", st, err)
	}
	asc, err := table.SchemaToArrowSchema(sc, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, props := range []iceberg.Properties{
		{icebergsink.PropOffsets: `{"0":3,"1":4}`, icebergsink.PropSourcePosition: "00000000000001f0"},
		{icebergsink.PropOffsets: `{"0":6,"1":9}`, icebergsink.PropSourcePosition: "00000000000002f0"},
		{}, // no offsets: the state is the last ancestor's that has them
		{icebergsink.PropOffsets: `{"0":10,"1":9,"2":1}`, icebergsink.PropSourcePosition: "00000000000003f0"},
	} {
		b := array.NewInt64Builder(memory.DefaultAllocator)
		b.AppendValues([]int64{int64(2 * i), int64(2*i + 1)}, nil)
		col := b.NewArray()
		rec := array.NewRecord(asc, []arrow.Array{col}, 2)
		at := array.NewTableFromRecords(asc, []arrow.Record{rec})
		if tbl, err = tbl.AppendTable(ctx, at, 10, props); err != nil {
			t.Fatal(err)
		}
		at.Release()
		rec.Release()
		col.Release()

		got, err := w.poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if w.loc != tbl.MetadataLocation() { // what the lean path read
			t.Fatalf("commit %d: the watcher read %q, the table's metadata is %q", i, w.loc, tbl.MetadataLocation())
		}
		data, err := os.ReadFile(strings.TrimPrefix(w.loc, "file://"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok := readState(data); !ok {
			t.Fatalf("commit %d: the lean read does not decode the metadata file iceberg-go wrote", i)
		}
		want, _ := stateOf(tbl.CurrentSnapshot(), tbl.Metadata().SnapshotByID)
		if got.snapshotID != want.snapshotID || got.rows != want.rows || got.rows != int64(2*i+2) || got.lsn != want.lsn ||
			got.consumed != want.consumed || fmt.Sprint(got.offsets) != fmt.Sprint(want.offsets) {
			t.Fatalf("commit %d: the watcher's state %+v, iceberg-go's %+v", i, got, want)
		}
		again, err := w.poll(ctx)
		if err != nil || !again.seen.Equal(got.seen) || again.snapshotID != got.snapshotID {
			t.Fatalf("commit %d: a poll of the same file: %+v, %v; want the state seen before", i, again, err)
		}
	}
	if w.last.consumed != 20 || w.last.lsn != 0x3f0 {
		t.Fatalf("the last state: %+v; want 20 records consumed, position 3f0", w.last)
	}
}

// noLoads is a catalog whose LoadTable fails: a poll that loads the table
// instead of reading the catalog's row and the file fails.
type noLoads struct {
	catalog.Catalog
	metadataLocator
}

func (noLoads) LoadTable(context.Context, table.Identifier) (*table.Table, error) {
	return nil, errors.New("the watcher loaded the table")
}
