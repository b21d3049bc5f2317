package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// asRole returns dsn with its user replaced.
func asRole(t *testing.T, dsn, role string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// wantPrecondition checks that err is a *PreconditionError whose text has
// every one of want, and that nothing was created on the server.
func wantPrecondition(t *testing.T, e *env, err error, want ...string) {
	t.Helper()
	var pe *PreconditionError
	if !errorsAs(err, &pe) {
		t.Fatalf("error %v, want a *PreconditionError", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	var pubs, slots int
	if err := e.conn.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pg_publication WHERE pubname = $1),
		(SELECT count(*) FROM pg_replication_slots WHERE slot_name = $2)`, e.names.Publication, e.names.Slot).Scan(&pubs, &slots); err != nil {
		t.Fatal(err)
	}
	if pubs != 0 || slots != 0 {
		t.Errorf("a refused start left %d publications and %d slots behind", pubs, slots)
	}
}

// runUntilError runs a reader that must fail before it streams.
func runUntilError(t *testing.T, cfg Config, e *env) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return New(cfg, e.state, discard).Run(ctx, newCollector())
}

// TestPreflightWALLevel: on a server with wal_level = replica the reader
// stops before creating anything, naming the setting and the restart.
func TestPreflightWALLevel(t *testing.T) {
	t.Parallel()
	srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"wal_level": "replica"}})
	dsn := pgtest.NewDBOn(t, srv)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	e := &env{dsn: dsn, conn: conn, names: pgtest.Names(t), state: &memState{}}
	e.exec(t, `CREATE TABLE w (id int PRIMARY KEY)`)
	err = runUntilError(t, e.config(t, []string{"w"}, true), e)
	wantPrecondition(t, e, err, "wal_level = replica", "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")
}

// TestPreflightRole: a role without REPLICATION, one without SELECT on a
// table it loads, and one that cannot create the missing publication are
// each refused before anything is created, with the statement that fixes it.
func TestPreflightRole(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE o (id int PRIMARY KEY)`)
	role := pgtest.UniqueName(t, "role")
	e.exec(t, `CREATE ROLE `+role+` LOGIN`)
	t.Cleanup(func() {
		_, _ = e.conn.Exec(context.Background(), `DROP OWNED BY `+role+` CASCADE`)
		_, _ = e.conn.Exec(context.Background(), `DROP ROLE `+role)
	})
	cfg := e.config(t, []string{"o"}, true)
	cfg.DSN = asRole(t, e.dsn, role)

	q := func(s string) string { return `"` + s + `"` }
	err := runUntilError(t, cfg, e)
	wantPrecondition(t, e, err, "lacks the REPLICATION attribute", "ALTER ROLE "+q(role)+" WITH REPLICATION;")

	e.exec(t, `ALTER ROLE `+role+` WITH REPLICATION`)
	err = runUntilError(t, cfg, e)
	wantPrecondition(t, e, err, `lacks SELECT on "public"."o"`, `GRANT SELECT ON "public"."o" TO `+q(role)+";")

	e.exec(t, `GRANT SELECT ON o TO `+role)
	err = runUntilError(t, cfg, e)
	var db string
	if err := e.conn.QueryRow(t.Context(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	create := "CREATE PUBLICATION " + q(e.names.Publication) + ` FOR TABLE "public"."o"`
	wantPrecondition(t, e, err, "may not create it", "GRANT CREATE ON DATABASE "+q(db)+" TO "+q(role)+";", create)

	e.exec(t, `GRANT CREATE ON DATABASE `+db+` TO `+role)
	err = runUntilError(t, cfg, e)
	wantPrecondition(t, e, err, `does not own "public"."o"`, create)

	// Created by the owner as told, the pipeline starts.
	e.exec(t, `CREATE PUBLICATION `+e.names.Publication+` FOR TABLE o WITH (publish_via_partition_root = true)`)
	if _, err := runOnce(t, &env{dsn: cfg.DSN, conn: e.conn, names: e.names, state: e.state}, []string{"o"}, true); err != nil {
		t.Fatal(err)
	}
}

// TestForeignSlotInUse: a slot another process streams from is refused
// naming that process, never with advice to drop it.
func TestForeignSlotInUse(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE s (id int PRIMARY KEY); CREATE PUBLICATION other_pub FOR TABLE s`)
	e.exec(t, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, e.names.Slot)
	other, err := pgconn.Connect(t.Context(), replicationDSN(e.dsn)+"&application_name=other_consumer")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if err := pglogrepl.StartReplication(t.Context(), other, e.names.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'other_pub'"}}); err != nil {
		t.Fatal(err)
	}
	_, err = runOnce(t, e, []string{"s"}, true)
	wantSlotError(t, err, SlotForeign)
	for _, want := range []string{"in use right now by pid", `application_name "other_consumer"`, "do not drop it", "source.postgres.slot"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "pg_drop_replication_slot") {
		t.Errorf("error %q advises dropping a slot in use", err)
	}
}

// TestSlotCreationWaitReported: while a transaction that holds an xid is
// open, creating the slot waits; the reader says which backend it waits
// for, its query and since when — in the log, repeatedly, and in
// Stats.Waiting — and starts once the transaction ends.
func TestSlotCreationWaitReported(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE lt (id int PRIMARY KEY)`)
	blocker, err := pgx.Connect(t.Context(), e.dsn+"&application_name=long_tx")
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(context.Background())
	var pid int
	if err := blocker.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := blocker.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(t.Context(), `INSERT INTO lt VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	cfg := e.config(t, []string{"lt"}, false)
	cfg.WaitReportInterval = 200 * time.Millisecond
	r := New(cfg, e.state, newBufferLogger(logs))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, newCollector()) }()

	var waiting string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Slot creation waits for every transaction of the cluster: a
		// parallel test's may be named first.
		if w := r.Stats().Waiting.Load(); w != nil && strings.Contains(*w, "pid "+itoa(pid)) {
			waiting = *w
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stats.Waiting never named the blocking transaction; log:\n%s", logs)
		}
	}
	for _, want := range []string{"pid " + itoa(pid), `application_name "long_tx"`, "INSERT INTO lt", "transaction open since"} {
		if !strings.Contains(waiting, want) {
			t.Errorf("waiting %q does not say %q", waiting, want)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); strings.Count(logs.String(), "waits for transactions") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the wait was not reported again; log:\n%s", logs)
		}
	}
	if !strings.Contains(logs.String(), "pg_terminate_backend") {
		t.Errorf("the log does not say how to end the wait:\n%s", logs)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !r.Stats().Streaming.Load(); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("reader stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader did not stream once the transaction ended")
		}
	}
	if w := r.Stats().Waiting.Load(); w != nil {
		t.Errorf("still waiting %q after the slot was created", *w)
	}
}
