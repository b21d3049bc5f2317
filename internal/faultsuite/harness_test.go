package faultsuite

// The harness: one PostgreSQL database and one cdcd pipeline (the real
// binary, as a child process) per test, with helpers to change rows, wait
// for the pipeline, inject faults and check the outcome. Tests in this
// package run in parallel (t.Parallel) where they can; each has its own
// database, slot, data directory and admin port.
//
// A test reads like this:
//
//	p := newPipeline(t, pipelineOptions{DDL: `CREATE TABLE a (id int PRIMARY KEY, v text)`, Tables: []string{"public.a"}})
//	p.exec(`INSERT INTO a SELECT g, 'x' FROM generate_series(1, 100) g`)
//	p.start()
//	p.waitCaughtUp()
//	… inject the fault …
//	p.requireMirror("public.a")                       // ends in a correct mirror, or
//	ts := p.waitPaused("cdc.a", "the reason's words") // a loud stop of that table
//	p.requireAlert(AlertTablePaused, "cdc.a", "the fix's words")
//	… apply the fix, then p.waitCaughtUp(); p.requireMirror("public.a")

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/mirror"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m, removeBinaries) }

// binDirs are the directories the cdcd binaries were built into, removed
// when the tests end, passed or failed.
var binDirs struct {
	mu   sync.Mutex
	dirs []string
}

// binDir makes a directory for a build, removed by removeBinaries.
func binDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err == nil {
		binDirs.mu.Lock()
		binDirs.dirs = append(binDirs.dirs, dir)
		binDirs.mu.Unlock()
	}
	return dir, err
}

func removeBinaries() {
	binDirs.mu.Lock()
	defer binDirs.mu.Unlock()
	for _, dir := range binDirs.dirs {
		_ = os.RemoveAll(dir)
	}
}

// The cdcd binary, built once per test binary (with the failpoint build
// tag, if internal/cdcdtest.Build sets one).
var build struct {
	once sync.Once
	bin  string
	err  error
}

