package iceberg

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/internal/icebergcheck"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestFileProblemsSeesTwoVectors: the invariant check the tests rely on
// (internal/icebergcheck) reports a data file with two live deletion
// vectors. The table gets them from a commit that adds a vector without
// removing the one before it — what the sink must never do, and its own
// producer refuses, so the commit goes through iceberg-go's RowDelta, which
// allows it (iceberg-go issue 1868).
func TestFileProblemsSeesTwoVectors(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	mk := func(op byte, off int64, id int64) change {
		c := change{table: kv, offset: off, env: &schema.Envelope{Op: op, After: []any{id, "v", off}, Before: []any{id, nil, nil}}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return encoded(c)
	}
	w.buf = []change{mk('c', 0, 1), mk('c', 1, 2)}
	w.next[0] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{mk('u', 2, 1)}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if problems, err := icebergcheck.FileProblems(t.Context(), w.tbl); err != nil || len(problems) != 0 {
		t.Fatalf("a good table: %v %v", problems, err)
	}
	if len(w.up.dvs) != 1 {
		t.Fatalf("%d live vectors, want 1", len(w.up.dvs))
	}
	var old iceberg.DataFile
	for _, d := range w.up.dvs {
		old = d
	}
	// Stage the next update, then drop the removal of the vector it merges.
	w.buf = []change{mk('u', 3, 2)}
	w.files = newAttemptFiles()
	p, err := w.up.stage(t.Context(), w, w.tbl, w.buf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.batch.discard()
	if len(p.removedDVs) != 1 || p.removedDVs[0].FilePath() != old.FilePath() {
		t.Fatalf("the plan removes %v, want the old vector", p.removedDVs)
	}
	p.removedDVs = nil
	if err := w.produce(t.Context(), p, iceberg.Properties{}); err == nil || !strings.Contains(err.Error(), "two live vectors") {
		t.Fatalf("the sink's producer committed a second live vector: %v", err)
	}
	tx := w.tbl.NewTransaction()
	if err := tx.NewRowDelta(nil).AddDeletes(p.deletes...).Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := icebergcheck.FileProblems(t.Context(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "has 2 live deletion vectors") {
		t.Fatalf("problems = %q, want one data file with 2 live deletion vectors", problems)
	}
	w.close()
}
