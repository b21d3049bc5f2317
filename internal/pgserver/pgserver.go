// Package pgserver starts and stops a throwaway PostgreSQL 15 server from the
// local (Debian) binaries, for tests (through internal/pgtest) and for
// `cdcd demo`. No Docker: it runs initdb and the postmaster itself.
//
// A server lives in a fresh directory /tmp/cdcd-pg-XXXX:
//
//	data/          the cluster (initdb --no-sync -A trust -U postgres -E UTF8 --locale=C)
//	postgres.log   the postmaster's stdout and stderr
//	.s.PGSQL.PORT  its unix socket
//	cdcd-owner     PIDs of the owning process and the postmaster (see internal/dbproc)
//
// It listens on 127.0.0.1 only, on a free port, with trust authentication
// for the superuser "postgres", wal_level=logical and room for 20 slots and
// walsenders. When this process runs as root, initdb and postgres run as the
// OS user "postgres" (initdb refuses root) and the directory belongs to that
// user. The postmaster is this process's child, in its own process group, and
// gets SIGQUIT (immediate shutdown) from the kernel if this process dies
// without calling Stop.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
)

// DefaultBinDir is where Debian's postgresql-15 package puts initdb and
// postgres.
const DefaultBinDir = "/usr/lib/postgresql/15/bin"

// Package is the Debian package that provides the binaries.
const Package = "postgresql-15"

// Superuser is the role DSN connects as (created by initdb -U).
const Superuser = "postgres"

// Errors.
var (
	// ErrNotInstalled: initdb or postgres is missing from the bin directory.
	// The wrapped message names the package to install.
	ErrNotInstalled = errors.New("pgserver: PostgreSQL binaries not installed")
	// ErrBadOptions: Options failed validation.
	ErrBadOptions = errors.New("pgserver: bad options")
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// BinDir holds initdb and postgres. Default DefaultBinDir.
	BinDir string
	// Settings are server settings passed as `-c name=value`, added to or
	// overriding the defaults (see DefaultSettings), e.g.
	// {"max_slot_wal_keep_size": "1MB", "log_min_messages": "debug1"}.
	// "port" is not allowed: Start picks a free port.
	Settings map[string]string
	// StartTimeout bounds initdb plus startup until the server accepts
	// connections. Default 60 s (the machines are small and busy).
	StartTimeout time.Duration
	// StopTimeout bounds the fast shutdown in Stop before the server's
	// processes get SIGKILL. Default 30 s.
	StopTimeout time.Duration
	// Logger receives one line when the server starts and one when it
	// stops. Default: discard.
	Logger *slog.Logger
}

// DefaultSettings returns the settings every server starts with; Options.
// Settings override them. synchronous_commit stays at its default (on):
// with it off, logical decoding right after a commit was seen returning no
// changes. fsync and full_page_writes are off: the data is thrown away.
func DefaultSettings() map[string]string {
	return map[string]string{
		"listen_addresses":      "127.0.0.1",
		"wal_level":             "logical",
		"max_replication_slots": "20",
		"max_wal_senders":       "20",
		"max_connections":       "100",
		"shared_buffers":        "32MB",
		"fsync":                 "off",
		"full_page_writes":      "off",
		"logging_collector":     "off",
		"huge_pages":            "off",
	}
}

