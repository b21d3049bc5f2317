// Package bench is `cdcd bench`: an end-to-end benchmark of the pipeline
// against the raw limits of the same machine, measured in the same run.
//
// One run, in this order:
//
//  1. A throwaway PostgreSQL 15 (or the database of a DSN) gets the table
//     public.bench (bigint PK, int, 40-char text, numeric(12,2),
//     timestamptz, bool, small jsonb, float8) with Rows rows.
//  2. Raw limit of the load: COPY bench TO STDOUT (FORMAT binary), the
//     bytes discarded, CopyRuns times.
//  3. Initial load: a cdcd daemon (a child process: `cdcd run`, SQLite
//     catalog and local warehouse) from its start until the Iceberg table's
//     current snapshot holds Rows live rows.
//  4. Streaming: with the daemon stopped, the workload (inserts, updates,
//     deletes in transactions of TxRows; scale 1 is 2M/500k/200k) is
//     written once and so sits in two slots: a plain pglogrepl
//     receive-and-decode loop (postgres.DecodeLoop, the raw limit) reads
//     one, then a daemon started afresh catches up on its own slot, timed
//     from its start until a snapshot holds the last transaction.
//  5. Latency: a daemon runs while transactions of 100 changes commit at
//     LatencyRate events/s for LatencyDuration. Each transaction's latency
//     is from its COMMIT returning to the client until the benchmark first
//     sees a snapshot holding it (see tableState.lsn and txResult.inner),
//     polling the catalog every 50 ms.
//  6. The table's final row count is checked against PostgreSQL's, by the
//     snapshot summary and by an iceberg-go scan.
//
// CPU time is per process (/proc/PID/stat, user+system): the daemon's, and
// PostgreSQL's (the postmaster's process tree) when the server is the
// benchmark's own. Peak RSS is the daemon's VmHWM in each phase (a new
// process per phase).
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgserver"
)

