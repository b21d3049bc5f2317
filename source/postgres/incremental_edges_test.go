package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// waitProgress waits until every run has finished and returns them.
func waitProgress(t *testing.T, r *Reader, runs int, timeout time.Duration) []snapshot.Progress {
	t.Helper()
	var p []snapshot.Progress
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p = r.Snapshots().Progress()
		done := 0
		for _, x := range p {
			if !x.Finished.IsZero() {
				done++
			}
		}
		if done == runs && len(p) == runs {
			return p
		}
	}
	t.Fatalf("the snapshots did not finish within %s: %+v", timeout, p)
	return nil
}

// TestIncrementalIdle: a snapshot on a database nobody writes to, with the
// reader's heartbeat off, still completes: each watermark is a
// transaction of its own, flushed at its commit, so the stream delivers
// the window's closing mark without another write.
func TestIncrementalIdle(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"hot"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows = 500
		c.HeartbeatInterval = -1
	})
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.hot", Replace: true, Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	p := waitProgress(t, r, 1, 90*time.Second)
	if p[0].State != "done" || p[0].Rows != 3000 {
		t.Errorf("progress %+v, want done with 3000 rows", p[0])
	}
	compareMirror(t, m, e.conn, "hot")
}

// TestIncrementalTableDropped: a table dropped while its snapshot runs
// ends that run as failed, naming the table; the snapshot queued after
// it runs, and the stream goes on.
func TestIncrementalTableDropped(t *testing.T) {
	t.Parallel()
	e := setup(t, incrementalTable+`; CREATE TABLE calm (id int PRIMARY KEY, v text, big text);
		INSERT INTO calm SELECT g, 'c' || g, NULL FROM generate_series(1, 800) g`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"hot", "calm"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows = 100
		c.Incremental.MaxRowsPerSecond = 1000 // the drop lands mid-snapshot
		c.PublicationCheckInterval = 50 * time.Millisecond
	})
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.hot", Replace: true, Origin: "test"},
		snapshot.Request{Table: "public.calm", Replace: true, Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if p := r.Snapshots().Progress(); len(p) > 0 && p[0].Table == "public.hot" && p[0].Rows >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot of hot did not get going: %+v", r.Snapshots().Progress())
		}
	}
	e.exec(t, "DROP TABLE hot")
	var hot, calm snapshot.Progress
	for _, x := range waitProgress(t, r, 2, 90*time.Second) {
		switch x.Table {
		case "public.hot":
			hot = x
		case "public.calm":
			calm = x
		}
	}
	if hot.State != "failed" || !strings.Contains(hot.Error, "public.hot") || hot.Rows >= 3000 {
		t.Errorf("the dropped table's run: %+v, want failed mid-way with an error naming public.hot", hot)
	}
	if calm.State != "done" || calm.Rows != 800 {
		t.Errorf("the run queued after it: %+v, want done with 800 rows", calm)
	}
	e.exec(t, "INSERT INTO calm VALUES (-1, 'end', NULL)")
	waitSettled(t, r, m, "public.calm", -1)
	compareMirror(t, m, e.conn, "calm")
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.faults["public.hot"]; len(f) == 0 || !strings.Contains(f[0], "dropped") {
		t.Errorf("the dropped table's stream: faults %q, want one saying it was dropped", f)
	}
}

// TestIncrementalReplicaIdentityIndex: a table without a primary key whose
// replica identity is a unique index on a not-null column is snapshotted
// by that index's key (PostgreSQL's form of issue 17's snapshot_key),
// while a writer changes its rows (leaving the TOASTed column unchanged):
// the mirror ends equal to the table.
func TestIncrementalReplicaIdentityIndex(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nopk (id int NOT NULL, v text, big text);
		CREATE UNIQUE INDEX nopk_id ON nopk (id);
		ALTER TABLE nopk REPLICA IDENTITY USING INDEX nopk_id;
		ALTER TABLE nopk ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO nopk SELECT g, 'v' || g, repeat(chr(97 + g % 26), 3000) FROM generate_series(1, 2000) g`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"nopk"}, false, m, func(c *Config) {
		c.Incremental.ChunkRows, c.Incremental.SplitRows = 200, 200
	})
	if err := r.Snapshots().Submit(t.Context(), snapshot.Request{Table: "public.nopk", Replace: true, Origin: "test"}); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		e.exec(t, "UPDATE nopk SET v = 'u' || $1::int WHERE id = $2", i, 1990-i*37)
	}
	waitProgress(t, r, 1, 90*time.Second)
	e.exec(t, "INSERT INTO nopk VALUES (-1, 'end', NULL)")
	waitSettled(t, r, m, "public.nopk", -1)
	compareMirror(t, m, e.conn, "nopk")
	if m.resets["public.nopk"] != 1 {
		t.Errorf("%d reset markers, want 1", m.resets["public.nopk"])
	}
}

// dropAfterFirst is a querier that drops a table right after its first
// query: the table a caller just looked up is gone when it describes it.
type dropAfterFirst struct {
	querier
	t       *testing.T
	e       *env
	table   string
	queries int
}

func (d *dropAfterFirst) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	row := d.querier.QueryRow(ctx, sql, args...)
	if d.queries++; d.queries == 1 {
		var oid uint32
		err := row.Scan(&oid)
		d.e.exec(d.t, "DROP TABLE "+d.table)
		return fixedRow{oid, err}
	}
	return row
}

type fixedRow struct {
	oid uint32
	err error
}

func (r fixedRow) Scan(dest ...any) error {
	if r.err == nil {
		*dest[0].(*uint32) = r.oid
	}
	return r.err
}

// TestDescribeNamedDroppedBetween: a table dropped between its lookup by
// name and its description is a table error (errNoTable) naming it, as a
// table that does not exist is: the publication check and a session's
// start end that table, not the whole reader (TestIncrementalTableDropped
// lost its reader this way about once in eight runs under load).
func TestDescribeNamedDroppedBetween(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE gone (id int PRIMARY KEY)`)
	q := &dropAfterFirst{querier: e.conn, t: t, e: e, table: "gone"}
	_, err := describeNamed(t.Context(), q, "public", "gone")
	var te *TableError
	if !errors.Is(err, errNoTable) || !errors.As(err, &te) || te.Table != "public.gone" {
		t.Fatalf("describeNamed of a table dropped after its lookup: %v, want a table error for public.gone wrapping errNoTable", err)
	}
	if q.queries < 2 {
		t.Fatalf("%d queries: the table was not described after its lookup", q.queries)
	}
}
