package iceberg

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
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

// TestEncodeDV: the sink's own encoding of a deletion vector is what
// iceberg-go's SerializeDV writes, and one left without run containers
// (a vector encoded before) still reads back whole.
func TestEncodeDV(t *testing.T) {
	u := &upsert{}
	for _, tc := range []struct {
		name string
		fill func(*dv.RoaringPositionBitmap)
	}{
		{"random", func(b *dv.RoaringPositionBitmap) {
			rng := rand.New(rand.NewPCG(9, 9))
			for range 20000 {
				b.Set(rng.Uint64N(1 << 22))
			}
		}},
		{"ranges", func(b *dv.RoaringPositionBitmap) { b.SetRange(10, 200000); b.SetRange(1<<32, 1<<32+70000) }},
		{"sparse over buckets", func(b *dv.RoaringPositionBitmap) { b.Set(3); b.Set(1 << 33); b.Set(5 << 32) }},
	} {
		mk := func() *dv.RoaringPositionBitmap { b := dv.NewRoaringPositionBitmap(); tc.fill(b); return b }
		want, err := dv.SerializeDV(mk())
		if err != nil {
			t.Fatal(err)
		}
		got, err := u.encodeDV(mk(), true)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoded %d bytes differ from SerializeDV's %d", tc.name, len(got), len(want))
		}
		plain, err := u.encodeDV(mk(), false)
		if err != nil {
			t.Fatal(err)
		}
		back, err := dv.DeserializeDV(plain, mk().Cardinality())
		if err != nil {
			t.Fatalf("%s: read back: %v", tc.name, err)
		}
		for p := range mk().Positions() {
			if !back.Contains(p) {
				t.Fatalf("%s: position %d lost", tc.name, p)
			}
		}
	}
}

// TestWithPositions: a commit's positions merged into a vector — none
// yet, or one encoded before (run containers) — give exactly the union,
// across 32-bit buckets; a negative position is refused.
func TestWithPositions(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	want := map[uint64]bool{}
	var bm *dv.RoaringPositionBitmap
	for round := range 4 {
		var positions []int64
		for range 3000 {
			p := rng.Int64N(200_000)
			if round%2 == 1 {
				p = rng.Int64N(3000) // dense: runs
			}
			if rng.IntN(50) == 0 {
				p += 1 << 32 // another bucket
			}
			positions = append(positions, p)
			want[uint64(p)] = true
		}
		slices.Sort(positions)
		var err error
		if bm, err = withPositions(bm, positions); err != nil {
			t.Fatal(err)
		}
		bm.RunLengthEncode() // as encodeDV leaves a vector
		if bm.Cardinality() != int64(len(want)) {
			t.Fatalf("round %d: cardinality %d, want %d", round, bm.Cardinality(), len(want))
		}
		for p := range bm.Positions() {
			if !want[p] {
				t.Fatalf("round %d: position %d set, never asked for", round, p)
			}
		}
	}
	if _, err := withPositions(bm, []int64{5, -1}); err == nil {
		t.Error("a negative position was accepted")
	}
}
