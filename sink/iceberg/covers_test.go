package iceberg

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestRowsWithAColumnTheTableLacks: a row whose version has a column the
// table's schema lacks (evolve adds it first; here evolve is passed over)
// fails the commit, naming the column, on the direct (encoded) path and on
// the generic one, instead of being written without its value.
func TestRowsWithAColumnTheTableLacks(t *testing.T) {
	base := &schema.Table{Namespace: "public", Name: "kv", Columns: kv.Columns[:2], Key: []int{0}}
	added := &schema.Table{Namespace: "public", Name: "kv", Columns: append(append([]schema.Column(nil), kv.Columns[:2]...),
		schema.Column{Name: "memo", Kind: schema.String, Nullable: true}), Key: []int{0}}
	mk := func(tbl *schema.Table, off int64, after []any) change {
		c := change{table: tbl, offset: off, env: &schema.Envelope{Op: 'c', After: after}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return c
	}
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprint("direct=", direct), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, 2, 1)
			defer w.close()
			w.buf, w.next[0] = []change{mk(base, 0, []any{int64(1), "a"})}, 1
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			c := mk(added, 1, []any{int64(2), "b", "kept"})
			if direct {
				c = encoded(c)
			}
			w.buf, w.next[0] = []change{c}, 2
			w.files = newAttemptFiles()
			err := w.mode().attempt(t.Context(), iceberg.Properties{})
			if err == nil || !strings.Contains(err.Error(), `column "memo" of public.kv is not in table`) {
				t.Fatalf("attempt without evolving: %v, want the missing column named", err)
			}
		})
	}
}
