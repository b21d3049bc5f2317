package postgres

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestRingSkipsTransactionsWithoutChanges: the consistency check records
// only transactions whose changes the stream delivered. A chunk's
// snapshot that misses a transaction holding nothing but a watermark
// (another reader's, committed just before this chunk's low watermark and
// not yet out of the proc array) read no stale row: consistent. One that
// misses a transaction with a row change is not.
func TestRingSkipsTransactionsWithoutChanges(t *testing.T) {
	s := &streamer{}
	in := &incStream{s: s, ring: newXidRing()}
	s.tx = txState{xid: 100, commitLSN: 1000}
	in.begin()
	in.touched(7) // a row change of relation 7
	in.committed(s.tx.xid, s.tx.commitLSN)
	s.tx = txState{xid: 101, commitLSN: 1010} // a watermark's: no change delivered
	in.begin()
	in.committed(s.tx.xid, s.tx.commitLSN)
	d := &pgDatabase{ring: in.ring}
	for _, c := range []struct {
		name string
		snap pgSnapshot
		want bool
	}{
		{"the watermark's transaction in progress", pgSnapshot{xmax: 102, xip: map[uint32]bool{101: true}}, true},
		{"the watermark's transaction at xmax", pgSnapshot{xmax: 101, xip: map[uint32]bool{}}, true},
		{"the changing transaction in progress", pgSnapshot{xmax: 102, xip: map[uint32]bool{100: true}}, false},
		{"the changing transaction at xmax", pgSnapshot{xmax: 100, xip: map[uint32]bool{}}, false},
		{"both seen", pgSnapshot{xmax: 102, xip: map[uint32]bool{}}, true},
	} {
		if got := d.consistent(c.snap, []uint32{7})(pgpos.New(1020, 0)); got != c.want {
			t.Errorf("%s: consistent = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestIncrementalNoChunkRefused: an incremental snapshot of a table nobody
// writes, in many small chunks read three at a time, emits every chunk
// it reads: none is read again because of the other readers' watermark
// transactions (each committed just before another chunk's low
// watermark, and often still in progress in that chunk's snapshot: before
// session 19 such a chunk was read again, with the chunks after it).
func TestIncrementalNoChunkRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE quiet (id int PRIMARY KEY, v text);
		INSERT INTO quiet SELECT g, 'v' || g FROM generate_series(1, 40000) g`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"quiet"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows = 64 // about 600 chunks: the watermarks a few milliseconds apart
	})
	snapshotTable(t, r, "public.quiet")
	tm := r.Snapshots().Timings()
	t.Logf("%d chunks, %d refused", tm.Chunks, tm.Refused)
	if tm.Refused != 0 {
		t.Errorf("%d of %d chunks refused at their high watermark (read for nothing) with no writes to the table", tm.Refused, tm.Chunks)
	}
	if got := len(m.state("public.quiet")); got != 40000 {
		t.Errorf("the mirror holds %d rows, want 40000", got)
	}
}

// snapshotTable requests an incremental snapshot of table from r's engine
// and waits (90 s at most) until it has finished.
func snapshotTable(t *testing.T, r *Reader, table string) {
	t.Helper()
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: table, Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if p := r.Snapshots().Progress(); len(p) > 0 && !p[0].Finished.IsZero() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot of %s not done: %+v", table, r.Snapshots().Progress())
		}
	}
}
