package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestRingPerTable: a chunk's check asks only about transactions that
// changed rows of its relations. One that changed only another table is
// not a reason to refuse, missed in progress or at xmax; one that changed
// the chunk's table (alone, with another table, or a partition of it) is.
func TestRingPerTable(t *testing.T) {
	const a, b, leaf = 1, 2, 3
	ring := newXidRing()
	ring.add(100, 1000, []uint32{a})
	ring.add(101, 1010, []uint32{b})
	ring.add(102, 1020, []uint32{b, a})
	ring.add(103, 1030, []uint32{leaf})
	ring.add(104, 1040, []uint32{b})
	ring.add(105, 1060, []uint32{a}) // after the low watermark (1050)
	none := map[uint32]bool{}
	for _, c := range []struct {
		name string
		snap pgSnapshot
		rels []uint32
		want bool // committedBefore: the chunk is refused
	}{
		{"another table's in progress", pgSnapshot{xmax: 106, xip: map[uint32]bool{101: true, 104: true}}, []uint32{a}, false},
		{"another table's at xmax", pgSnapshot{xmax: 104, xip: none}, []uint32{a}, false},
		{"its table's in progress", pgSnapshot{xmax: 106, xip: map[uint32]bool{100: true}}, []uint32{a}, true},
		{"one of both tables in progress", pgSnapshot{xmax: 106, xip: map[uint32]bool{102: true}}, []uint32{a}, true},
		{"one of both tables at xmax", pgSnapshot{xmax: 102, xip: none}, []uint32{a}, true},
		{"its table's newest before low below xmax", pgSnapshot{xmax: 103, xip: none}, []uint32{a}, false},
		{"its table's after low, in progress", pgSnapshot{xmax: 106, xip: map[uint32]bool{105: true}}, []uint32{a}, false},
		{"its table's after low, at xmax", pgSnapshot{xmax: 105, xip: none}, []uint32{a}, false},
		{"a partition's, for the root's chunk", pgSnapshot{xmax: 106, xip: map[uint32]bool{103: true}}, []uint32{a, leaf}, true},
		{"a partition's at xmax, for the root's chunk", pgSnapshot{xmax: 103, xip: none}, []uint32{a, leaf}, true},
		{"a partition's, for another table", pgSnapshot{xmax: 105, xip: map[uint32]bool{103: true}}, []uint32{b}, false},
		{"another table's, for the plan (every table)", pgSnapshot{xmax: 104, xip: none}, nil, true},
		{"a table nobody changed", pgSnapshot{xmax: 100, xip: map[uint32]bool{100: true}}, []uint32{9}, false},
	} {
		if got := ring.committedBefore(c.snap, 1050, c.rels); got != c.want {
			t.Errorf("%s: committedBefore = %v, want %v", c.name, got, c.want)
		}
	}
	// More commits of a table after the low watermark than its history
	// keeps: the check cannot see its newest before low, and refuses.
	for i := range uint32(histSize) {
		ring.add(200+i, uint64(2000+i), []uint32{a})
	}
	if !ring.committedBefore(pgSnapshot{xmax: 1000, xip: none}, 1050, []uint32{a}) {
		t.Error("history dropped past the low watermark: want refused")
	}
	if ring.committedBefore(pgSnapshot{xmax: 1000, xip: none}, 1050, []uint32{b}) {
		t.Error("another table's history is whole: want consistent")
	}
}

// insertMessage is a pgoutput Insert of (id int8, v text) into relation rel.
func insertMessage(rel uint32, id int64) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'I'}, rel)
	b = append(b, 'N', 0, 2, 'b')
	b = binary.BigEndian.AppendUint32(b, 8)
	b = binary.BigEndian.AppendUint64(b, uint64(id))
	v := fmt.Appendf(nil, "v%d", id)
	b = binary.BigEndian.AppendUint32(append(b, 'b'), uint32(len(v)))
	return append(b, v...)
}

