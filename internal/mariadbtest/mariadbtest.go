// Package mariadbtest gives tests a real MariaDB (internal/mariadbserver):
// one server shared by a package's tests, a fresh database per test, and
// unique replica server ids for binlog readers.
//
// A package that uses Server or NewDB must run its tests through Main, which
// stops the shared server when they are done:
//
//	func TestMain(m *testing.M) { mariadbtest.Main(m) }
//
// When the MariaDB binaries are missing, tests that ask for a server are
// skipped with a message naming the package to install, except under CI=true,
// where they fail with that message: CI never skips silently.
//
// No server outlives the test binary: Main stops the shared one after the
// tests (also when some failed) and NewServer's are stopped in t.Cleanup. If
// the binary dies first (a panic, -timeout, ^C, SIGKILL), the kernel kills
// each mariadbd (see internal/dbproc), and the directory left behind is
// swept by a later Start. mariadbtest installs no signal handler, so tests
// may signal their own process.
package mariadbtest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
)

// shared is the package-wide server (server_id 1), started on first use.
var shared = &dbtest.Shared[*mariadbserver.Server]{
	Name:         "mariadbtest",
	Start:        func() (*mariadbserver.Server, error) { return start(mariadbserver.Options{}) },
	NotInstalled: mariadbserver.ErrNotInstalled,
}

// Main runs the package's tests, stops the shared server (if a test started
// it) and exits with the tests' status; a failure to stop makes the run fail.
// Call it from TestMain, as the package doc shows.
func Main(m *testing.M) { shared.Main(m) }

// Server returns the package's shared server (server_id 1), starting it on
// first use. Tests sharing it should each work in their own database (NewDB)
// and read the binlog with their own server id (ServerID). The test fails
// (or skips, see the package doc) when the server can't be started.
// REQUIRES: the package's TestMain calls Main.
func Server(t testing.TB) *mariadbserver.Server {
	t.Helper()
	return shared.Server(t)
}

// NewServer starts a server of the test's own, with opts (e.g. a small
// --max-binlog-size), and stops it in t.Cleanup. It does not need Main.
func NewServer(t testing.TB, opts mariadbserver.Options) *mariadbserver.Server {
	t.Helper()
	return shared.Own(t, func() (*mariadbserver.Server, error) { return start(opts) })
}

// NewDB creates a database with a name unique to this call on the shared
// server and returns a root DSN for it (go-sql-driver/mysql format; open it
// with mariadbserver.OpenDSN). The database is dropped in t.Cleanup.
// REQUIRES: the package's TestMain calls Main.
func NewDB(t testing.TB) (dsn string) {
	t.Helper()
	return NewDBOn(t, Server(t))
}

// NewDBOn is NewDB on a given server, e.g. one from NewServer.
func NewDBOn(t testing.TB, srv *mariadbserver.Server) (dsn string) {
	t.Helper()
	return shared.NewDBOn(t, srv)
}

// UniqueName returns "<kind>_<test name>_<n>": lower-case letters, digits
// and underscores, at most 63 bytes, unique within the test binary.
func UniqueName(t testing.TB, kind string) string { return dbtest.Unique(t, kind) }

var nextServerID atomic.Uint32

// ServerID returns a replica server id unique within the test binary (1001,
// 1002, ...), never the servers' own id. A binlog reader connects with it;
// two readers with one id would disconnect each other.
func ServerID(t testing.TB) uint32 {
	return 1000 + nextServerID.Add(1)
}

// start starts a server with opts, given a start bound of 3 minutes unless
// the test set one: tests run in parallel on small machines, where
// mariadb-install-db alone took over the default minute under load.
func start(o mariadbserver.Options) (*mariadbserver.Server, error) {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 3 * time.Minute
	}
	return mariadbserver.Start(context.Background(), o)
}
