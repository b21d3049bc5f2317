package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestStreamBacklogCommittedAtCatchUp: a stream that reads a backlog of
// WAL (here held back, then read slowly enough that the sink keeps up
// with the log, so the sink's own backlog rule never fires) is committed
// as soon as the source catches up with the server, with a commit
// interval of 4 minutes; the changes after it, with no backlog, wait for
// the interval as before.
// pgCatchUpDaemon runs a daemon that captures public.filler (created
// with ddl's other tables) with a 4-minute commit interval, until the
// test ends; it returns once the daemon streams.
func pgCatchUpDaemon(t *testing.T, ddl string) (d *daemon.Daemon, conn *pgx.Conn, logs *syncBuffer, done chan error) {
	t.Helper()
	dsn := pgtest.NewDB(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `CREATE TABLE filler (id bigint PRIMARY KEY, pad text);`+ddl); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	slot := pgtest.UniqueName(t, "slot")
	yaml := fmt.Sprintf(`pipeline: e2e
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [public.filler]
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: upsert
    commit_interval: 4m
admin:
  listen: "off"
`, dir, dsn, slot, slot)
	d, logs, done = runCatchUpDaemon(t, dir, yaml)
	return d, conn, logs, done
}

// runCatchUpDaemon writes yaml as dir's config and runs a daemon on it,
// with its log at debug level, until the test ends (then closed, its log
// printed if the test failed); it returns once the daemon streams.
func runCatchUpDaemon(t *testing.T, dir, yaml string) (*daemon.Daemon, *syncBuffer, chan error) {
	t.Helper()
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("daemon: %v", err)
		}
		_ = d.Close()
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs)
		}
	})
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
	return d, logs, done
}

// holdIntake holds the daemon's intake and writes one change to filler,
// returning once the source tries to append it.
func holdIntake(t *testing.T, d *daemon.Daemon, conn *pgx.Conn) (resume func()) {
	t.Helper()
	resume, held := d.PauseIntake()
	if _, err := conn.Exec(t.Context(), `INSERT INTO filler VALUES (0, 'first')`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never tried to append the held change")
	}
	return resume
}

