package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/internal/pgident"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/reconcile"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// Reconciles: cdcd reconcile run by the CLI (Reconcile, beside a running
// daemon or without one) and by the daemon itself (its schedule and POST
// /cdcd/reconcile, reconcile_run.go).

// ReconcileOptions are a reconcile's command-line choices.
type ReconcileOptions struct {
	// Tables to compare (source or Iceberg names); all when empty.
	Tables []string
	// Config overrides the config file's reconcile section where set.
	Config reconcile.Config
	// Repair, when set, re-reads the keys found different through these
	// incremental snapshots and compares them again; RepairTimeout bounds
	// the wait for each (default 1h).
	Repair        RepairSnapshots
	RepairTimeout time.Duration
	// Running, when set, says whether the pipeline's daemon runs (the
	// CLI: its admin API answers). A MySQL source asks it when the server
	// lists no binlog dump (reconcile.MySQLConfig.Running).
	Running func(ctx context.Context) bool
}

// Reconcile compares the pipeline's tables with their sources, reading
// the log read-only (a daemon may be running). A table that cannot be
// compared has its Error set; the error is for failures that stop the
// whole run.
func Reconcile(ctx context.Context, cfg *config.Config, opts ReconcileOptions, logger *slog.Logger) ([]*reconcile.TableReport, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cat, err := iceberg.OpenCatalog(ctx, catalogConfig(cfg))
	if err != nil {
		return nil, err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	ch := &readOnlyLog{dir: filepath.Join(cfg.DataDir, "log"), logger: logger}
	defer ch.Close()
	return reconcileTables(ctx, cfg, opts, cat, ch, logger)
}

// reconcileTables runs a reconcile over the catalog and the log.
func reconcileTables(ctx context.Context, cfg *config.Config, opts ReconcileOptions, cat catalog.Catalog, ch reconcile.Changes, logger *slog.Logger) ([]*reconcile.TableReport, error) {
	specs, err := reconcileSpecs(cfg, cat, opts.Tables)
	if err != nil {
		return nil, err
	}
	busy := newBusyState(cfg, ch)
	for i := range specs {
		name := specs[i].Source
		specs[i].Busy = func(ctx context.Context) (string, error) { return busy.why(ctx, name) }
	}
	src, err := openReconcileSource(ctx, cfg, busy, opts.Running)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	rc := reconcile.New(reconcileConfig(cfg, opts.Config), src, ch, logger)
	var out []*reconcile.TableReport
	for _, spec := range specs {
		rep, err := rc.Table(ctx, spec)
		if errors.Is(err, reconcile.ErrNotComparable) || err != nil && ctx.Err() == nil && !isConnError(err) {
			rep = &reconcile.TableReport{Table: spec.Source, Iceberg: spec.Iceberg, Error: err.Error()}
			err = nil
		}
		if err != nil {
			return out, err
		}
		logger.Info("reconcile: table compared", "table", rep.Iceberg, "equal", rep.Equal(), "rows", rep.Rows,
			"missing", rep.MissingCount, "extra", rep.ExtraCount, "differing", rep.DifferCount, "unchecked", rep.Unchecked)
		if rep.Error == "" {
			repairTable(ctx, rc, spec, rep, opts, logger)
		}
		out = append(out, rep)
	}
	return out, nil
}

// isConnError says whether err means the source cannot be reached (every
// table would fail alike).
func isConnError(err error) bool {
	var ce interface{ SafeToRetry() bool }
	return errors.As(err, &ce)
}

// reconcileSpecs lists the tables to compare.
func reconcileSpecs(cfg *config.Config, cat catalog.Catalog, only []string) ([]reconcile.Spec, error) {
	ice := cfg.Sink.Iceberg
	if ice.Mode != "upsert" {
		return nil, fmt.Errorf("sink.iceberg.mode is %s: cdcd reconcile compares mirrors (upsert tables) only", ice.Mode)
	}
	matched := map[string]bool{}
	var out []reconcile.Spec
	for _, name := range cfg.Source.TableNames() {
		ns, tbl := splitTable(name)
		ins, itbl := ice.TableIdent(name)
		topic := cfg.Pipeline + "." + topicPart(ns) + "." + topicPart(tbl)
		names := []string{name, ns + "." + tbl, ins + "." + itbl, topic}
		if ns == "public" {
			names = append(names, tbl)
		}
		if len(only) > 0 && !slices.ContainsFunc(names, func(n string) bool { return slices.Contains(only, n) }) {
			continue
		}
		for _, n := range names {
			matched[n] = true
		}
		mask, err := reconcileMask(cfg, name)
		if err != nil {
			return nil, err
		}
		ident := table.Identifier{ins, itbl}
		out = append(out, reconcile.Spec{Source: name, Iceberg: ins + "." + itbl, Topic: topic, Mask: mask,
			Mirror: &catalogMirror{cat: cat, ident: ident, partitions: cfg.Log.Partitions}})
	}
	for _, n := range only {
		if !matched[n] {
			return nil, fmt.Errorf("%s is not a table of this pipeline (tables: %v)", n, cfg.Source.TableNames())
		}
	}
	return out, nil
}

// reconcileMask names the columns the mirror holds masked.
func reconcileMask(cfg *config.Config, name string) (map[string]string, error) {
	mt := cfg.MaskingFor(name)
	if mt == nil {
		return nil, nil
	}
	m := map[string]string{}
	for _, c := range mt.Hash {
		m[c] = "masked (hash): the mirror holds an HMAC of the value"
	}
	for _, c := range mt.Redact {
		m[c] = "masked (redact): the mirror holds ***"
	}
	return m, nil
}

// catalogMirror reads a table's current snapshot from the catalog.
type catalogMirror struct {
	cat        catalog.Catalog
	ident      table.Identifier
	partitions int
}

func (m *catalogMirror) Live(ctx context.Context) (*iceberg.LiveSnapshot, error) {
	t, err := m.cat.LoadTable(ctx, m.ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return iceberg.ReadLive(ctx, t, m.partitions)
}

// readOnlyLog reads the embedded log beside the daemon that writes it:
// each Describe opens it afresh, so it sees what was appended since; the
// registry is read again when an id is new to it.
type readOnlyLog struct {
	dir    string
	logger *slog.Logger

	mu  sync.Mutex
	lg  *log.Embedded
	reg *schema.Registry
}

func (r *readOnlyLog) open() error {
	if r.lg != nil {
		r.lg.Close()
		r.lg, r.reg = nil, nil
	}
	lg, err := log.Open(r.dir, log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		return fmt.Errorf("reconcile: open the log %s: %w", r.dir, err)
	}
	r.lg = lg
	return nil
}

func (r *readOnlyLog) Describe(ctx context.Context, topic string) (log.TopicInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.open(); err != nil {
		return log.TopicInfo{}, err
	}
	return r.lg.DescribeTopic(ctx, topic)
}

func (r *readOnlyLog) Fetch(ctx context.Context, topic string, p int32, off int64, opts log.FetchOptions) ([]log.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lg == nil {
		if err := r.open(); err != nil {
			return nil, err
		}
	}
	return r.lg.Fetch(ctx, topic, p, off, opts)
}

func (r *readOnlyLog) SchemaByID(id uint32) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reg != nil {
		if s, err := r.reg.SchemaByID(id); err == nil {
			return s, nil
		}
	}
	if r.lg == nil {
		if err := r.open(); err != nil {
			return "", err
		}
	}
	reg, err := schema.OpenRegistry(context.Background(), schemaStore{r.lg})
	if err != nil {
		return "", err
	}
	r.reg = reg
	return reg.SchemaByID(id)
}

func (r *readOnlyLog) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lg != nil {
		r.lg.Close()
		r.lg = nil
	}
}

