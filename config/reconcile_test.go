package config

import (
	"strings"
	"testing"
)

// TestReconcileValidation: each contradiction in the reconcile section is
// refused with its key path.
func TestReconcileValidation(t *testing.T) {
	base := `pipeline: shop
source:
  postgres:
    dsn: postgres://db/shop
    tables: [orders]
reconcile:
`
	for _, tc := range []struct{ yaml, path string }{
		{"  block_rows: 9000\n", "reconcile.block_rows"},
		{"  chunk_rows: 0\n", "reconcile.chunk_rows"},
		{"  interval: 30s\n", "reconcile.interval"},
		{"  max_rows_per_second: -1\n", "reconcile.max_rows_per_second"},
		{"  parallel: 0\n", "reconcile.parallel"},
		{"  parallel: 17\n", "reconcile.parallel"},
		{"  tables: [public.invoices]\n", "reconcile.tables[0]"},
	} {
		_, err := Parse([]byte(base+tc.yaml), "cdcd.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%q: %v, want an error at %s", tc.yaml, err, tc.path)
		}
	}
	c, err := Parse([]byte(base+"  tables: [orders]\n  interval: 1h\n"), "cdcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Reconcile; r.ChunkRows != 8192 || r.BlockRows != 256 || r.Parallel != 2 || r.StatementTimeout.Seconds() != 60 || r.Interval.Hours() != 1 {
		t.Errorf("defaults: %+v", r)
	}
}
