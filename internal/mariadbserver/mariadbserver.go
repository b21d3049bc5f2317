// Package mariadbserver starts and stops a throwaway MariaDB server (10.11
// from Debian) for tests (through internal/mariadbtest) and local demos. No
// Docker: it runs mariadb-install-db and mariadbd itself.
//
// A server lives in a fresh directory /tmp/cdcd-mariadb-XXXX:
//
//	data/          the datadir (mariadb-install-db --no-defaults
//	               --auth-root-authentication-method=normal --skip-test-db);
//	               the binlog is data/mariadb-bin.NNNNNN
//	mariadbd.log   mariadbd's stdout and stderr (its error log)
//	mysqld.sock    its unix socket
//	tmp/           its tmpdir
//	cdcd-owner     PIDs of the owning process and mariadbd (see internal/dbproc)
//
// mariadbd runs with --no-defaults (no /etc/mysql config, and never the
// apt-installed service's datadir, socket or port), listens on 127.0.0.1 on a
// free port, and writes a row-based binlog with full row images and full row
// metadata (column names, which CDC readers need), with GTID strict mode.
// root@127.0.0.1 has no password. A replication user (ReplUser) holds
// REPLICATION SLAVE, BINLOG MONITOR (REPLICATION CLIENT), SELECT, RELOAD,
// SHOW DATABASES and LOCK TABLES; neither account's creation is in the
// binlog.
//
// When this process runs as root, the install script and mariadbd run as the
// OS user "mysql" (set as the child's credentials rather than through
// mariadbd's --user, which would clear the parent-death signal when
// mariadbd switches users), and the directory belongs to that user.
// mariadbd is this process's child, in its own process group, and gets
// SIGKILL from the kernel if this process dies without calling Stop.
package mariadbserver

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
)

// Package is the Debian package that provides the binaries.
const Package = "mariadb-server"

// The accounts Start sets up.
const (
	// RootUser connects from 127.0.0.1 without a password.
	RootUser = "root"
	// ReplUser is the replication account, for CDC readers.
	ReplUser = "cdcd_repl"
	// ReplPassword is ReplUser's password.
	ReplPassword = "cdcd_repl"
)

// Host is the address every server listens on.
const Host = "127.0.0.1"

// Errors.
var (
	// ErrNotInstalled: mariadbd or mariadb-install-db can't be found. The
	// wrapped message names the package to install.
	ErrNotInstalled = errors.New("mariadbserver: MariaDB binaries not installed")
	// ErrBadOptions: Options failed validation.
	ErrBadOptions = errors.New("mariadbserver: bad options")
)

// Options configures Start. The zero value is ready to use.
type Options struct {
	// Mariadbd is the server binary. Default: mariadbd on PATH, else
	// /usr/sbin/mariadbd.
	Mariadbd string
	// InstallDB is the datadir initialisation script. Default:
	// mariadb-install-db on PATH, else /usr/bin/mariadb-install-db.
	InstallDB string
	// ServerID is the server's --server-id. Default 1. A binlog reader
	// must use a different id (see mariadbtest.ServerID).
	ServerID uint32
	// Args are extra mariadbd options ("--name=value"), placed after the
	// defaults so they override them, e.g. "--max-binlog-size=4096".
	// --port, --datadir, --socket and --defaults options are not allowed.
	Args []string
	// StartTimeout bounds initialisation plus startup until the server
	// accepts connections and the accounts exist. Default 60 s.
	StartTimeout time.Duration
	// StopTimeout bounds the shutdown after SIGTERM in Stop before
	// mariadbd gets SIGKILL. Default 30 s.
	StopTimeout time.Duration
	// Logger receives one line when the server starts and one when it
	// stops. Default: discard.
	Logger *slog.Logger
}

