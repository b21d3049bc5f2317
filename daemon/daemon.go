// Package daemon wires cdcd's components from a Config and runs them: the
// source, the emitter that makes its changes durable in the log, the
// Iceberg sink and the admin HTTP listener, in one errgroup.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/errgroup"

	"github.com/cdcd-dev/cdcd/config"
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

	lg      *log.Embedded
	reg     *schema.Registry
	state   *stateStore
	cat     catalog.Catalog
	reader  *postgres.Reader
	emitter *emitter
	sink    *iceberg.Sink
	topics  []string
	started time.Time
}

// New opens the daemon's local state (the log, the registry, the catalog)
// and builds its components. Close releases them.
func New(ctx context.Context, cfg *config.Config, logger *slog.Logger) (_ *Daemon, err error) {
	d := &Daemon{cfg: cfg, logger: logger, started: time.Now()}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	pg := cfg.Source.Postgres
	if pg == nil {
		return nil, errors.New("daemon: no source configured")
	}
	if d.lg, err = log.Open(filepath.Join(cfg.DataDir, "log"), log.Options{}, logger.With("component", "log")); err != nil {
		return nil, err
	}
	compact := log.TopicConfig{Partitions: 1, Cleanup: log.CleanupCompact}
	for _, t := range []string{TopicSchemas, TopicState} {
		if err := ensureTopic(ctx, d.lg, t, compact); err != nil {
			return nil, err
		}
	}
	if d.reg, err = schema.OpenRegistry(ctx, schemaStore{d.lg}); err != nil {
		return nil, err
	}
	if d.state, err = openStateStore(ctx, d.lg); err != nil {
		return nil, err
	}
	ice := cfg.Sink.Iceberg
	if d.cat, err = iceberg.OpenCatalog(ctx, iceberg.CatalogConfig{
		Type: ice.Catalog.Type, URI: ice.Catalog.URI, Name: ice.Catalog.Name, Warehouse: ice.Warehouse,
	}); err != nil {
		return nil, err
	}

	data := log.TopicConfig{Partitions: int32(cfg.Log.Partitions), Retention: cfg.Log.Retention, Cleanup: log.CleanupDelete}
	var tables []iceberg.TableConfig
	for _, name := range pg.Tables {
		ns, tbl := splitTable(name)
		topic := d.topicOf(ns, tbl)
		if err := ensureTopic(ctx, d.lg, topic, data); err != nil {
			return nil, err
		}
		d.topics = append(d.topics, topic)
		ins, itbl := ice.TableIdent(name)
		tables = append(tables, iceberg.TableConfig{Topic: topic, Ident: table.Identifier{ins, itbl}})
	}
	d.emitter = &emitter{
		lg: d.lg, reg: d.reg, pipeline: cfg.Pipeline, db: databaseOf(pg.DSN), connector: "postgresql",
		topicOf: d.topicOf, partitions: int32(cfg.Log.Partitions),
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{},
	}
	heartbeat := pg.HeartbeatInterval
	if heartbeat == 0 {
		heartbeat = -1 // off
	}
	d.reader = postgres.New(postgres.Config{
		DSN: pg.DSN, Slot: pg.Slot, Publication: pg.Publication, Tables: pg.Tables,
		Snapshot: pg.Snapshot == "initial", HeartbeatInterval: heartbeat,
		SpillDir: filepath.Join(cfg.DataDir, "spill"),
	}, d.state, logger)
	d.sink = iceberg.New(iceberg.Config{
		Pipeline: cfg.Pipeline, Group: "cdcd-sink-" + cfg.Pipeline, Tables: tables,
		FormatVersion: ice.FormatVersion, CommitInterval: ice.CommitInterval,
	}, d.cat, d.lg, d.reg, logger)
	return d, nil
}

// topicOf names a table's topic: <pipeline>.<schema>.<table>.
func (d *Daemon) topicOf(namespace, table string) string {
	return d.cfg.Pipeline + "." + namespace + "." + table
}

func splitTable(s string) (string, string) {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "public", s
}

func databaseOf(dsn string) string {
	c, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return c.Database
}

// Run runs every component until ctx ends or one fails. On a stop, the
// sink commits what it has consumed before Run returns.
func (d *Daemon) Run(ctx context.Context) error {
	d.logger.Info("cdcd starting", "pipeline", d.cfg.Pipeline, "tables", len(d.topics), "data_dir", d.cfg.DataDir)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		err := d.reader.Run(gctx, d.emitter)
		if err != nil && gctx.Err() == nil {
			var se *postgres.SlotError
			if errors.As(err, &se) {
				// The slot or the cluster can't be trusted to deliver every
				// change: an operator must decide.
				d.logger.Error("capture stopped: replication slot can't be trusted", "alert", true,
					"kind", string(se.Kind), "slot", se.Slot, "detail", se.Detail)
			}
			return fmt.Errorf("source: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		err := d.sink.Run(gctx)
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("sink: %w", err)
		}
		return nil
	})
	if addr := d.cfg.Admin.Listen; addr != "" && addr != "off" {
		srv, err := d.adminServer(addr)
		if err != nil {
			return err
		}
		g.Go(func() error { return srv.serve(gctx) })
	}
	err := g.Wait()
	if err == nil && ctx.Err() != nil {
		d.logger.Info("cdcd stopped", "reason", context.Cause(ctx))
	}
	return err
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