func TestStreamBacklogCommittedAtCatchUp(t *testing.T) {
	t.Parallel()
	d, conn, logs, done := pgCatchUpDaemon(t, "")

	// The backlog: about 30 MB of WAL written while the source is held,
	// then read in batches spaced 300 ms apart.
	resume := holdIntake(t, d, conn)
	const rows = 100_000
	for i := int64(0); i < rows; i += 1000 { // transactions of 1,000 rows
		if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, repeat(md5(g::text), 4) FROM generate_series($1::bigint, $1::bigint + 999) g`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	resume() // (it clears the gate: the slow one goes after it)
	stop := d.SlowIntake(300 * time.Millisecond)
	sink := d.SinkStats()[0]
	waitFor(t, "the backlog committed", func() bool { return sink.Rows.Load() >= rows+1 }, done)
	stop()
	if !strings.Contains(logs.String(), "stream caught up with the server") {
		t.Error("the source never said it caught up")
	}
	commits := sink.Commits.Load()
	// 100,001 rows of about 200 bytes: a commit per 8 MiB buffer at most,
	// and the one at the catch-up.
	if commits > 6 {
		t.Errorf("%d commits for the backlog", commits)
	}
	// After it, no backlog: ten rows wait for the interval.
	if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, 'after' FROM generate_series($1::bigint, $1::bigint + 9) g`, rows+1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if c := sink.Commits.Load(); c != commits {
		t.Errorf("%d commits after ten more rows with no backlog, want %d (a 4-minute interval)", c, commits)
	}
}

// TestUnrelatedWALIsNoBacklog: a stream far behind the server's WAL end
// because of WAL it does not capture (a table outside the publication
// here; other databases on a shared server alike) announces no catch-up
// when it gets there, and the sink keeps holding its changes for the
// interval. (It announced one before, and on the fault suite's shared
// server a table committed what a 2-minute interval was meant to hold.)
func TestUnrelatedWALIsNoBacklog(t *testing.T) {
	t.Parallel()
	d, conn, logs, done := pgCatchUpDaemon(t, `CREATE TABLE other (id bigint, pad text)`)
	const reached = "stream reached the server's end it was behind"
	notes := strings.Count(logs.String(), reached) // other tests' WAL on the shared server too
	sink := d.SinkStats()[0]
	resume := holdIntake(t, d, conn)
	// A little of our own (more than one append's worth), then about
	// 60 MB of WAL the walsender skips, then five rows of ours.
	for i := int64(0); i < 9000; i += 3000 {
		if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, 'own' FROM generate_series($1::bigint, $1::bigint + 2999) g`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO other SELECT g, repeat(md5(g::text), 8) FROM generate_series(1, 200000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO filler SELECT g, 'last' FROM generate_series(9001, 9005) g`); err != nil {
		t.Fatal(err)
	}
	resume()
	// Appends a second apart: the stream is behind the other table's WAL
	// for a few lag checks.
	stop := d.SlowIntake(time.Second)
	defer stop()
	waitFor(t, "the stream past the other table's WAL", func() bool {
		l := logs.String()
		return strings.Count(l, reached) > notes || strings.Contains(l, "stream caught up with the server")
	}, done)
	waitFor(t, "the changes appended", func() bool { return d.SourceStats().Events.Load() >= 9006 }, done)
	time.Sleep(2 * time.Second)
	if strings.Contains(logs.String(), "stream caught up with the server") {
		t.Error("the source announced a catch-up after WAL it does not capture")
	}
	if n := sink.Rows.Load(); n != 0 {
		t.Errorf("%d rows committed within a 4-minute interval, want none", n)
	}
}

// TestMySQLStreamBacklogCommittedAtCatchUp is TestStreamBacklogCommittedAtCatchUp
// on MariaDB: the binlog reader compares its position with the binlog's
// end (SHOW BINARY LOGS) and says when it has read past it.
func TestMySQLStreamBacklogCommittedAtCatchUp(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	rootDSN := mariadbtest.NewDBOn(t, srv)
	db, err := mariadbserver.OpenDSN(rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE filler (id BIGINT PRIMARY KEY, pad VARCHAR(300))`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	yaml := fmt.Sprintf(`pipeline: my
data_dir: %q
source:
  mysql:
    dsn: "mysql://%s:%s@%s/%s"
    server_id: %d
    tables: [%s.filler]
    snapshot: never
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    commit_interval: 4m
admin:
  listen: "off"
`, dir, mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), name, mariadbtest.ServerID(t), name)
	d, logs, done := runCatchUpDaemon(t, dir, yaml)

	resume, held := d.PauseIntake()
	if _, err := db.Exec(`INSERT INTO filler VALUES (0, 'first')`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the source never tried to append the held change")
	}
	// About 25 MB of binlog in transactions of 1,000 rows.
	const rows = 100_000
	for i := int64(0); i < rows; i += 1000 {
		if _, err := db.Exec(`INSERT INTO filler SELECT seq, REPEAT(MD5(seq), 6) FROM seq_1_to_100000 WHERE seq BETWEEN ? AND ?`, i+1, i+1000); err != nil {
			t.Fatal(err)
		}
	}
	resume()
	stop := d.SlowIntake(300 * time.Millisecond)
	sink := d.SinkStats()[0]
	waitFor(t, "the backlog committed", func() bool { return sink.Rows.Load() >= rows+1 }, done)
	stop()
	if !strings.Contains(logs.String(), "stream caught up with the server") {
		t.Error("the source never said it caught up")
	}
	commits := sink.Commits.Load()
	if _, err := db.Exec(`INSERT INTO filler SELECT seq, 'after' FROM seq_1_to_200000 WHERE seq BETWEEN ? AND ?`, rows+1, rows+10); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if c := sink.Commits.Load(); c != commits {
		t.Errorf("%d commits after ten more rows with no backlog, want %d (a 4-minute interval)", c, commits)
	}
}