func (o *Options) withDefaults() {
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 60 * time.Second
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate rejects settings Start cannot honour.
func (o *Options) Validate() error {
	for k := range o.Settings {
		switch {
		case k == "":
			return fmt.Errorf("%w: empty setting name in Settings", ErrBadOptions)
		case strings.EqualFold(k, "port"):
			return fmt.Errorf("%w: Settings may not set port; Start picks a free one", ErrBadOptions)
		}
	}
	return nil
}

// Server is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use.
type Server struct {
	binDir  string
	dir     string
	logfile string
	port    int
	logger  *slog.Logger
	stopTO  time.Duration
	// acct and settings start the postmaster again in Restart.
	acct     dbproc.Account
	settings map[string]string

	mu   sync.Mutex // guards proc, replaced by Restart
	proc *dbproc.Proc

	stopOnce sync.Once
	stopErr  error
}

// Start initialises a new cluster in a fresh directory and starts a
// postmaster on it, returning once it accepts connections. ctx bounds the
// startup (and so does Options.StartTimeout); the server itself runs until
// Stop. Errors wrap ErrNotInstalled when the binaries are missing, and
// include the tail of the server log when the server failed to come up.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := CheckInstalled(opts.BinDir); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	began := time.Now()

	acct, err := dbproc.RunAs("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	dir, err := dbproc.MakeDir("cdcd-pg-", acct)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s := &Server{
		binDir:  opts.BinDir,
		dir:     dir,
		logfile: filepath.Join(dir, "postgres.log"),
		logger:  opts.Logger,
		stopTO:  opts.StopTimeout,
	}
	if err := s.initdb(ctx, acct); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.startPostmaster(ctx, acct, opts.Settings); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.logger.Info("pgserver: started", "port", s.port, "pid", s.PID(), "dir", dir,
		"took", time.Since(began).Round(time.Millisecond))
	return s, nil
}

// CheckInstalled returns an error wrapping ErrNotInstalled, naming the
// package to install, when initdb or postgres is missing from binDir
// ("" means DefaultBinDir).
func CheckInstalled(binDir string) error {
	if binDir == "" {
		binDir = DefaultBinDir
	}
	for _, bin := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(binDir, bin)); err != nil {
			return fmt.Errorf("%w: %s is missing: install the %s package (apt-get install -y %s, or run .ci/install-deps.sh as root)",
				ErrNotInstalled, filepath.Join(binDir, bin), Package, Package)
		}
	}
	return nil
}

// env is the environment of initdb and postgres: ours without PG* variables
// (PGDATA, PGPORT ... would only confuse), with the C locale.
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LC_ALL=C", "LANG=C")
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *Server) initdb(ctx context.Context, acct dbproc.Account) error {
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(s.binDir, "initdb"),
		"-D", s.dataDir(), "--no-sync", "--no-instructions",
		"-A", "trust", "-U", Superuser, "-E", "UTF8", "--locale=C")
	cmd.Dir = s.dir // the postgres user may not enter our working directory
	cmd.Env = env()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := dbproc.Run(ctx, cmd, acct); err != nil {
		return fmt.Errorf("pgserver: initdb in %s as %s: %w\n--- initdb output ---\n%s",
			s.dataDir(), acct.Name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// maxPortTries bounds retries when another process takes the free port
// between our check and the postmaster's bind.
const maxPortTries = 5

func (s *Server) startPostmaster(ctx context.Context, acct dbproc.Account, extra map[string]string) error {
	settings := DefaultSettings()
	settings["unix_socket_directories"] = s.dir
	maps.Copy(settings, extra)
	logf, err := os.OpenFile(s.logfile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: open server log: %w", err)
	}
	defer logf.Close() // the child has its own copy

	s.acct, s.settings = acct, settings
	for try := 1; ; try++ {
		port, err := dbproc.FreePort()
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		s.port = port
		proc, err := s.launch(logf)
		if err != nil {
			return err
		}
		err = s.waitReady(ctx)
		if err == nil {
			return nil
		}
		clash := proc.Exited() && strings.Contains(dbproc.Tail(s.logfile, 20), "Address already in use")
		if stopErr := proc.Stop(syscall.SIGQUIT, 5*time.Second); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		if clash && try < maxPortTries {
			s.logger.Debug("pgserver: port taken, retrying", "port", port)
			continue
		}
		return dbproc.WithTail(fmt.Errorf("pgserver: start postgres on port %d (try %d): %w", port, try, err), s.logfile)
	}
}

// launch starts a postmaster on s.port with s.settings.
func (s *Server) launch(logf *os.File) (*dbproc.Proc, error) {
	s.settings["port"] = strconv.Itoa(s.port)
	args := []string{"-D", s.dataDir()}
	for _, k := range slices.Sorted(maps.Keys(s.settings)) {
		args = append(args, "-c", k+"="+s.settings[k])
	}
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), args...)
	cmd.Dir = s.dir
	cmd.Env = env()
	cmd.Stdout, cmd.Stderr = logf, logf
	proc, err := dbproc.Start(cmd, s.acct, syscall.SIGQUIT)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	s.mu.Lock()
	s.proc = proc
	s.mu.Unlock()
	_ = dbproc.SetServerPID(s.dir, proc.PID())
	return proc, nil
}

