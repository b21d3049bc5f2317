package iceberg

import (
	"context"
	"runtime"
	"testing"

	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestTableFSDoesNotChain: the table a commit leaves behind must open files
// without going through the tables before it. Built with the old table's
// FS method as its loader, each commit added one call to every file open
// and kept the old table (metadata, manifest cache) alive: 5 GB and 8% of
// the CPU after 10,000 commits.
func TestTableFSDoesNotChain(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	commit := func(i int) {
		t.Helper()
		w.buf = []change{encoded(change{table: kv, env: &schema.Envelope{Op: 'c', After: []any{int64(i), "v", int64(i)}}})}
		w.next[0] = int64(i + 1)
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	commit(0)

	// A loader that records how deep in the stack it is called.
	depth := -1
	fs, err := w.tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	probe := func(context.Context) (icebergio.IO, error) {
		depth = runtime.Callers(0, make([]uintptr, 4096))
		return fs, nil
	}
	w.tbl = table.New(w.tbl.Identifier(), w.tbl.Metadata(), w.tbl.MetadataLocation(), probe, cat)
	openFS := func() int {
		depth = -1
		if _, err := w.tbl.FS(t.Context()); err != nil {
			t.Fatal(err)
		}
		return depth
	}
	first := openFS()
	for i := 1; i <= 20; i++ {
		commit(i)
	}
	if d := openFS(); d > first+2 {
		t.Fatalf("after 20 commits the table's loader runs %d frames deep, %d at the first: each commit wraps the one before", d, first)
	}
}
