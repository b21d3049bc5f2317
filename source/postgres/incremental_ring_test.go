package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestXidRingCommittedBefore: a chunk's read is inconsistent when a
// transaction it did not see — in its snapshot's in-progress list, or at
// or after its xmax — was delivered before the low watermark; one
// delivered after it, or seen by the snapshot, does not matter.
func TestXidRingCommittedBefore(t *testing.T) {
	ring := newXidRing()
	for i, xid := range []uint32{100, 103, 101, 104} { // commit order, not xid order
		ring.add(xid, uint64(1000+10*i), []uint32{7}) // LSNs 1000, 1010, 1020, 1030; all on relation 7
	}
	for _, c := range []struct {
		name string
		snap pgSnapshot
		low  uint64
		want bool
	}{
		{"every delivered transaction seen", pgSnapshot{xmax: 105, xip: map[uint32]bool{}}, 1035, false},
		{"an in-progress one delivered before low", pgSnapshot{xmax: 105, xip: map[uint32]bool{101: true}}, 1035, true},
		{"an in-progress one delivered after low", pgSnapshot{xmax: 105, xip: map[uint32]bool{104: true}}, 1025, false},
		{"one at xmax delivered before low (absent from the list)", pgSnapshot{xmax: 104, xip: map[uint32]bool{}}, 1035, true},
		{"one after xmax delivered before low", pgSnapshot{xmax: 102, xip: map[uint32]bool{}}, 1015, true},
		{"the newest before low below xmax", pgSnapshot{xmax: 104, xip: map[uint32]bool{}}, 1025, false},
		{"nothing before low", pgSnapshot{xmax: 90, xip: map[uint32]bool{}}, 1000, false},
	} {
		if got := ring.committedBefore(c.snap, c.low, nil); got != c.want {
			t.Errorf("%s: committedBefore = %v, want %v", c.name, got, c.want)
		}
		if got := ring.committedBefore(c.snap, c.low, []uint32{7}); got != c.want {
			t.Errorf("%s, asking about its relation: committedBefore = %v, want %v", c.name, got, c.want)
		}
	}
	// Across the xid space's end and once the ring has wrapped.
	ring = newXidRing()
	base := uint32(0xffff0000)
	for i := range uint32(ringSize + 10) {
		ring.add(base+i, uint64(i+1), []uint32{7, 8})
	}
	newest := base + ringSize + 9 // wrapped past 2^32
	for _, rels := range [][]uint32{nil, {8}} {
		if !ring.committedBefore(pgSnapshot{xmax: newest, xip: map[uint32]bool{}}, ringSize+11, rels) {
			t.Errorf("relations %v: a transaction at xmax past the wrap was not caught", rels)
		}
		if ring.committedBefore(pgSnapshot{xmax: newest + 1, xip: map[uint32]bool{}}, ringSize+11, rels) {
			t.Errorf("relations %v: every transaction below xmax past the wrap: want consistent", rels)
		}
	}
}

// TestSnapshotOmitsNewestRunning pins the PostgreSQL behaviour the ring's
// xmax check exists for: a running transaction holding the newest xid is
// not in a new snapshot's in-progress list (it is at or after xmax), yet
// the snapshot does not see its rows.
func TestSnapshotOmitsNewestRunning(t *testing.T) {
	ctx := context.Background()
	dsn, xid := pgtest.NewestRunning(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&text); err != nil {
		t.Fatal(err)
	}
	snap, err := parseSnapshot(text)
	if err != nil {
		t.Fatal(err)
	}
	x := uint32(xid)
	if !snap.xip[x] && !(x == snap.xmax || xidAfter(x, snap.xmax)) {
		t.Fatalf("snapshot %s: the running transaction %d is neither in progress nor at or after xmax", text, xid)
	}
	ring := newXidRing()
	ring.add(x, 10, []uint32{1}) // as if its commit were decoded before the low watermark
	if !ring.committedBefore(snap, 20, nil) {
		t.Fatalf("snapshot %s: a chunk read by it would be taken as consistent though transaction %d is invisible to it", text, xid)
	}
}