// Restart shuts the server down (fast shutdown: every connection ends) and
// starts it again on the same cluster and port, returning once it accepts
// connections; a test of reconnecting clients calls it. Not concurrent with
// Stop.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.getProc().Stop(syscall.SIGINT, s.stopTO); err != nil {
		return dbproc.WithTail(fmt.Errorf("pgserver: restart: stop: %w", err), s.logfile)
	}
	logf, err := os.OpenFile(s.logfile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: open server log: %w", err)
	}
	defer logf.Close()
	var last error
	for try := 0; try < 50; try++ { // the port may linger briefly
		proc, err := s.launch(logf)
		if err != nil {
			return err
		}
		if last = s.waitReady(ctx); last == nil {
			return nil
		}
		_ = proc.Stop(syscall.SIGQUIT, 5*time.Second)
		if ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return dbproc.WithTail(fmt.Errorf("pgserver: restart on port %d: %w", s.port, last), s.logfile)
}

func (s *Server) getProc() *dbproc.Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// waitReady polls until the server accepts a connection, the postmaster
// exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(s.DSN("postgres"))
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = time.Second
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
		select {
		case <-s.getProc().Done():
			return fmt.Errorf("postgres exited: %v", s.getProc().Err())
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last error: %v)", ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// Stop shuts the server down (fast shutdown: SIGINT; SIGKILL to its process
// group after Options.StopTimeout) and removes its directory, log included.
// Only the postmaster this Server started is signalled. Stop is idempotent:
// later calls return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		began := time.Now()
		var errs []error
		proc := s.getProc()
		if err := proc.Stop(syscall.SIGINT, s.stopTO); err != nil {
			errs = append(errs, dbproc.WithTail(fmt.Errorf("pgserver: stop postgres pid %d: %w", proc.PID(), err), s.logfile))
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("pgserver: remove %s: %w", s.dir, err))
		}
		s.stopErr = errors.Join(errs...)
		s.logger.Info("pgserver: stopped", "port", s.port, "pid", proc.PID(),
			"took", time.Since(began).Round(time.Millisecond), "err", s.stopErr)
	})
	return s.stopErr
}

// DSN is a postgres:// URL for database dbname as the superuser, over TCP to
// 127.0.0.1, sslmode=disable. Add `replication=database` for a logical
// replication connection.
func (s *Server) DSN(dbname string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, url.PathEscape(dbname))
}

// Port is the TCP port the server listens on (on 127.0.0.1).
func (s *Server) Port() int { return s.port }

// Dir is the server's directory (removed by Stop); the cluster is Dir()/data.
func (s *Server) Dir() string { return s.dir }

// PID is the postmaster's process id.
func (s *Server) PID() int { return s.getProc().PID() }

// BinDir is the directory of the PostgreSQL binaries the server runs
// (psql, pg_recvlogical ... are there too).
func (s *Server) BinDir() string { return s.binDir }

// Logfile is the path of the server's log (inside Dir, so gone after Stop).
func (s *Server) Logfile() string { return s.logfile }

// Exited is closed if the postmaster exits, whether through Stop or not.
func (s *Server) Exited() <-chan struct{} { return s.getProc().Done() }