// binary returns the path of the cdcd binary, building it on first use.
func binary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := binDir("cdcd-faultsuite-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.bin, build.err = cdcdtest.Build(dir)
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// pipelineOptions shape a test's pipeline. The zero value is one table-less
// pipeline; set at least Tables.
type pipelineOptions struct {
	// DDL runs in the test's database before anything else (tables, rows).
	DDL string
	// Tables are the captured tables, "schema.table".
	Tables []string
	// Mode is upsert (default) or append; FormatVersion 3 (default) or 2.
	Mode          string
	FormatVersion int
	// Snapshot is initial (default) or never.
	Snapshot string
	// Partitions per table topic; default 2.
	Partitions int
	// CatalogOutside puts the SQLite catalog and the warehouse outside
	// data_dir (the production layout), so data_dir can be removed alone.
	CatalogOutside bool
	// Extra is YAML appended to the config's top level (e.g. an alerts: or
	// admin: block); SinkExtra is indented under sink.iceberg, SourceExtra
	// under source.postgres.
	Extra, SinkExtra, SourceExtra string
	// LogExtra is indented under log: (e.g. "retention: 1m").
	LogExtra string
	// DSNParams are added to the source DSN's query string.
	DSNParams string
}

// pipeline is one test's database and cdcd pipeline.
type pipeline struct {
	t    *testing.T
	ctx  context.Context
	opts pipelineOptions

	DSN   string
	Conn  *pgx.Conn // the test's own connection to the database
	Names pgtest.TestNames

	Dir       string // the test's directory: cdcd.yaml, daemon.log, data/, …
	DataDir   string // data_dir
	CfgPath   string
	Admin     string // the admin listener, host:port
	Catalog   string // the SQLite catalog file
	Warehouse string // the warehouse directory

	logFile *os.File
	child   *cdcdtest.Child
}

// newPipeline creates the test's database (running opts.DDL) and writes
// its config; nothing runs until start. The daemon's log is printed when
// the test fails.
func newPipeline(t *testing.T, opts pipelineOptions) *pipeline {
	t.Helper()
	if opts.Mode == "" {
		opts.Mode = "upsert"
	}
	if opts.FormatVersion == 0 {
		opts.FormatVersion = 3
	}
	if opts.Snapshot == "" {
		opts.Snapshot = "initial"
	}
	if opts.Partitions == 0 {
		opts.Partitions = 2
	}
	p := &pipeline{t: t, ctx: t.Context(), opts: opts, DSN: pgtest.NewDB(t), Names: pgtest.Names(t)}
	p.Dir = t.TempDir()
	p.DataDir = filepath.Join(p.Dir, "data")
	p.Catalog = filepath.Join(p.DataDir, "catalog.db")
	p.Warehouse = filepath.Join(p.DataDir, "warehouse")
	if opts.CatalogOutside {
		p.Catalog = filepath.Join(p.Dir, "lake", "catalog.db")
		p.Warehouse = filepath.Join(p.Dir, "lake", "warehouse")
		if err := os.MkdirAll(p.Warehouse, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p.Admin = cdcdtest.FreeAddr(t)
	p.Conn = p.connect()
	if opts.DDL != "" {
		p.exec(opts.DDL)
	}
	p.writeConfig()
	var err error
	if p.logFile, err = os.OpenFile(filepath.Join(p.Dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.child != nil {
			p.child.Kill()
		}
		p.logFile.Close()
		if t.Failed() {
			t.Logf("daemon log (tail):\n%s", p.logTail(100_000))
		}
	})
	return p
}

// connect opens a connection to the test's database, closed at cleanup.
func (p *pipeline) connect() *pgx.Conn {
	p.t.Helper()
	conn, err := pgx.Connect(p.ctx, p.DSN)
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// config renders the pipeline's YAML.
func (p *pipeline) config() string {
	o := p.opts
	dsn := p.DSN
	if o.DSNParams != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + o.DSNParams
	}
	indent := func(s, pad string) string {
		if s == "" {
			return ""
		}
		lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
		for i, l := range lines {
			lines[i] = pad + l
		}
		return strings.Join(lines, "\n") + "\n"
	}
	return fmt.Sprintf(`pipeline: fault
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [%s]
    snapshot: %s
    heartbeat_interval: 300ms
%slog:
  partitions: %d
%ssink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: cdc
    mode: %s
    format_version: %d
    commit_interval: 250ms
%sadmin:
  listen: %q
shutdown:
  deadline: 20s
%s`, p.DataDir, dsn, p.Names.Slot, p.Names.Publication, quoteList(o.Tables), o.Snapshot,
		indent(o.SourceExtra, "    "), o.Partitions, indent(o.LogExtra, "  "), "sqlite://"+p.Catalog, "file://"+p.Warehouse,
		o.Mode, o.FormatVersion, indent(o.SinkExtra, "    "), p.Admin, o.Extra)
}

func quoteList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// writeConfig writes cdcd.yaml from the options.
func (p *pipeline) writeConfig() {
	p.t.Helper()
	p.CfgPath = filepath.Join(p.Dir, "cdcd.yaml")
	if err := os.WriteFile(p.CfgPath, []byte(p.config()), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// reconfigure changes the options (e.g. the tables) and rewrites the
// config; a running daemon sees it at its next start.
func (p *pipeline) reconfigure(change func(*pipelineOptions)) {
	p.t.Helper()
	change(&p.opts)
	p.writeConfig()
}

// loadConfig is the config as cdcd reads it (defaults applied).
func (p *pipeline) loadConfig() *config.Config {
	p.t.Helper()
	cfg, err := config.Load(p.CfgPath)
	if err != nil {
		p.t.Fatal(err)
	}
	return cfg
}

// exec runs SQL in the test's database.
func (p *pipeline) exec(sql string, args ...any) {
	p.t.Helper()
	if _, err := p.Conn.Exec(p.ctx, sql, args...); err != nil {
		p.t.Fatalf("%s: %v", abbrevSQL(sql), err)
	}
}

func abbrevSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		return s[:117] + "..."
	}
	return s
}

// start runs `cdcd run -c cdcd.yaml` with env added to its environment.
func (p *pipeline) start(env ...string) {
	p.t.Helper()
	if p.child != nil && !p.child.Exited() {
		p.t.Fatal("faultsuite: start: the daemon is already running")
	}
	fmt.Fprintf(p.logFile, "---- faultsuite: start %s\n", strings.Join(env, " "))
	p.child = cdcdtest.Start(p.t, binary(p.t), p.CfgPath, p.Admin, p.logFile, env...)
}

// stop sends SIGTERM and requires a clean exit within 30 s.
func (p *pipeline) stop() {
	p.t.Helper()
	if err := p.child.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	if !p.child.Wait(30 * time.Second) {
		p.child.Kill()
		p.t.Fatal("cdcd did not stop within 30s of SIGTERM")
	}
	if code := p.child.ExitCode(); code != 0 {
		p.t.Fatalf("cdcd exited with %d after SIGTERM: %v", code, p.child.ExitErr())
	}
}

// kill ends the daemon with SIGKILL.
func (p *pipeline) kill() {
	p.t.Helper()
	fmt.Fprintf(p.logFile, "---- faultsuite: kill -9\n")
	p.child.Kill()
}

// exited waits up to d for the daemon to exit on its own and returns its
// exit code, or -1 if it is still running.
func (p *pipeline) exited(d time.Duration) int {
	if !p.child.Wait(d) {
		return -1
	}
	return p.child.ExitCode()
}

// status fetches /status; it fails the test if the daemon cannot answer.
func (p *pipeline) status() daemon.Status {
	p.t.Helper()
	st, err := p.child.Status()
	if err != nil {
		p.t.Fatalf("status: %v", err)
	}
	return st
}

// waitFor polls cond every 50 ms until it holds, up to timeout (failing
// the test on a timeout or if the daemon exits).
func (p *pipeline) waitFor(what string, timeout time.Duration, cond func(st daemon.Status) bool) daemon.Status {
	p.t.Helper()
	var last daemon.Status
	p.child.WaitUntil(p.t, what, timeout, func() bool {
		st, err := p.child.Status()
		if err != nil {
			return false
		}
		last = st
		return cond(st)
	})
	return last
}

// markLSN commits a transaction that changes nothing captured and returns
// an LSN inside it: once the source has made it durable and no table lags,
// everything committed before is in Iceberg.
func (p *pipeline) markLSN() uint64 {
	p.t.Helper()
	var s string
	if err := p.Conn.QueryRow(p.ctx, "SELECT pg_current_wal_insert_lsn()::text FROM (SELECT txid_current()) x").Scan(&s); err != nil {
		p.t.Fatal(err)
	}
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		p.t.Fatal(err)
	}
	return uint64(hi)<<32 | uint64(lo)
}

// waitCaughtUp waits until everything committed in the database so far
// is in every table that is not paused, and fails if a table pauses
// meanwhile (use waitPaused for those).
func (p *pipeline) waitCaughtUp() daemon.Status {
	p.t.Helper()
	lsn := p.markLSN()
	return p.waitFor("caught up", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Paused {
				p.t.Fatalf("waiting to catch up, table %s paused: %s", tb.Table, tb.PausedReason)
			}
		}
		return st.CaughtUp(lsn)
	})
}