// defaultArgs are the mariadbd options every server gets, after
// --no-defaults and the paths and port Start chooses. Durability is traded
// for speed (the data is thrown away): no doublewrite, log flushed once a
// second, binlog not synced. Native AIO is off so many servers on one
// machine don't exhaust fs.aio-max-nr.
var defaultArgs = []string{
	"--bind-address=" + Host,
	"--skip-name-resolve",
	"--log-bin=mariadb-bin",
	"--binlog-format=ROW",
	"--binlog-row-image=FULL",
	"--binlog-row-metadata=FULL",
	"--binlog-annotate-row-events=ON",
	"--gtid-strict-mode=ON",
	"--character-set-server=utf8mb4",
	"--collation-server=utf8mb4_general_ci",
	"--max-connections=100",
	"--innodb-buffer-pool-size=64M",
	"--innodb-log-file-size=16M",
	"--innodb-use-native-aio=0",
	"--innodb-doublewrite=0",
	"--innodb-flush-log-at-trx-commit=2",
	"--sync-binlog=0",
	"--performance-schema=OFF",
	"--skip-external-locking",
}

func (o *Options) withDefaults() {
	if o.Mariadbd == "" {
		o.Mariadbd = lookBin("mariadbd", "/usr/sbin/mariadbd")
	}
	if o.InstallDB == "" {
		o.InstallDB = lookBin("mariadb-install-db", "/usr/bin/mariadb-install-db")
	}
	if o.ServerID == 0 {
		o.ServerID = 1
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

func lookBin(name, fallback string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return fallback
}

// Validate rejects options Start cannot honour.
func (o *Options) Validate() error {
	for _, a := range o.Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.ReplaceAll(name, "_", "-")
		switch {
		case !strings.HasPrefix(a, "--"):
			return fmt.Errorf("%w: Args entry %q is not a --option", ErrBadOptions, a)
		case name == "port" || name == "datadir" || name == "socket" || strings.Contains(name, "defaults"):
			return fmt.Errorf("%w: Args may not set %s; Start chooses it", ErrBadOptions, name)
		}
	}
	return nil
}

// CheckInstalled returns an error wrapping ErrNotInstalled, naming the
// package to install, when the binaries of opts (defaults as in Start) are
// missing.
func CheckInstalled(opts Options) error {
	opts.withDefaults()
	for _, bin := range []string{opts.Mariadbd, opts.InstallDB} {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("%w: %s is missing: install the %s package (apt-get install -y %s, or run .ci/install-deps.sh as root)",
				ErrNotInstalled, bin, Package, Package)
		}
	}
	return nil
}

// Server is a running throwaway MariaDB server. Its methods are safe for
// concurrent use.
type Server struct {
	dir      string
	logfile  string
	port     int
	serverID uint32
	proc     *dbproc.Proc
	logger   *slog.Logger
	stopTO   time.Duration

	stopOnce sync.Once
	stopErr  error
}

// Start initialises a datadir in a fresh directory, starts mariadbd on it
// and sets up the accounts, returning once it accepts connections. ctx bounds
// the startup (and so does Options.StartTimeout); the server runs until Stop.
// Errors wrap ErrNotInstalled when the binaries are missing, and include the
// tail of the server log when the server failed to come up.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := CheckInstalled(opts); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	began := time.Now()

	acct, err := dbproc.RunAs("mysql")
	if err != nil {
		return nil, fmt.Errorf("mariadbserver: %w", err)
	}
	dir, err := dbproc.MakeDir("cdcd-mariadb-", acct)
	if err != nil {
		return nil, fmt.Errorf("mariadbserver: %w", err)
	}
	s := &Server{
		dir:      dir,
		logfile:  filepath.Join(dir, "mariadbd.log"),
		serverID: opts.ServerID,
		logger:   opts.Logger,
		stopTO:   opts.StopTimeout,
	}
	fail := func(err error) (*Server, error) {
		if s.proc != nil {
			s.proc.Stop(syscall.SIGKILL, 5*time.Second)
		}
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.installDB(ctx, acct, opts.InstallDB); err != nil {
		return fail(err)
	}
	if err := s.startMariadbd(ctx, acct, opts); err != nil {
		return fail(err)
	}
	if err := s.setupAccounts(ctx); err != nil {
		return fail(dbproc.WithTail(err, s.logfile))
	}
	s.logger.Info("mariadbserver: started", "port", s.port, "pid", s.PID(), "dir", dir,
		"took", time.Since(began).Round(time.Millisecond))
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// env is the environment of the children: ours without MYSQL_*/MARIADB_*
// variables (MYSQL_UNIX_PORT, MYSQL_TCP_PORT ... would only confuse).
func env() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "MYSQL") || strings.HasPrefix(kv, "MARIADB") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

