package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/failpoint/fptest"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// childEnv names the config file a re-executed test binary runs as a
// daemon (for the kill -9 test).
const childEnv = "CDCD_E2E_DAEMON_CONFIG"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(runChild(path))
	}
	pgtest.Main(m)
}

func runChild(path string) int {
	// As cmd/cdcd does: the first signal stops gracefully, the second hard.
	ctx, cancel := context.WithCancel(context.Background())
	hard, cancelHard := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sigs
		cancel()
		<-sigs
		cancelHard()
	}()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	d, err := daemon.New(ctx, cfg, logger)
	if err != nil {
		logger.Error("start", "err", err)
		return 1
	}
	err = d.Run(ctx, daemon.WithHardStop(hard))
	if errors.Is(err, daemon.ErrHardStop) {
		logger.Error("hard stop", "err", err)
		return 3
	}
	d.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("run", "err", err)
		return 1
	}
	return 0
}

func writeConfig(t *testing.T, dir, dsn, slot, admin string) string {
	return writeConfigMode(t, dir, dsn, slot, admin, "append", 3)
}

func writeConfigMode(t *testing.T, dir, dsn, slot, admin, mode string, version int) string {
	t.Helper()
	cfg := fmt.Sprintf(`pipeline: e2e
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [public.acct, public.kv]
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: %s
    format_version: %d
    commit_interval: 200ms
    compaction: {interval: 300ms, min_files: 3}
admin:
  listen: %q
`, dir, dsn, slot, slot, mode, version, admin)
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func openCatalog(t *testing.T, dir string) *iceberg.CatalogConfig {
	return &iceberg.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Name: "cdcd", Warehouse: "file://" + filepath.Join(dir, "warehouse")}
}

func verify(t *testing.T, dir string, m *model) {
	t.Helper()
	cat, err := iceberg.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	acct, _ := changelog(t, cat, table.Identifier{"mirror", "acct"}, "acct/")
	compare(t, m.want, acct, "acct/")
	kv, truncs := changelog(t, cat, table.Identifier{"mirror", "kv"}, "kv/")
	compare(t, m.want, kv, "kv/")
	// The initial load begins each table with a reset marker, a truncate.
	if want := m.truncates + 1; truncs != want {
		t.Errorf("kv changelog has %d truncates, want %d (the workload's and the load's reset marker)", truncs, want)
	}
	changes := 0
	for _, w := range m.want {
		changes += len(w)
	}
	t.Logf("verified %d keys, %d changes, %d truncates", len(m.want), changes, m.truncates)
}

// TestEndToEndChangelog: inserts, updates, deletes, primary-key changes and
// truncates on two tables land in the changelog tables exactly, in order per
// key, with values, read back by iceberg-go's scan.
func TestEndToEndChangelog(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL); err != nil {
		t.Fatal(err)
	}
	m := newModel(1)
	// Rows that exist before the pipeline starts arrive through the
	// initial load, as op r.
	if _, err := m.run(t.Context(), conn, 20, 0); err != nil {
		t.Fatal(err)
	}
	for k, changes := range m.want {
		last := changes[len(changes)-1]
		if strings.HasPrefix(last, "d|") {
			delete(m.want, k)
			continue
		}
		m.want[k] = []string{"r" + last[1:]}
	}
	m.truncates = 0

	dir := t.TempDir()
	cfg, err := config.Load(writeConfig(t, dir, dsn, names.Slot, "off"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)

	lsn, err := m.run(t.Context(), conn, 300, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	verify(t, dir, m)
}

func waitFor(t *testing.T, what string, ok func() bool, done chan error) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // generous: tests share two cores
	for !ok() {
		select {
		case err := <-done:
			// Back for the caller's deferred stop, which reads it: taken
			// away, that wait hung the package until its timeout and the
			// daemon's error was never printed.
			done <- err
			t.Fatalf("daemon stopped while waiting for %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// child is a daemon running in a re-executed test binary.
type child struct {
	cmd   *exec.Cmd
	admin string
	log   *os.File
	done  chan error
}

func startChild(t *testing.T, cfgPath, admin string, logFile *os.File, env ...string) *child {
	t.Helper()
	bin := os.Args[0]
	if fptest.Arms(env) {
		bin = fptest.TestBinary(t)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+cfgPath), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, admin: admin, log: logFile, done: make(chan error, 1)}
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

func (c *child) status() (daemon.Status, error) {
	var st daemon.Status
	resp, err := http.Get("http://" + c.admin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestKillNineMidWorkload kills the daemon with SIGKILL several times while a
// workload runs, restarts it each time, and checks that the changelog holds
// every change exactly once, in order per key.
func TestKillNineMidWorkload(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	admin := freeAddr(t)
	cfgPath := writeConfig(t, dir, dsn, names.Slot, admin)
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("daemon log:\n%s", b)
		}
	}()

	m := newModel(7)
	work := make(chan error, 1)
	var stopped atomic.Bool
	c := startChild(t, cfgPath, admin, logFile)
	waitFor(t, "first status", func() bool { st, err := c.status(); return err == nil && st.Source.Flushed > 0 }, c.done)
	go func() {
		defer close(work)
		for !stopped.Load() {
			// Whole transactions only: the model must know what committed.
			if _, err := m.run(context.Background(), conn, 1, 2*time.Millisecond); err != nil {
				work <- err
				return
			}
		}
	}()

	const kills = 4
	for i := 0; i < kills; i++ {
		time.Sleep(time.Duration(300+i*250) * time.Millisecond)
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-c.done
		fmt.Fprintf(logFile, "---- test: killed with SIGKILL (%d/%d)\n", i+1, kills)
		c = startChild(t, cfgPath, admin, logFile)
	}
	stopped.Store(true)
	if err := <-work; err != nil {
		t.Fatal(err)
	}
	lsn, err := m.run(t.Context(), conn, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool {
		st, err := c.status()
		return err == nil && st.CaughtUp(lsn)
	}, c.done)
	// The admin listener serves the registry's Confluent-compatible API.
	resp, err := http.Get("http://" + admin + "/subjects")
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	if err := json.NewDecoder(resp.Body).Decode(&subjects); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !slices.Contains(subjects, "e2e.public.acct-value") || !slices.Contains(subjects, "e2e.public.kv-key") {
		t.Errorf("/subjects = %v", subjects)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	verify(t, dir, m)
}
