// Package demo is `cdcd demo`: a throwaway PostgreSQL with a small shop,
// a workload of inserts, updates and deletes, the pipeline capturing it into
// the embedded log and Iceberg tables, and a summary read back from them.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
)

// Options configures Run.
type Options struct {
	// DataDir receives the config, log, catalog, warehouse and the daemon's
	// log file. A directory that is not empty must hold a previous demo.
	DataDir string
	// MySQL runs the shop in a throwaway MariaDB instead (mysql.go).
	MySQL bool
	// Keep leaves the pipeline capturing after the summary until ctx ends.
	Keep bool
	// Out receives the narrative and the summary.
	Out io.Writer
	// Progress, when set, shows the daemon's progress (cdcd demo on a
	// terminal) until the func it returns is called.
	Progress func(status func() daemon.Status) (stop func())
}

// marker is the file that says a directory holds a demo, so Run only ever
// empties directories it made.
const marker = ".cdcd-demo"

// Run runs the demo until it has shown its summary (or, with Keep, until
// ctx ends). Everything it starts is stopped before it returns.
func Run(ctx context.Context, opts Options, logger *slog.Logger) error {
	dir, err := prepareDir(opts.DataDir)
	if err != nil {
		return err
	}
	if opts.MySQL {
		return runMySQL(ctx, opts, dir)
	}
	out := opts.Out
	p := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	p("Starting a throwaway PostgreSQL 15 from %s ...", pgserver.DefaultBinDir)
	srv, err := pgserver.Start(ctx, pgserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if err := srv.CreateDatabase(ctx, "shop"); err != nil {
		return err
	}
	dsn := srv.DSN("shop")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := createShop(ctx, conn); err != nil {
		return err
	}
	p("PostgreSQL is up on port %d with database shop (tables public.customers and public.orders, a few rows each).", srv.Port())

	adm, err := newAdmin()
	if err != nil {
		return err
	}
	run, err := startPipeline(ctx, dir, demoConfig(dir, dsn, adm), opts, p)
	if err != nil {
		return err
	}
	defer run.release()
	d, done, cfg, cfgPath := run.d, run.done, run.cfg, run.cfgPath
	adm.print(out, cfgPath, "shop.orders")

	if err := waitStreaming(ctx, d, done); err != nil {
		return err
	}
	p("The initial load is in the log; streaming changes from the slot.")
	p("Running a workload: inserts, updates and deletes in small transactions for a few seconds ...")
	stats, marker, err := workload(ctx, conn)
	if err != nil {
		return err
	}
	p("  %d inserts, %d updates, %d deletes committed.", stats.inserts, stats.updates, stats.deletes)
	p("Waiting until every change is committed to Iceberg ...")
	if err := waitCaughtUp(ctx, d, marker, done); err != nil {
		return err
	}
	if err := summarize(ctx, out, d, conn, cfg); err != nil {
		return err
	}
	printNext(out, cfgPath)
	if opts.Keep {
		p("\nStill capturing (connect with: psql %q); the admin listener is on http://%s. Press Ctrl-C to stop.", dsn, adm.addr)
		<-ctx.Done()
	}
	if err := run.stop(); err != nil {
		return err
	}
	return ctx.Err()
}

// pipeline is a demo's daemon running in the background.
type pipeline struct {
	d       *daemon.Daemon
	cfg     *config.Config
	cfgPath string
	done    chan error // d.Run's result
	cancel  context.CancelFunc
	closers []func()
}

// startPipeline writes the demo's config into dir, opens the daemon with
// its log in dir/cdcd.log and runs it; release frees what it holds.
func startPipeline(ctx context.Context, dir, yaml string, opts Options, p func(string, ...any)) (_ *pipeline, err error) {
	run := &pipeline{cfgPath: filepath.Join(dir, "cdcd.yaml"), done: make(chan error, 1)}
	defer func() {
		if err != nil {
			run.release()
		}
	}()
	if err := os.WriteFile(run.cfgPath, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	if run.cfg, err = config.Load(run.cfgPath); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "cdcd.log"))
	if err != nil {
		return nil, err
	}
	run.closers = append(run.closers, func() { logFile.Close() })
	p("Running the pipeline with %s (daemon log: %s).", run.cfgPath, logFile.Name())
	if run.d, err = daemon.New(ctx, run.cfg, slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))); err != nil {
		return nil, err
	}
	run.closers = append(run.closers, func() { run.d.Close() })
	if opts.Progress != nil {
		run.closers = append(run.closers, opts.Progress(run.d.Status))
	}
	dctx, cancel := context.WithCancel(ctx)
	run.cancel = cancel
	run.closers = append(run.closers, cancel)
	go func() { run.done <- run.d.Run(dctx) }()
	return run, nil
}

// stop ends the daemon's run and returns its error, if any but a cancel.
func (run *pipeline) stop() error {
	run.cancel()
	if err := <-run.done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// release frees what startPipeline took, in the reverse order.
func (run *pipeline) release() {
	for i := len(run.closers) - 1; i >= 0; i-- {
		run.closers[i]()
	}
}

// prepareDir empties dir if it holds a previous demo, refuses it if it holds
// anything else, and marks it.
func prepareDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return "", err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(abs, marker)); err != nil {
			return "", fmt.Errorf("demo: %s is not empty and was not made by cdcd demo; pass --data-dir with a new directory", abs)
		}
		if err := os.RemoveAll(abs); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", err
	}
	return abs, os.WriteFile(filepath.Join(abs, marker), []byte("made by cdcd demo; emptied by the next run\n"), 0o644)
}

func demoConfig(dir, dsn string, adm admin) string {
	return fmt.Sprintf(`# Written by cdcd demo: the pipeline that captured the demo shop.
pipeline: demo
data_dir: %q

source:
  postgres:
    dsn: %q
    tables: [public.customers, public.orders]
    snapshot: initial

log:
  backend: embedded
  partitions: 4

sink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: shop
    mode: upsert          # a mirror of each table; append writes a changelog instead
    commit_interval: 1s

%s`, dir, dsn, "sqlite://"+filepath.Join(dir, "catalog.db"), "file://"+filepath.Join(dir, "warehouse"), adm.block())
}

// waitStreaming returns once the initial load is done and the slot streams.
func waitStreaming(ctx context.Context, d *daemon.Daemon, done <-chan error) error {
	for !d.SourceStats().Streaming.Load() {
		select {
		case err := <-done:
			return fmt.Errorf("demo: the pipeline stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// waitCaughtUp returns once the source has made the transaction at marker
// durable and every table's committed offsets reach its topic's end.
func waitCaughtUp(ctx context.Context, d *daemon.Daemon, marker uint64, done <-chan error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if d.CaughtUp(marker) {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("demo: the pipeline did not catch up within 2 minutes; see the daemon log")
		}
		select {
		case err := <-done:
			return fmt.Errorf("demo: the pipeline stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
