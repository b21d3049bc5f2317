// Package daemon wires cdcd's components from a Config and runs them: the
// source, the emitter that makes its changes durable in the log, the
// Iceberg sink, the monitor (slot poller, alerts) and the admin HTTP
// listener, with a two-phase stop (lifecycle.go).
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/internal/pgident"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// Version is cdcd's version, written into every change's source block.
const Version = "0.1.0-dev"

// Daemon is one running pipeline.
type Daemon struct {
	cfg    *config.Config
	logger *slog.Logger

	lg      logBackend
	reg     schema.Client
	regAPI  http.Handler // the registry API on the admin listener
	state   *stateStore
	cat     catalog.Catalog
	reader  sourceReader
	emitter *emitter
	sink    *iceberg.Sink
	topics  []string
	started time.Time
	// resumeEvery is how often paused tables are retried.
	resumeEvery time.Duration

	// Operator parts (lifecycle.go, monitor.go, metrics.go, alerts.go).
	intake   *intake                     // the source's Emitter: counts, drain context
	outbox   *outboxRelay                // in front of intake; nil without an outbox block (outbox.go)
	idents   map[string]table.Identifier // topic -> Iceberg table
	monitor  *monitor                    // slot poller, table lags, alerts
	sampler  *sampler                    // commit histograms
	progress *loadProgress               // loads' progress into Iceberg (progress.go)
	recon    reconciles                  // reconcile_run.go
	life     atomic.Value                // string: a State* constant
	// owners runs the tables of a sink process (role: sink;
	// kafka_owners.go); nil otherwise.
	owners atomic.Pointer[tableOwners]
}