func (s *Server) installDB(ctx context.Context, acct dbproc.Account, script string) error {
	// The bootstrap server's temporary tables go to a tmpdir of its own:
	// in the shared /tmp, concurrent bootstraps were seen losing theirs
	// ("Unknown table 'mysql.tmp_user_sys'").
	tmp := filepath.Join(s.dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("mariadbserver: make tmpdir: %w", err)
	}
	if acct.Cred != nil {
		if err := os.Chown(tmp, acct.UID, acct.GID); err != nil {
			return fmt.Errorf("mariadbserver: chown tmpdir to %s: %w", acct.Name, err)
		}
	}
	var out bytes.Buffer
	cmd := exec.Command(script, "--no-defaults",
		"--datadir="+s.dataDir(),
		"--tmpdir="+tmp,
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
		"--skip-name-resolve",
		// passed on to the bootstrap mariadbd
		"--innodb-log-file-size=16M",
		"--innodb-use-native-aio=0",
		"--innodb-buffer-pool-size=64M")
	cmd.Dir = s.dir // the mysql user may not enter our working directory
	cmd.Env = env()
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := dbproc.Run(ctx, cmd, acct); err != nil {
		return fmt.Errorf("mariadbserver: %s in %s as %s: %w\n--- output ---\n%s",
			filepath.Base(script), s.dataDir(), acct.Name, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// maxPortTries bounds retries when another process takes the free port
// between our check and mariadbd's bind.
const maxPortTries = 5

func (s *Server) startMariadbd(ctx context.Context, acct dbproc.Account, opts Options) error {
	tmp := filepath.Join(s.dir, "tmp")
	logf, err := os.OpenFile(s.logfile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("mariadbserver: open server log: %w", err)
	}
	defer logf.Close() // the child has its own copy

	for try := 1; ; try++ {
		port, err := dbproc.FreePort()
		if err != nil {
			return fmt.Errorf("mariadbserver: %w", err)
		}
		args := []string{
			"--no-defaults", // must come first
			"--datadir=" + s.dataDir(),
			"--socket=" + s.Socket(),
			"--pid-file=" + filepath.Join(s.dir, "mariadbd.pid"),
			"--tmpdir=" + tmp,
			fmt.Sprintf("--port=%d", port),
			fmt.Sprintf("--server-id=%d", opts.ServerID),
		}
		args = append(append(args, defaultArgs...), opts.Args...)
		cmd := exec.Command(opts.Mariadbd, args...)
		cmd.Dir = s.dir
		cmd.Env = env()
		cmd.Stdout, cmd.Stderr = logf, logf
		proc, err := dbproc.Start(cmd, acct, syscall.SIGKILL)
		if err != nil {
			return fmt.Errorf("mariadbserver: %w", err)
		}
		s.port, s.proc = port, proc
		_ = dbproc.SetServerPID(s.dir, proc.PID())
		err = s.waitReady(ctx)
		if err == nil {
			return nil
		}
		clash := proc.Exited() && strings.Contains(dbproc.Tail(s.logfile, 20), "Address already in use")
		if stopErr := proc.Stop(syscall.SIGKILL, 5*time.Second); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		s.proc = nil
		if clash && try < maxPortTries {
			s.logger.Debug("mariadbserver: port taken, retrying", "port", port)
			continue
		}
		return dbproc.WithTail(fmt.Errorf("mariadbserver: start mariadbd on port %d (try %d): %w", port, try, err), s.logfile)
	}
}

// waitReady polls until root can connect over TCP, mariadbd exits, or ctx
// ends.
func (s *Server) waitReady(ctx context.Context) error {
	db, err := s.Open("")
	if err != nil {
		return err
	}
	defer db.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-s.proc.Done():
			return fmt.Errorf("mariadbd exited: %v", s.proc.Err())
		case <-ctx.Done():
			return fmt.Errorf("not accepting connections: %w (last error: %v)", ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// setupAccounts creates the replication user, keeping it out of the binlog.
func (s *Server) setupAccounts(ctx context.Context) error {
	db, err := s.Open("")
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mariadbserver: connect as root: %w", err)
	}
	defer conn.Close()
	for _, stmt := range []string{
		"SET SESSION sql_log_bin = 0",
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", ReplUser, ReplPassword),
		fmt.Sprintf("GRANT SELECT, RELOAD, SHOW DATABASES, LOCK TABLES, REPLICATION SLAVE, "+
			"REPLICATION CLIENT, BINLOG MONITOR ON *.* TO '%s'@'%%'", ReplUser),
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("mariadbserver: set up accounts: %s: %w", stmt, err)
		}
	}
	return nil
}

// Stop shuts mariadbd down (SIGTERM; SIGKILL after Options.StopTimeout) and
// removes its directory, log and binlogs included. Only the mariadbd this
// Server started is signalled. Stop is idempotent: later calls return the
// first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		began := time.Now()
		var errs []error
		if err := s.proc.Stop(syscall.SIGTERM, s.stopTO); err != nil {
			errs = append(errs, dbproc.WithTail(fmt.Errorf("mariadbserver: stop mariadbd pid %d: %w", s.proc.PID(), err), s.logfile))
		}
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("mariadbserver: remove %s: %w", s.dir, err))
		}
		s.stopErr = errors.Join(errs...)
		s.logger.Info("mariadbserver: stopped", "port", s.port, "pid", s.proc.PID(),
			"took", time.Since(began).Round(time.Millisecond), "err", s.stopErr)
	})
	return s.stopErr
}