// waitOthersCaughtUp waits until every table but the paused ones named has
// caught up — the other tables flow while one is stopped.
func (p *pipeline) waitOthersCaughtUp(paused ...string) daemon.Status {
	p.t.Helper()
	lsn := p.markLSN()
	return p.waitFor("the other tables caught up", 3*time.Minute, func(st daemon.Status) bool {
		if st.Source.Flushed < lsn {
			return false
		}
		for _, tb := range st.Tables {
			if contains(paused, tb.Table) || contains(paused, tb.Source) {
				continue
			}
			if tb.Paused {
				p.t.Fatalf("table %s paused too: %s", tb.Table, tb.PausedReason)
			}
			if tb.Lag != 0 {
				return false
			}
		}
		return true
	})
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// waitPaused waits until table (the Iceberg name "cdc.x" or the source
// name) is paused with a reason containing every one of words, and returns
// its status line.
func (p *pipeline) waitPaused(table string, words ...string) daemon.TableStatus {
	p.t.Helper()
	var ts daemon.TableStatus
	p.waitFor("table "+table+" paused", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if (tb.Table == table || tb.Source == table) && tb.Paused {
				ts = tb
				return true
			}
		}
		return false
	})
	for _, w := range words {
		if !strings.Contains(ts.PausedReason, w) {
			p.t.Errorf("table %s paused, but its reason does not say %q: %s", table, w, ts.PausedReason)
		}
	}
	return ts
}

