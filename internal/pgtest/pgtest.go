// Package pgtest gives tests a real PostgreSQL 15 (internal/pgserver): one
// server shared by a package's tests, a fresh database per test, and unique
// slot and publication names.
//
// A package that uses Server, NewDB or Names must run its tests through Main,
// which stops the shared server when they are done:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// When the PostgreSQL binaries are missing, tests that ask for a server are
// skipped with a message naming the package to install, except under CI=true,
// where they fail with that message: CI never skips silently.
//
// No server outlives the test binary: Main stops the shared one after the
// tests (also when some failed) and NewServer's are stopped in t.Cleanup. If
// the binary dies first (a panic, -timeout, ^C, SIGKILL), the kernel sends
// each postmaster SIGQUIT (see internal/dbproc), and the directory left
// behind is swept by a later Start. pgtest installs no signal handler, so
// tests may signal their own process.
package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
)

// shared is the package-wide server, started on first use.
var shared = &dbtest.Shared[*pgserver.Server]{
	Name:         "pgtest",
	Start:        func() (*pgserver.Server, error) { return pgserver.Start(context.Background(), pgserver.Options{}) },
	NotInstalled: pgserver.ErrNotInstalled,
}

// Main runs the package's tests, stops the shared server (if a test started
// it), runs atExit and exits with the tests' status; a failure to stop makes
// the run fail. Call it from TestMain, as the package doc shows.
func Main(m *testing.M, atExit ...func()) { shared.Main(m, atExit...) }

// Server returns the package's shared server, starting it on first use.
// Tests sharing it should each work in their own database (NewDB) and use
// unique slot and publication names (Names). The test fails (or skips, see
// the package doc) when the server can't be started.
// REQUIRES: the package's TestMain calls Main.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	return shared.Server(t)
}

// NewServer starts a server of the test's own, with opts (e.g. settings the
// shared one must not have), and stops it in t.Cleanup. It does not need
// Main.
func NewServer(t testing.TB, opts pgserver.Options) *pgserver.Server {
	t.Helper()
	return shared.Own(t, func() (*pgserver.Server, error) { return pgserver.Start(context.Background(), opts) })
}

// NewDB creates a database with a name unique to this call on the shared
// server and returns its DSN (a postgres:// URL, superuser, trust auth). In
// t.Cleanup the database is dropped after its backends are terminated and
// its replication slots dropped.
// REQUIRES: the package's TestMain calls Main.
func NewDB(t testing.TB) (dsn string) {
	t.Helper()
	return NewDBOn(t, Server(t))
}

// NewDBOn is NewDB on a given server, e.g. one from NewServer.
func NewDBOn(t testing.TB, srv *pgserver.Server) (dsn string) {
	t.Helper()
	return shared.NewDBOn(t, srv)
}

// TestNames are names unique to one call of Names.
type TestNames struct {
	// Slot is a replication slot name.
	Slot string
	// Publication is a publication name.
	Publication string
}

// Names returns slot and publication names unique within the test binary
// (lower case, at most 63 bytes, derived from the test's name). Slots of a
// NewDB database are dropped with it; in addition, if the shared server is
// running at cleanup, a slot of this name is dropped there (a physical slot,
// or one in a database NewDB didn't make). Publications live in their
// database and go with it.
func Names(t testing.TB) TestNames {
	t.Helper()
	n := TestNames{Slot: UniqueName(t, "slot"), Publication: UniqueName(t, "pub")}
	shared.Cleanup(t, func(ctx context.Context, srv *pgserver.Server) error { return srv.DropSlot(ctx, n.Slot) })
	return n
}

// UniqueName returns "<kind>_<test name>_<n>": lower-case letters, digits
// and underscores, at most 63 bytes (PostgreSQL's identifier and slot name
// limit), unique within the test binary.
func UniqueName(t testing.TB, kind string) string { return dbtest.Unique(t, kind) }

// NewestRunning makes a new database whose table running_xact has one row
// inserted by a transaction left open until the test ends, and returns the
// database and that transaction's xid: the newest xid there, so it is at
// or after the xmax of any snapshot taken meanwhile (PostgreSQL leaves it
// out of the snapshot's in-progress list, though the row is invisible).
func NewestRunning(t testing.TB) (dsn string, xid uint64) {
	t.Helper()
	ctx := context.Background()
	dsn = NewDB(t)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "CREATE TABLE running_xact (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if err := tx.QueryRow(ctx, "INSERT INTO running_xact VALUES (1) RETURNING pg_current_xact_id()::text::bigint").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	return dsn, xid
}