// Host is the address the server listens on: "127.0.0.1".
func (s *Server) Host() string { return Host }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// Addr is "127.0.0.1:<port>".
func (s *Server) Addr() string { return fmt.Sprintf("%s:%d", Host, s.port) }

// ServerID is the server's server_id.
func (s *Server) ServerID() uint32 { return s.serverID }

// Socket is the path of the server's unix socket.
func (s *Server) Socket() string { return filepath.Join(s.dir, "mysqld.sock") }

// Dir is the server's directory (removed by Stop); the datadir is
// Dir()/data.
func (s *Server) Dir() string { return s.dir }

// PID is mariadbd's process id.
func (s *Server) PID() int { return s.proc.PID() }

// Logfile is the path of the server's log (inside Dir, so gone after Stop).
func (s *Server) Logfile() string { return s.logfile }

// Exited is closed if mariadbd exits, whether through Stop or not.
func (s *Server) Exited() <-chan struct{} { return s.proc.Done() }

// DSN is a go-sql-driver/mysql DSN for database dbname ("" for none) as
// root over TCP: "root@tcp(127.0.0.1:PORT)/dbname". Append "?param=value"
// for driver parameters.
func (s *Server) DSN(dbname string) string { return s.dsn(RootUser, "", dbname) }

// ReplDSN is DSN as ReplUser.
func (s *Server) ReplDSN(dbname string) string { return s.dsn(ReplUser, ReplPassword, dbname) }

func (s *Server) dsn(user, password, dbname string) string {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd = user, password
	cfg.Net, cfg.Addr = "tcp", s.Addr()
	cfg.DBName = dbname
	return cfg.FormatDSN()
}

// Open returns a *sql.DB for database dbname ("" for none) as root. It
// uses the driver's connector, not the global driver registry.
func (s *Server) Open(dbname string) (*sql.DB, error) {
	return OpenDSN(s.DSN(dbname))
}

// OpenDSN returns a *sql.DB for a go-sql-driver/mysql DSN, through the
// driver's connector rather than the global driver registry.
func OpenDSN(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mariadbserver: parse DSN: %w", err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mariadbserver: %w", err)
	}
	return sql.OpenDB(conn), nil
}
