package iceberg

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestUpsertUnchangedAfterAddColumn: a value that arrives unchanged is
// taken from the key's current row even when that row is in a data file
// written before a column was added: the new column reads as NULL there
// (Iceberg's rule for an optional column a file lacks). Found by the crash
// suite (internal/crashsuite): ALTER TABLE ADD COLUMN, then an UPDATE
// leaving a TOASTed column alone paused the table ("data file lacks column").
func TestUpsertUnchangedAfterAddColumn(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	kv2 := &schema.Table{Namespace: "public", Name: "kv", Columns: append(append([]schema.Column(nil), kv.Columns...),
		schema.Column{Name: "extra", Kind: schema.String, Nullable: true}), Key: []int{0}}
	mk := func(tbl *schema.Table, op byte, off int64, after []any) change {
		c := change{table: tbl, offset: off, env: &schema.Envelope{Op: op, After: after, Before: append([]any{after[0]}, make([]any, len(after)-1)...)}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return c
	}
	w.buf = []change{mk(kv, 'c', 0, []any{int64(1), "big value", int64(1)}), mk(kv, 'c', 1, []any{int64(2), "other", int64(1)})}
	w.next[0] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{mk(kv2, 'u', 2, []any{int64(1), schema.Unchanged, int64(2), "new"})}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	compareModel(t, model{1: "big value|2", 2: "other|1"}, scanTable(t, cat, w.cfg.Ident))
	w.close()
}