// New opens the daemon's local state (the log, the registry, the catalog)
// and builds its components. Close releases them.
func New(ctx context.Context, cfg *config.Config, logger *slog.Logger) (_ *Daemon, err error) {
	logger = RedactSecrets(logger, cfg)
	d := &Daemon{cfg: cfg, logger: logger, started: time.Now(), resumeEvery: 2 * time.Second, idents: map[string]table.Identifier{}}
	d.life.Store(StateStarting)
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	pg, my := cfg.Source.Postgres, cfg.Source.MySQL
	if pg == nil && my == nil {
		return nil, errors.New("daemon: no source configured")
	}
	if d.lg, err = openLog(ctx, cfg, logger); err != nil {
		return nil, err
	}
	compact := log.TopicConfig{Partitions: 1, Cleanup: log.CleanupCompact}
	for _, t := range []string{TopicSchemas, TopicState} {
		if err := ensureTopic(ctx, d.lg, t, compact); err != nil {
			return nil, err
		}
	}
	if d.reg, d.regAPI, err = openRegistry(ctx, cfg, d.lg); err != nil {
		return nil, err
	}
	if d.state, err = openStateStore(ctx, d.lg); err != nil {
		return nil, err
	}
	ice := cfg.Sink.Iceberg
	if d.cat, err = iceberg.OpenCatalog(ctx, catalogConfig(cfg)); err != nil {
		return nil, err
	}

	data := log.TopicConfig{Partitions: int32(cfg.Log.Partitions), Retention: cfg.Log.Retention, Cleanup: log.CleanupDelete}
	var tables []iceberg.TableConfig
	for _, name := range cfg.Source.TableNames() {
		ns, tbl := splitTable(name)
		topic := d.topicOf(ns, tbl)
		if err := ensureTopic(ctx, d.lg, topic, data); err != nil {
			return nil, err
		}
		d.topics = append(d.topics, topic)
		if reg, ok := d.reg.(*schema.Registry); ok { // an external registry is its owner's to guard
			reg.Protect(topic+"-key", name)
			reg.Protect(topic+"-value", name)
		}
		ins, itbl := ice.TableIdent(name)
		tc := iceberg.TableConfig{Topic: topic, Ident: table.Identifier{ins, itbl}}
		for _, f := range ice.PartitionSpec(name) {
			tc.PartitionBy = append(tc.PartitionBy, iceberg.PartitionField{Transform: f.Transform, Param: f.Param, Column: f.Column})
		}
		tables = append(tables, tc)
		d.idents[topic] = table.Identifier{ins, itbl}
	}
	db, connector := "", "postgresql"
	if pg != nil {
		db = databaseOf(pg.DSN)
	} else {
		db, connector = mysqlDatabase(my.DSN), "mysql"
	}
	d.emitter = &emitter{
		lg: d.lg, reg: d.reg, state: d.state, pipeline: cfg.Pipeline, db: db, connector: connector,
		topicOf: d.topicOf, partitions: int32(cfg.Log.Partitions), tombstones: cfg.Log.Tombstones, logger: logger.With("component", "emitter"),
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{}, paused: map[string]*pauseState{},
		masker: newMasker(cfg), free: make(chan *batchRecords, 2), prepFree: make(chan *prepSlab, prepSlabsKept),
		// An initial load keeps up to 4 batches in the log's hands while
		// they sync, so one fsync makes several durable.
		pipe: source.Pipeline{Depth: 4},
	}
	if err := d.emitter.loadPaused(ctx, d.topics); err != nil {
		return nil, err
	}
	d.intake = newIntake(d.emitter, rawNames(cfg.Source.TableNames()))
	if d.outbox, err = d.newOutboxRelay(ctx, d.intake); err != nil {
		return nil, err
	}
	keepsDefault := func(c schema.Column) bool { return iceberg.HoldsDefault(ice.FormatVersion, c) }
	if my != nil {
		captured := *my
		captured.Tables = readerTables(cfg, my.Tables) // and the outbox table
		d.reader = newMySQLSource(&captured, keepsDefault, d.state, logger)
	} else {
		heartbeat := pg.HeartbeatInterval
		if heartbeat == 0 {
			heartbeat = -1 // off
		}
		d.reader = postgres.New(postgres.Config{
			DSN: pg.DSN, Slot: pg.Slot, Publication: pg.Publication, Tables: readerTables(cfg, pg.Tables), Messages: readerMessages(cfg),
			Snapshot: pg.Snapshot == "initial", HeartbeatInterval: heartbeat,
			SpillDir: filepath.Join(cfg.DataDir, "spill"), Incremental: incrementalConfig(pg),
			KeepsDefault: keepsDefault,
			// Crash tests only (failpoint builds; 0 elsewhere: the defaults).
			SnapshotChunkRows: int64(failpoint.Knob("LOAD_CHUNK_ROWS")),
			StatusInterval:    time.Duration(failpoint.Knob("STATUS_INTERVAL_MS")) * time.Millisecond,
		}, d.state, logger)
	}
	d.sink = iceberg.New(iceberg.Config{
		Pipeline: cfg.Pipeline, Group: "cdcd-sink-" + cfg.Pipeline, Tables: tables,
		FormatVersion: ice.FormatVersion, CommitInterval: ice.CommitInterval, RetryInterval: ice.RetryInterval,
		Mode: ice.Mode, IndexDir: filepath.Join(cfg.DataDir, "index"), Shared: cfg.Role == config.RoleSink,
		TargetFileSize: ice.Compaction.TargetFileSizeMB << 20,
		Maintenance: iceberg.MaintenanceConfig{
			RetainSnapshots: ice.Compaction.RetainSnapshots, SnapshotMaxAge: ice.Compaction.SnapshotMaxAge,
		},
		Compaction: iceberg.CompactionConfig{
			Disabled: !ice.Compaction.Enabled, Interval: ice.Compaction.Interval,
			SmallFileRatio: float64(ice.Compaction.SmallFilePercent) / 100, MinGroup: ice.Compaction.MinFiles,
			DeleteRatio: float64(ice.Compaction.DeletePercent) / 100, MaxBytes: int64(ice.Compaction.MaxInputMB) << 20,
			MaxRows: int64(ice.Compaction.MaxInputRows), MergeMemory: int64(ice.Compaction.MergeMemoryMB) << 20,
			OrphanAge: ice.Compaction.OrphanAge,
		},
		// Opt-in, not a config key yet: on this project's 2-core machine
		// it did not pay (BENCHMARKS.md, session 24).
		PipelineCommits: os.Getenv("CDCD_PIPELINE_COMMITS") == "1",
		SerialInserts:   os.Getenv("CDCD_SERIAL_INSERTS") == "1",
		SerialUpserts:   os.Getenv("CDCD_SERIAL_UPSERTS") == "1",
		OnCommit:        d.committed,
		OnPause:         func(*iceberg.TableStats) { d.monitor.poke() }, // the alert at once
	}, d.cat, d.lg, d.reg, logger)
	d.monitor = newMonitor(d)
	d.emitter.onPause = d.monitor.poke
	d.emitter.onCaughtUp = d.sink.CaughtUp
	d.sampler = newSampler(d)
	d.progress = newLoadProgress()
	return d, nil
}

// OpenCatalog opens the Iceberg catalog cfg names (for tools and tests that
// read the tables beside or without a running daemon); close it with
// io.Closer when it has a Close.
func OpenCatalog(ctx context.Context, cfg *config.Config) (catalog.Catalog, error) {
	return iceberg.OpenCatalog(ctx, catalogConfig(cfg))
}