// TestStreamRecordsChangedTables: the stream records each transaction
// with the relations its row changes and truncates were on, so the check
// of a chunk of relation 42 refuses for a missed transaction that
// inserted into it or truncated it, and not for one that changed only
// relation 43.
func TestStreamRecordsChangedTables(t *testing.T) {
	ctx := context.Background()
	s := &streamer{r: &Reader{}, emit: &keepEmitter{}, relations: map[uint32]*relation{42: rowsRel(t), 43: rowsRel(t)}}
	in := &incStream{s: s, ring: newXidRing(), eng: snapshot.New(snapshot.Config{}, nil, slog.Default())}
	s.inc = in
	for i, tx := range []struct {
		xid uint32
		do  func() error
	}{
		{200, func() error { return s.rowChange(ctx, insertMessage(43, 1), false, nil) }},
		{201, func() error { return s.rowChange(ctx, insertMessage(42, 1), false, nil) }},
		{202, func() error {
			for id := range int64(3) {
				if err := s.rowChange(ctx, insertMessage(43, 10+id), false, nil); err != nil {
					return err
				}
			}
			return nil
		}},
		{199, func() error { return s.truncate(&pglogrepl.TruncateMessage{RelationIDs: []uint32{42}}) }}, // an older xid, committed last
	} {
		lsn := uint64(1000 + 10*i)
		if err := s.apply(ctx, &pglogrepl.BeginMessage{Xid: tx.xid, FinalLSN: pglogrepl.LSN(lsn)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.do(); err != nil {
			t.Fatal(err)
		}
		in.committed(s.tx.xid, lsn)
		s.inTx = false
	}
	d := &pgDatabase{ring: in.ring}
	none := map[uint32]bool{}
	for _, c := range []struct {
		name string
		snap pgSnapshot
		want bool // consistent
	}{
		{"relation 43's transactions in progress", pgSnapshot{xmax: 204, xip: map[uint32]bool{200: true, 202: true}}, true},
		{"relation 43's at xmax", pgSnapshot{xmax: 202, xip: none}, true},
		{"relation 42's insert in progress", pgSnapshot{xmax: 204, xip: map[uint32]bool{201: true}}, false},
		{"relation 42's insert at xmax", pgSnapshot{xmax: 201, xip: none}, false},
		{"relation 42's truncate in progress", pgSnapshot{xmax: 204, xip: map[uint32]bool{199: true}}, false},
		{"everything seen", pgSnapshot{xmax: 204, xip: none}, true},
	} {
		if got := d.consistent(c.snap, []uint32{42})(pgpos.New(1100, 0)); got != c.want {
			t.Errorf("%s: consistent = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestChunkRelationsFromCatalog: a chunk's relations are its table and
// its partition tree (a root's chunk asks about its partitions at every
// level, a partition's about its ancestors, as publish_via_partition_root
// names its changes), read in the chunk's snapshot; and with a real
// snapshot that misses a running transaction (at or after its xmax), a
// commit of it recorded before the low watermark refuses the chunk when
// it changed a partition of the chunk's table, and not when it changed
// another table.
func TestChunkRelationsFromCatalog(t *testing.T) {
	e := setup(t, `CREATE TABLE plain (id int PRIMARY KEY);
		CREATE TABLE other (id int PRIMARY KEY);
		CREATE TABLE root (id int PRIMARY KEY) PARTITION BY RANGE (id);
		CREATE TABLE mid PARTITION OF root FOR VALUES FROM (0) TO (100) PARTITION BY RANGE (id);
		CREATE TABLE leaf1 PARTITION OF mid FOR VALUES FROM (0) TO (50);
		CREATE TABLE leaf2 PARTITION OF root FOR VALUES FROM (100) TO (200);
		CREATE TABLE child () INHERITS (plain)`)
	ctx := t.Context()
	r := New(e.config(t, []string{"plain", "root"}, false), e.state, slog.New(slog.DiscardHandler))
	d, conn := testDatabase(t, e, r)
	oid := func(name string) uint32 {
		var o uint32
		if err := conn.QueryRow(ctx, "SELECT $1::regclass::oid", name).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	rels := func(name string) []uint32 {
		_, got, _, _, err := d.chunkTx(ctx, "", name)
		if err != nil {
			t.Fatal(err)
		}
		d.rollback(ctx)
		slices.Sort(got)
		return got
	}
	sorted := func(names ...string) []uint32 {
		var out []uint32
		for _, n := range names {
			out = append(out, oid(n))
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		table string
		want  []uint32
	}{
		{"public.plain", sorted("plain")}, // read ONLY: not its inheritance child
		{"public.root", sorted("root", "mid", "leaf1", "leaf2")},
		{"public.mid", sorted("root", "mid", "leaf1")},
		{"public.leaf1", sorted("root", "mid", "leaf1")},
	} {
		if got := rels(c.table); !slices.Equal(got, c.want) {
			t.Errorf("%s: relations %v, want %v", c.table, got, c.want)
		}
	}

	// A transaction holding the newest xid, running while the chunk's
	// snapshot is taken: the snapshot does not see it.
	run, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close(ctx)
	tx, err := run.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var xid uint32
	if err := tx.QueryRow(ctx, "INSERT INTO leaf1 VALUES (1) RETURNING pg_current_xact_id()::text::bigint").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	snap, chunkRels, _, _, err := d.chunkTx(ctx, "", "public.root")
	if err != nil {
		t.Fatal(err)
	}
	d.rollback(ctx)
	if !snap.xip[xid] && !(xid == snap.xmax || xidAfter(xid, snap.xmax)) {
		t.Fatalf("the running transaction %d is visible to the chunk's snapshot %+v", xid, snap)
	}
	for _, c := range []struct {
		rel  uint32
		want bool
	}{{oid("leaf1"), false}, {oid("other"), true}} {
		d.ring = newXidRing()
		d.ring.add(xid, 10, []uint32{c.rel}) // as if its commit were decoded before the low watermark
		if got := d.consistent(snap, chunkRels)(pgpos.New(20, 0)); got != c.want {
			t.Errorf("the missed transaction on relation %d: the root's chunk consistent = %v, want %v", c.rel, got, c.want)
		}
	}
}

// TestIncrementalBusyOtherTable: an incremental snapshot of a table
// nobody writes, while another captured table takes a commit every few
// milliseconds (as the benchmark's lag probe does, and any busy
// database's other tables), emits every chunk it reads: a transaction
// that changed only the other table cannot make a chunk stale. Before
// session 20 such commits, often still in progress in a chunk's snapshot,
// refused chunks.
func TestIncrementalBusyOtherTable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE quiet (id int PRIMARY KEY, v text);
		INSERT INTO quiet SELECT g, 'v' || g FROM generate_series(1, 40000) g;
		CREATE TABLE busy (id int PRIMARY KEY, n bigint);
		INSERT INTO busy VALUES (1, 0)`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"quiet", "busy"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows = 64
	})
	ctx, stop := context.WithCancel(t.Context())
	var commits atomic.Int64
	done := make(chan error, 1)
	go func() {
		conn, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			done <- err
			return
		}
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			if _, err := conn.Exec(ctx, "UPDATE busy SET n = n + 1 WHERE id = 1"); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			commits.Add(1)
		}
		done <- nil
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for commits.Load() < 10 {
		time.Sleep(time.Millisecond)
	}
	snapshotTable(t, r, "public.quiet")
	tm := r.Snapshots().Timings()
	t.Logf("%d chunks, %d refused, %d commits to the other table", tm.Chunks, tm.Refused, commits.Load())
	if tm.Refused != 0 {
		t.Errorf("%d of %d chunks refused at their high watermark with only another table written", tm.Refused, tm.Chunks)
	}
	if got := len(m.state("public.quiet")); got != 40000 {
		t.Errorf("the mirror holds %d rows, want 40000", got)
	}
}