// Options configures Run.
type Options struct {
	// Source is "postgres" (default) or SourceMariaDB (mariadb.go).
	Source string
	// DSN is the database to use; empty starts a throwaway PostgreSQL 15.
	// The database needs wal_level=logical; the benchmark replaces its
	// table public.bench and uses the slots cdcd_bench and cdcd_bench_raw.
	DSN string
	// Rows is the size of the initial load; default 5,000,000.
	Rows int
	// Scale sizes the streaming workload: 1 (default) is 2M inserts, 500k
	// updates and 200k deletes.
	Scale float64
	// TxRows is the rows per streaming transaction; default 1000.
	TxRows int
	// LatencyRate is the steady rate of the latency phase, events/s;
	// default 10,000.
	LatencyRate int
	// LatencyDuration is how long the latency phase writes; default 60s.
	LatencyDuration time.Duration
	// CommitInterval is the sink's commit_interval; default 10s (the
	// config default).
	CommitInterval time.Duration
	// CopyRuns is how often COPY is measured; default 3.
	CopyRuns int
	// Dir holds the daemon's data and log; default a new temporary
	// directory, removed afterwards unless Keep.
	Dir  string
	Keep bool
	// NoScan skips the final iceberg-go scan (the summary is still checked).
	NoScan bool
	// Command returns the command that runs the daemon on a config file
	// (cmd/cdcd: itself with `run -c FILE`). REQUIRED.
	Command func(cfgPath string) *exec.Cmd
	// ChildEnv is added to the daemon's environment (e.g. GOMEMLIMIT=...).
	ChildEnv []string
	// ProfileDir, when set, receives a CPU and a heap profile of each
	// daemon phase (load, stream, latency).
	ProfileDir string
	// Out receives progress lines and the result table; default discard.
	Out io.Writer
	// Logger receives debugging detail; default discard.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Rows <= 0 {
		o.Rows = 5_000_000
	}
	if o.Scale <= 0 {
		o.Scale = 1
	}
	if o.TxRows <= 0 {
		o.TxRows = 1000
	}
	if o.LatencyRate <= 0 {
		o.LatencyRate = 10_000
	}
	if o.LatencyDuration <= 0 {
		o.LatencyDuration = time.Minute
	}
	if o.CommitInterval <= 0 {
		o.CommitInterval = 10 * time.Second
	}
	if o.CopyRuns <= 0 {
		o.CopyRuns = 3
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Measure is one timed phase.
type Measure struct {
	Name  string
	Items int64 // rows or events
	Wall  time.Duration
	// CPU is the measured process's user+system time: the daemon's, or
	// this process's for a raw limit.
	CPU time.Duration
	// PGCPU is PostgreSQL's CPU time in the phase; negative when unknown
	// (a server given by DSN).
	PGCPU time.Duration
	// PeakRSS is the daemon's VmHWM in bytes (0 for raw limits).
	PeakRSS int64
}

// Rate is items per second.
func (m Measure) Rate() float64 { return float64(m.Items) / m.Wall.Seconds() }

// CPUPerItem is CPU microseconds per item.
func (m Measure) CPUPerItem() float64 { return float64(m.CPU.Microseconds()) / float64(m.Items) }

// PGCPUPerItem is PostgreSQL's CPU microseconds per item; negative if unknown.
func (m Measure) PGCPUPerItem() float64 {
	if m.PGCPU < 0 {
		return -1
	}
	return float64(m.PGCPU.Microseconds()) / float64(m.Items)
}

// Latency is the latency phase's outcome.
type Latency struct {
	Measure
	Transactions       int
	P50, P90, P99, Max time.Duration
}

// Result is a run's figures.
type Result struct {
	Options Options
	// LoadAvg is /proc/loadavg at the start and at the end.
	LoadAvgStart, LoadAvgEnd string
	Copy                     []Measure // each COPY run
	Load                     Measure
	Decode                   Measure
	// Decodes are the decode loop's runs where it is measured more than
	// once (MariaDB's, CopyRuns times); Decode is their median.
	Decodes []Measure
	Stream  Measure
	Latency Latency
	// Rows of the table at the end: PostgreSQL's count, the snapshot
	// summary's, and the scan's (-1 if not scanned).
	PGRows, SummaryRows, ScanRows int64
}

// CopyMedian is the median COPY run.
func (r *Result) CopyMedian() Measure { return medianRun(r.Copy) }

// medianRun is the run of the median rate.
func medianRun(ms []Measure) Measure {
	runs := append([]Measure(nil), ms...)
	sort.Slice(runs, func(i, j int) bool { return runs[i].Rate() < runs[j].Rate() })
	return runs[len(runs)/2]
}

// run is one benchmark run's state.
type run struct {
	opts    Options
	dir     string
	cfgPath string
	dsn     string
	pgPID   int // 0: unknown (DSN given)
	conn    *pgx.Conn
	watch   *watcher
	res     Result
	// loaded is the records the table took in by the end of the load
	// (its rows and the load's reset markers).
	loaded int64
	// cleanup runs at the end, last added first.
	cleanup []func()
	// flushDB has the database write its dirty pages out (settle).
	flushDB func(context.Context) error
}

const (
	pipeline    = "bench"
	slot        = "cdcd_bench"
	rawSlot     = "cdcd_bench_raw"
	publication = "cdcd_bench"
	namespace   = "bench"
)

// Run runs the benchmark and returns its figures, having printed them.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts.defaults()
	if opts.Command == nil {
		return nil, errors.New("bench: Options.Command is required")
	}
	b := &run{opts: opts}
	b.res.Options = opts
	b.res.LoadAvgStart = loadAverage()
	plan, err := newStreamPlan(opts.Rows, opts.TxRows, opts.Scale)
	if err != nil {
		return nil, err
	}
	if b.dir = opts.Dir; b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "cdcd-bench-"); err != nil {
			return nil, err
		}
		if !opts.Keep {
			defer os.RemoveAll(b.dir)
		}
	} else if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, err
	}
	if opts.ProfileDir != "" {
		if err := os.MkdirAll(opts.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	defer func() {
		for i := len(b.cleanup) - 1; i >= 0; i-- {
			b.cleanup[i]()
		}
	}()
	if opts.Source == SourceMariaDB {
		return b.runMariaDB(ctx, plan)
	}
	if err := b.startDatabase(ctx); err != nil {
		return nil, err
	}
	if err := b.prepare(ctx); err != nil {
		return nil, err
	}
	b.printf("Data directory %s; daemon log %s", b.dir, filepath.Join(b.dir, "cdcd.log"))
	for _, phase := range []func(context.Context, streamPlan) error{b.copyPhase, b.loadPhase, b.streamPhase, b.latencyPhase, b.verify} {
		if err := phase(ctx, plan); err != nil {
			return nil, err
		}
	}
	b.res.LoadAvgEnd = loadAverage()
	b.res.Print(opts.Out, false)
	return &b.res, nil
}

func (b *run) printf(format string, a ...any) {
	fmt.Fprintf(b.opts.Out, format+"\n", a...)
}

// startDatabase starts the throwaway server (or connects to the DSN).
func (b *run) startDatabase(ctx context.Context) error {
	b.dsn = b.opts.DSN
	if b.dsn == "" {
		b.printf("Starting a throwaway PostgreSQL 15 ...")
		srv, err := pgserver.Start(ctx, pgserver.Options{Settings: map[string]string{
			"shared_buffers": "256MB", "max_wal_size": "8GB", "checkpoint_timeout": "30min",
		}})
		if err != nil {
			return err
		}
		b.cleanup = append(b.cleanup, func() { _ = srv.Stop() })
		if err := srv.CreateDatabase(ctx, "bench"); err != nil {
			return err
		}
		b.dsn, b.pgPID = srv.DSN("bench"), srv.PID()
	}
	conn, err := pgx.Connect(ctx, b.dsn)
	if err != nil {
		return fmt.Errorf("bench: connect: %w", err)
	}
	b.conn = conn
	b.cleanup = append(b.cleanup, func() {
		if b.opts.DSN != "" { // a server of the user's: drop what the run made
			for _, s := range []string{slot, rawSlot} {
				_, _ = conn.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", s)
			}
			_, _ = conn.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+publication+"; DROP TABLE IF EXISTS bench")
		}
		conn.Close(context.Background())
	})
	return nil
}