// catalogConfig is the sink's catalog and storage from cfg.
func catalogConfig(cfg *config.Config) iceberg.CatalogConfig {
	ice := cfg.Sink.Iceberg
	catCfg := iceberg.CatalogConfig{
		Type: ice.Catalog.Type, URI: ice.Catalog.URI, Name: ice.Catalog.Name, Warehouse: ice.Warehouse,
		Credential: ice.Catalog.Credential, Token: ice.Catalog.Token,
	}
	if s3 := ice.S3; s3 != nil {
		catCfg.S3 = iceberg.S3Config{Endpoint: s3.Endpoint, Region: s3.Region, PathStyle: s3.PathStyle,
			AccessKeyID: s3.AccessKeyID, SecretAccessKey: s3.SecretAccessKey}
	}
	return catCfg
}

// VerifyIndexes checks the key index of each upsert table cfg mirrors
// (those named in only, "namespace.table" or the source's name, when any
// are given) against its Iceberg table; see iceberg.VerifyIndex. The daemon
// must be stopped: it holds the indexes open. A table not created yet is
// skipped.
func VerifyIndexes(ctx context.Context, cfg *config.Config, only []string) ([]*iceberg.IndexCheck, error) {
	ice := cfg.Sink.Iceberg
	if ice.Mode != "upsert" {
		return nil, fmt.Errorf("sink.iceberg.mode is %s: only upsert tables have a key index", ice.Mode)
	}
	cat, err := iceberg.OpenCatalog(ctx, catalogConfig(cfg))
	if err != nil {
		return nil, err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	var out []*iceberg.IndexCheck
	matched := map[string]bool{}
	for _, name := range cfg.Source.TableNames() {
		ns, tbl := ice.TableIdent(name)
		if len(only) > 0 && !slices.Contains(only, name) && !slices.Contains(only, ns+"."+tbl) {
			continue
		}
		matched[name], matched[ns+"."+tbl] = true, true
		t, err := cat.LoadTable(ctx, table.Identifier{ns, tbl})
		if errors.Is(err, catalog.ErrNoSuchTable) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("%s.%s: %w", ns, tbl, err)
		}
		chk, err := iceberg.VerifyIndex(ctx, t, filepath.Join(cfg.DataDir, "index"))
		if err != nil {
			return out, err
		}
		out = append(out, chk)
	}
	for _, name := range only {
		if !matched[name] {
			return out, fmt.Errorf("%s is not a table of this pipeline", name)
		}
	}
	return out, nil
}

// topicOf names a table's topic: <pipeline>.<schema>.<table>, each part
// with the characters a topic name does not take as _ (pgident.TopicPart).
func (d *Daemon) topicOf(namespace, table string) string {
	return d.cfg.Pipeline + "." + pgident.TopicPart(namespace) + "." + pgident.TopicPart(table)
}

// splitTable splits a configured table name into its schema and table,
// unquoted (see internal/pgident).
func splitTable(s string) (string, string) {
	if ns, tbl, err := pgident.Split(s); err == nil {
		return ns, tbl
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "public", s
}

// rawNames are the configured tables as schema.QualifiedName gives them
// (unquoted "schema.table"), the way the source names its changes.
func rawNames(tables []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		ns, tbl := splitTable(t)
		out[i] = ns + "." + tbl
	}
	return out
}

func databaseOf(dsn string) string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return c.Database
}

// Close releases the log and the catalog.
func (d *Daemon) Close() error {
	var errs []error
	if c, ok := d.cat.(interface{ Close() error }); ok && d.cat != nil {
		errs = append(errs, c.Close())
	}
	if d.lg != nil {
		errs = append(errs, d.lg.Close())
	}
	return errors.Join(errs...)
}

// Catalog returns the daemon's Iceberg catalog (for status and the demo).
func (d *Daemon) Catalog() catalog.Catalog { return d.cat }

// Log returns the daemon's log.
func (d *Daemon) Log() log.Log { return d.lg }

// SourceStats returns the reader's counters.
func (d *Daemon) SourceStats() *postgres.Stats { return d.reader.Stats() }

// SinkStats returns the sink's per-table counters.
func (d *Daemon) SinkStats() []*iceberg.TableStats { return d.sink.Stats() }

// CaughtUp reports whether the source has made everything up to lsn
// durable and every table has committed all of its topic.
func (d *Daemon) CaughtUp(lsn uint64) bool {
	st := d.Status()
	return st.CaughtUp(lsn)
}

// CaughtUp reports whether st shows the source past lsn and no table lag.
func (st Status) CaughtUp(lsn uint64) bool {
	if st.Source.Flushed < lsn {
		return false
	}
	for _, t := range st.Tables {
		if t.Lag != 0 {
			return false
		}
	}
	return true
}
