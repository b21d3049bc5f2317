package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
)

// runOnce runs a reader until it fails or 30 s pass.
func runOnce(t *testing.T, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return New(cfg, newMemState(), discard).Run(ctx, newDedupe(1))
}

// TestTablePreconditions: tables that cannot be captured are refused by
// name, all in one error, each with its fix.
func TestTablePreconditions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE nokey (a INT)", "CREATE TABLE utf16 (id INT PRIMARY KEY, s VARCHAR(5) CHARACTER SET utf16)",
		"CREATE TABLE ok (id INT PRIMARY KEY)")
	err := runOnce(t, Config{DSN: e.srv.ReplDSN(e.name), ServerID: mariadbtest.ServerID(t),
		Tables: []string{e.name + ".nokey", e.name + ".utf16", e.name + ".missing", e.name + ".ok", "nodot"}})
	var te *TableError
	if !errors.As(err, &te) {
		t.Fatalf("Run: %v, want TableErrors", err)
	}
	msg := err.Error()
	for _, want := range []string{
		e.name + ".nokey: no primary key", "ADD PRIMARY KEY",
		e.name + ".utf16 column \"s\"", "CHARACTER SET utf8mb4",
		e.name + ".missing: no such table",
		"nodot", "database.table",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, e.name+".ok") {
		t.Errorf("the good table is named:\n%s", msg)
	}
}

// TestReplicaWithoutItsUpdates: a replica that does not write what it
// replicates to its own binary log (log_slave_updates off, MariaDB's
// default) is refused: reading it, cdcd would see no replicated change.
func TestReplicaWithoutItsUpdates(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{Args: []string{"--log-slave-updates=OFF"}})
	e := newEnvOn(t, srv)
	// A replica whose primary is not there: its SQL thread runs (the user
	// cdcd reads with may not see SHOW SLAVE STATUS).
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)",
		"CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = 1, MASTER_USER = 'nobody', MASTER_CONNECT_RETRY = 60", "START SLAVE")
	defer e.db.Exec("STOP SLAVE")
	err := runOnce(t, Config{DSN: srv.ReplDSN(e.name), ServerID: mariadbtest.ServerID(t), Tables: []string{e.name + ".t"}})
	var pe *PreconditionError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "log_slave_updates is OFF") || !strings.Contains(err.Error(), "log-slave-updates=ON") {
		t.Fatalf("a replica without log_slave_updates: %v, want a PreconditionError naming it", err)
	}
}

// TestServerPreconditions: binlog settings, a binlog filter that leaves the
// captured database out, the server's own server_id and a user without
// replication privileges are refused, each with the statement that fixes
// it.
func TestServerPreconditions(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{Args: []string{"--binlog-format=MIXED", "--binlog-row-metadata=MINIMAL",
		"--binlog-do-db=cdcd_elsewhere"}})
	e := newEnvOn(t, srv)
	name := e.name
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)", "CREATE USER 'weak'@'%' IDENTIFIED BY 'weak'", "GRANT SELECT ON *.* TO 'weak'@'%'")
	err := runOnce(t, Config{DSN: srv.ReplDSN(name), ServerID: srv.ServerID(), Tables: []string{name + ".t"}})
	msg := err.Error()
	for _, want := range []string{
		"binlog_format is MIXED", "SET GLOBAL binlog_format = 'ROW'",
		"binlog_row_metadata is MINIMAL", "SET GLOBAL binlog_row_metadata = 'FULL'",
		"is the server's own id",
		"only databases cdcd_elsewhere to its binary log (binlog_do_db), not " + name, "binlog-do-db=" + name,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	var pe *PreconditionError
	if !errors.As(err, &pe) || retryable(err) {
		t.Errorf("not a terminal PreconditionError: %v", err)
	}
	weak := "mysql://weak:weak@" + srv.Addr() + "/" + name
	err = runOnce(t, Config{DSN: weak, ServerID: mariadbtest.ServerID(t), Tables: []string{name + ".t"}})
	if err == nil || !strings.Contains(err.Error(), "GRANT REPLICATION SLAVE") || !strings.Contains(err.Error(), "BINLOG MONITOR") {
		t.Errorf("a user without replication privileges: %v", err)
	}
}
