package iceberg

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// deleteKey produces a delete of key id and returns its tombstone, to be
// produced later.
func (f *feed) deleteKey(id int64) log.Record {
	f.t.Helper()
	pos := f.position()
	row := []any{id, fmt.Sprintf("v%d", id), int64(id % 7)}
	env := schema.Envelope{Op: 'd', Before: row, Source: schema.SourceInfo{Position: pos}}
	v, err := schema.AppendEnvelope(schema.AppendFrame(nil, f.vid), kv, &env)
	if err != nil {
		f.t.Fatal(err)
	}
	k, err := schema.AppendKey(schema.AppendFrame(nil, f.kid), kv, row)
	if err != nil {
		f.t.Fatal(err)
	}
	h := []log.Header{{Key: schema.HeaderPosition, Value: pos}}
	p := log.PartitionFor(k, f.parts)
	if err := f.lg.Produce(f.t.Context(), "t", []log.Record{{Key: k, Value: v, Partition: p, Headers: h}}); err != nil {
		f.t.Fatal(err)
	}
	return log.Record{Key: k, Partition: p, Headers: h}
}

// TestTombstoneCommitted (issue 22): a delete's tombstone (no value) makes
// no row, and its offset is committed even when it is the last record of
// its partition and fetched after its delete was committed (a fetch may
// end between the two): the table is not left a record behind, which the
// daemon would report as lag until the table's next change.
func TestTombstoneCommitted(t *testing.T) {
	for _, mode := range []string{ModeUpsert, ModeAppend} {
		t.Run(mode, func(t *testing.T) {
			cat := testCatalog(t)
			reg := memRegistry(t)
			f := newFeed(t, t.TempDir(), reg, 2)
			f.upsert(1, 2, 3)
			r := startSink(t, cat, f.lg, reg, mode, t.TempDir())
			waitFor(t, "the inserts committed", func() bool { return r.committedTo(f.end()) })
			tomb := f.deleteKey(2)
			waitFor(t, "the delete committed", func() bool { return r.committedTo(f.end()) })
			if err := f.lg.Produce(t.Context(), "t", []log.Record{tomb}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "its tombstone committed", func() bool { return r.committedTo(f.end()) })
			r.stop()
			if mode == ModeUpsert {
				wantKeys(t, tableKeys(t, cat), 1, 3)
			} else if rows := countRows(t, cat); rows != 4 {
				t.Errorf("the changelog holds %d rows; 3 inserts and a delete make 4 (a tombstone none)", rows)
			}
		})
	}
}

// countRows is how many rows table ns.tbl holds.
func countRows(t *testing.T, cat catalog.Catalog) int64 {
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
	return at.NumRows()
}
