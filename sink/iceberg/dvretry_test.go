package iceberg

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// failingCatalog refuses the next fail.Load() commits.
type failingCatalog struct {
	catalog.Catalog
	fail *atomic.Int32
}

func (c failingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	if c.fail.Add(-1) >= 0 {
		return nil, "", errors.New("injected commit failure")
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// TestDVRetryAfterFailedCommit: a commit whose attempts fail after its
// deletion vectors were written (the cached vectors take new positions in
// place) lands on a retry with every vector right, and later commits build
// on it.
func TestDVRetryAfterFailedCommit(t *testing.T) {
	base := testCatalog(t)
	fail := &atomic.Int32{}
	w := upsertWriter(t, failingCatalog{base, fail}, 3, 1)
	rng := rand.New(rand.NewPCG(5, 5))
	want := model{}
	var off int64
	for i := range 12 {
		w.buf = randomChanges(rng, want, 50, &off)
		w.next[0] = off
		if i >= 2 && i%3 == 0 {
			fail.Store(2) // two attempts fail, the third lands
		}
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if fail.Load() > 0 {
			t.Fatalf("commit %d: the injected failures were not hit", i)
		}
	}
	if len(w.up.dvs) == 0 {
		t.Fatal("no deletion vectors: the test would prove nothing")
	}
	compareModel(t, want, scanTable(t, base, w.cfg.Ident))
	checkInvariants(t, base, w.cfg.Ident)
	spotCheckIndex(t, w)
}