// requireAlert requires a firing alert named name about subject (a
// substring of its subject) whose summary and action together contain
// every one of words, and that `cdcd status` shows it.
func (p *pipeline) requireAlert(name, subject string, words ...string) daemon.Alert {
	p.t.Helper()
	var found daemon.Alert
	p.waitFor("alert "+name+" for "+subject, time.Minute, func(st daemon.Status) bool {
		for _, a := range st.Alerts {
			if a.Name == name && strings.Contains(a.Subject, subject) {
				found = a
				return true
			}
		}
		return false
	})
	text := found.Summary + "\n" + found.Action
	for _, w := range words {
		if !strings.Contains(text, w) {
			p.t.Errorf("alert %s for %s does not say %q: %s / %s", name, subject, w, found.Summary, found.Action)
		}
	}
	out, _, code := p.cdcd("status", "-c", p.CfgPath)
	if code != 0 || !strings.Contains(out, name) {
		p.t.Errorf("cdcd status (exit %d) does not show %s:\n%s", code, name, out)
	}
	if strings.Contains(strings.ToLower(out), "no alerts") {
		p.t.Errorf("cdcd status says \"no alerts\" while %s fires:\n%s", name, out)
	}
	return found
}

// cdcd runs the binary with args (e.g. "status", "-c", p.CfgPath) and
// returns its stdout, stderr and exit code.
func (p *pipeline) cdcd(args ...string) (stdout, stderr string, code int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(p.t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		p.t.Fatalf("cdcd %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// logTail returns up to the last n bytes of the daemon's log.
func (p *pipeline) logTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "daemon.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// logContains reports whether the daemon's log holds s.
func (p *pipeline) logContains(s string) bool {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "daemon.log"))
	return strings.Contains(string(b), s)
}

// openCatalog opens the pipeline's catalog; the caller closes it.
func (p *pipeline) openCatalog() catalog.Catalog {
	p.t.Helper()
	cat, err := daemon.OpenCatalog(p.ctx, p.loadConfig())
	if err != nil {
		p.t.Fatal(err)
	}
	return cat
}

// icebergTable loads the Iceberg table that mirrors sourceTable.
func (p *pipeline) icebergTable(cat catalog.Catalog, sourceTable string) *table.Table {
	p.t.Helper()
	cfg := p.loadConfig()
	ns, name := cfg.Sink.Iceberg.TableIdent(sourceTable)
	tbl, err := cat.LoadTable(p.ctx, table.Identifier{ns, name})
	if err != nil {
		p.t.Fatalf("load the mirror of %s (%s.%s): %v", sourceTable, ns, name, err)
	}
	return tbl
}

// diff compares sourceTable with its mirror.
func (p *pipeline) diff(sourceTable string) *mirror.Diff {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	d, err := mirror.Compare(p.ctx, p.Conn, sourceTable, p.icebergTable(cat, sourceTable))
	if err != nil {
		p.t.Fatal(err)
	}
	return d
}

// requireMirror requires each source table to equal its mirror (all of
// the pipeline's tables when none are named).
func (p *pipeline) requireMirror(tables ...string) {
	p.t.Helper()
	if len(tables) == 0 {
		tables = p.opts.Tables
	}
	for _, tb := range tables {
		if d := p.diff(tb); !d.Equal() {
			p.t.Errorf("the mirror differs from the source: %s", d)
		}
	}
}

func closeCatalog(cat catalog.Catalog) {
	if c, ok := cat.(io.Closer); ok {
		c.Close()
	}
}
