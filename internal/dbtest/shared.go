package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cleanupTimeout bounds each cleanup step (drop a database, drop a slot).
const cleanupTimeout = 30 * time.Second

// Server is what internal/pgserver's and internal/mariadbserver's servers
// both offer the test helpers.
type Server interface {
	comparable
	Stop() error
	CreateDatabase(ctx context.Context, name string) error
	DropDatabase(ctx context.Context, name string) error
	DSN(dbname string) string
}

// Shared is a package-wide server of kind S, started on first use and
// stopped by Main after the package's tests: the machinery behind pgtest's
// and mariadbtest's Main, Server, NewServer and NewDBOn.
type Shared[S Server] struct {
	// Name prefixes messages ("pgtest").
	Name string
	// Start starts a server; NotInstalled is the error it wraps when the
	// binaries are missing.
	Start        func() (S, error)
	NotInstalled error

	mu      sync.Mutex
	inMain  bool // Main is running the tests
	started bool // Start was attempted; srv or err is set
	srv     S
	err     error
}

// Main runs the package's tests, stops the shared server (if a test started
// it), runs atExit (e.g. removing what the tests built once for all of
// them) and exits with the tests' status; a failure to stop makes the run
// fail.
func (s *Shared[S]) Main(m *testing.M, atExit ...func()) {
	s.mu.Lock()
	s.inMain = true
	s.mu.Unlock()

	code := m.Run()

	s.mu.Lock()
	srv := s.srv
	var zero S
	s.srv, s.err = zero, errors.New(s.Name+": shared server already stopped by Main")
	s.mu.Unlock()
	if srv != zero {
		if err := srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, s.Name+":", err)
			if code == 0 {
				code = 1
			}
		}
	}
	for _, f := range atExit {
		f()
	}
	os.Exit(code)
}

// Server returns the shared server, starting it on first use. The test
// fails (or skips, see MissingBinaries) when it can't be started.
// REQUIRES: the package's TestMain calls Main.
func (s *Shared[S]) Server(t testing.TB) S {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inMain {
		t.Fatalf("%[1]s: the package's TestMain must call %[1]s.Main(m) so the shared server is stopped: "+
			"func TestMain(m *testing.M) { %[1]s.Main(m) }", s.Name)
	}
	if !s.started {
		s.started = true
		s.srv, s.err = s.Start()
	}
	if s.err != nil {
		s.unavailable(t, s.err)
	}
	return s.srv
}

// Running returns the shared server if it runs.
func (s *Shared[S]) Running() (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var zero S
	return s.srv, s.srv != zero
}

// Own returns a server of the test's own, started by start, and stops it
// in t.Cleanup. It does not need Main.
func (s *Shared[S]) Own(t testing.TB, start func() (S, error)) S {
	t.Helper()
	srv, err := start()
	if err != nil {
		s.unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	})
	return srv
}

// NewDBOn creates a database with a name unique to this call on srv and
// returns its DSN; the database is dropped in t.Cleanup.
func (s *Shared[S]) NewDBOn(t testing.TB, srv S) (dsn string) {
	t.Helper()
	name := Unique(t, "db")
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := srv.CreateDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	})
	return srv.DSN(name)
}

// Cleanup runs f with the shared server in t.Cleanup, if it runs then,
// bounded by the cleanup timeout; f's error fails t.
func (s *Shared[S]) Cleanup(t testing.TB, f func(ctx context.Context, srv S) error) {
	t.Cleanup(func() {
		srv, ok := s.Running()
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := f(ctx, srv); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
	})
}

// unavailable ends a test that could not get a server: skip when the
// binaries are missing (fail under CI=true), fail otherwise.
func (s *Shared[S]) unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, s.NotInstalled) {
		MissingBinaries(t, err)
	}
	t.Fatal(err)
}

var seq atomic.Uint64

// Unique returns "<kind>_<test name>_<n>" (UniqueName), unique within the
// test binary.
func Unique(t testing.TB, kind string) string {
	return UniqueName(t.Name(), kind, seq.Add(1))
}
