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

// dropBefore is a querier that drops a table just before its at'th
// query (counting from 1): a table a caller has begun to read is gone for
// its later reads, each a statement of its own.
type dropBefore struct {
	querier
	t         *testing.T
	e         *env
	table     string
	at, calls int
}

func (d *dropBefore) before() {
	if d.calls++; d.calls == d.at {
		d.e.exec(d.t, "DROP TABLE "+d.table)
	}
}

func (d *dropBefore) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	d.before()
	return d.querier.QueryRow(ctx, sql, args...)
}

func (d *dropBefore) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.before()
	return d.querier.Query(ctx, sql, args...)
}

// TestDescribeDroppedBetween: a table dropped between the reads that
// describe it (its lookup by name, its class, its columns, its key) is
// gone (errNoTable), not a table without columns or key, nor a failure:
// the publication check, a session's start and the incremental snapshot's
// chunk bounds end that table, not the whole reader
// (TestIncrementalTableDropped lost its reader both ways under load:
// "table not found", and "has no primary key").
func TestDescribeDroppedBetween(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		at    int
		named bool
	}{
		{"after the lookup by name", 2, true},
		{"after the class", 2, false},
		{"after the columns", 3, false},
	} {
		e := setup(t, `CREATE TABLE gone (id int PRIMARY KEY, v text)`)
		var oid uint32
		if err := e.conn.QueryRow(t.Context(), "SELECT 'gone'::regclass::oid").Scan(&oid); err != nil {
			t.Fatal(err)
		}
		q := &dropBefore{querier: e.conn, t: t, e: e, table: "gone", at: tc.at}
		var err error
		if tc.named {
			_, err = describeNamed(t.Context(), q, "public", "gone")
			var te *TableError
			if !errors.As(err, &te) || te.Table != "public.gone" {
				t.Errorf("%s: %v, want a table error naming public.gone", tc.name, err)
			}
		} else {
			_, err = describeTable(t.Context(), q, oid)
		}
		if !errors.Is(err, errNoTable) {
			t.Errorf("%s: %v, want errNoTable", tc.name, err)
		}
		if q.calls < tc.at {
			t.Errorf("%s: %d reads: the table was not dropped between them", tc.name, q.calls)
		}
	}
}