// reconcileSource is a reconcile's database side, closed after the run.
type reconcileSource interface {
	reconcile.Source
	Close()
}

// openReconcileSource connects to the pipeline's source; a MySQL source
// reads the pipeline's checkpoint from the log's state (busy) and asks
// running whether the daemon runs when no binlog dump is listed.
func openReconcileSource(ctx context.Context, cfg *config.Config, busy *busyState, running func(context.Context) bool) (reconcileSource, error) {
	if my := cfg.Source.MySQL; my != nil {
		return reconcile.OpenMySQL(ctx, reconcile.MySQLConfig{DSN: my.DSN, Flavor: my.Flavor,
			StatementTimeout: cfg.Reconcile.StatementTimeout, Running: running,
			Checkpoint: func(ctx context.Context) ([]byte, error) { return busy.value(ctx, "mysql/checkpoint") }})
	}
	pg := cfg.Source.Postgres
	if pg == nil {
		return nil, errors.New("cdcd reconcile compares PostgreSQL and MySQL sources only")
	}
	return reconcile.OpenPostgres(ctx, reconcile.PostgresConfig{DSN: pg.DSN, ReadDSN: cfg.Reconcile.ReplicaDSN,
		Slot: pg.Slot, Publication: pg.Publication, StatementTimeout: cfg.Reconcile.StatementTimeout})
}

// reconcileConfig is the config file's reconcile section with the
// command's overrides.
func reconcileConfig(cfg *config.Config, over reconcile.Config) reconcile.Config {
	rc := cfg.Reconcile
	out := reconcile.Config{ChunkRows: rc.ChunkRows, BlockRows: rc.BlockRows, MaxRowsPerSecond: rc.MaxRowsPerSecond, Parallel: rc.Parallel}
	if over.ChunkRows > 0 {
		out.ChunkRows = over.ChunkRows
	}
	if over.BlockRows > 0 {
		out.BlockRows = over.BlockRows
	}
	if over.MaxRowsPerSecond > 0 {
		out.MaxRowsPerSecond = over.MaxRowsPerSecond
	}
	if over.Parallel > 0 {
		out.Parallel = over.Parallel
	}
	out.SegmentRows, out.SettleTimeout, out.Retries, out.MaxListed, out.Poll =
		over.SegmentRows, over.SettleTimeout, over.Retries, over.MaxListed, over.Poll
	return out
}

func topicPart(s string) string { return pgident.TopicPart(s) }
