package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"golang.org/x/sync/errgroup"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/log"
)

// Snapshot summary properties cdcd writes on every data commit (frozen:
// doc.go, "Formats").
const (
	PropPipeline       = "cdcd.pipeline"        // the pipeline's name
	PropOffsets        = "cdcd.offsets"         // JSON {"partition": next offset}
	PropSourcePosition = "cdcd.source-position" // hex of the newest source position committed
	PropCommitID       = "cdcd.commit-id"       // unique per commit attempt; settles unknown outcomes
	// OffsetsTag names the tag on the newest snapshot carrying offsets.
	OffsetsTag = "cdcd-offsets"
	// PropCompactionID marks a compaction's REPLACE snapshot.
	PropCompactionID = "cdcd.compaction-id"
	// PropRows is "0" on commits that change no rows (offsets only), so a
	// key index tagged with an older snapshot needs no rebuild.
	PropRows = "cdcd.rows"
)

// Registry resolves the schema ids framed into log records.
type Registry interface {
	SchemaByID(id uint32) (string, error)
}

// TableConfig binds a log topic to an Iceberg table.
type TableConfig struct {
	Topic string
	Ident table.Identifier
	// PartitionBy is the partition spec of the table if cdcd creates it.
	PartitionBy []PartitionField
}

// Config configures a Sink.
type Config struct {
	// Pipeline is written into every snapshot; a table whose newest offsets
	// belong to another pipeline is refused.
	Pipeline string
	// Group is the consumer group whose committed offsets mirror the
	// table's (for lag); the table stays the truth.
	Group  string
	Tables []TableConfig
	// FormatVersion of new tables: 2 or 3.
	FormatVersion int
	// CommitInterval is the longest a consumed change waits for its commit
	// to begin, counted from when it reached the log once the table's loop
	// has caught up with the log (commitDue), else from when the loop took
	// it; default 10s.
	CommitInterval time.Duration
	// MaxBufferedRows forces a commit when this many rows wait; default 500k.
	MaxBufferedRows int
	// MaxBufferedBytes forces a commit when this many bytes of records
	// wait; default 8 MiB. It bounds the sink's memory.
	MaxBufferedBytes int
	// FetchBytes bounds one fetch; default 1 MiB. Buffered changes point
	// into the fetch's read buffer (no copy), so a change waiting for its
	// commit keeps its fetch's whole buffer alive: small fetches keep that
	// memory near MaxBufferedBytes.
	FetchBytes int
	// Mode is ModeUpsert (mirror the source; default) or ModeAppend (a
	// changelog).
	Mode string
	// TargetFileSize is the size at which a data file is closed and the
	// next one started; default 128 MiB.
	TargetFileSize int
	// IndexDir holds the upsert tables' key indexes (one directory each).
	// REQUIRED in upsert mode.
	IndexDir string
	// Maintenance says when each table's metadata is maintained.
	Maintenance MaintenanceConfig
	// Compaction configures data-file compaction of upsert tables.
	Compaction CompactionConfig
	// RetryInterval is how long a paused or failing table waits before it
	// is tried again; default 30s.
	RetryInterval time.Duration
	// CommitBudget bounds the retries of one commit that fails for a
	// temporary reason (catalog or storage unreachable); past it the
	// table's loop restarts after RetryInterval. Default 2m.
	CommitBudget time.Duration
	// Shared says other sink processes share these tables (the Kafka
	// backend's role: sink): each table runs in the process that owns it
	// (RunTable, not Run), which first claims it with a new owner epoch,
	// and a commit of an owner whose epoch is no longer the table's newest
	// is refused (ErrFenced; owner.go).
	Shared bool
	// PipelineCommits lets an upsert table's commit land on a goroutine of
	// its own while the table's loop stages the next one (flight.go);
	// otherwise each commit lands before the next is staged. Off by
	// default: on two cores, shared with the source and the database, it
	// bought no wall time and cost CPU on updates (BENCHMARKS.md, session
	// 24); the daemon turns it on with CDCD_PIPELINE_COMMITS=1. A commit
	// of inserts only (a load's rows, a backlog of inserts) lands in
	// flight all the same unless SerialInserts: those need no lookups in
	// the key index, and the sink's chain (fetch, fold and write, land)
	// then runs on two cores (BENCHMARKS.md, session 31). Any other
	// commit lands in flight too unless SerialUpserts, but the next is
	// staged only once it landed: the landing's writes and syncs overlap
	// the next buffer's fetching, not its lookups (BENCHMARKS.md, session
	// 35).
	PipelineCommits bool
	// SerialInserts lands commits of inserts only serially too (the
	// daemon: CDCD_SERIAL_INSERTS=1, for comparisons).
	SerialInserts bool
	// SerialUpserts lands a commit with updates or deletes on the table's
	// loop, which takes the next batch only after it (the daemon:
	// CDCD_SERIAL_UPSERTS=1, for comparisons).
	SerialUpserts bool
	// OnCommit, when set, is called after every data commit that lands,
	// with the table's stats and how long the commit took (the daemon's
	// commit-duration histogram). It runs on the table's loop: it must not
	// block.
	OnCommit func(stats *TableStats, took time.Duration)
	// OnPause, when set, is called when a table pauses (its stats hold
	// the reason), so the daemon's alert fires at once, not at its next
	// round. It must not block.
	OnPause func(stats *TableStats)
}

// Table modes.
const (
	ModeUpsert = "upsert"
	ModeAppend = "append"
)

// TableStats are one table's counters.
type TableStats struct {
	Topic, Table  string
	Rows          atomic.Int64 // rows committed
	Commits       atomic.Int64
	LastCommit    atomic.Int64 // unix ms
	LastCommitDur atomic.Int64 // ns
	SnapshotID    atomic.Int64
	// Committed is the next offset per partition the table holds.
	Committed atomic.Pointer[[]int64]
	// Current is the table as this process's last commit to it left it
	// (nil before the first): what the daemon's metrics read the commits'
	// summaries from, instead of loading the table (and parsing its
	// metadata, every snapshot in it) from the catalog.
	Current atomic.Pointer[table.Table]
	// SnapshotRows are the rows among Rows that snapshot reads brought (op
	// r: initial loads, incremental snapshots): a load's progress into the
	// table.
	SnapshotRows atomic.Int64
	// Paused holds why the table is paused (nil while it runs), since
	// PausedAt (unix ms); PausedFix what to do about it. A paused table
	// is looked at again every RetryInterval and runs again once the
	// cause is gone (a commit lands, or nothing waits to be committed).
	Paused    atomic.Pointer[string]
	PausedFix atomic.Pointer[string]
	PausedAt  atomic.Int64
	// Failing holds the last error of a table whose commits fail for a
	// temporary reason beyond the commit budget (nil once a commit lands);
	// it is not paused, and its loop restarts every RetryInterval.
	Failing atomic.Pointer[string]
	// Compaction is the table's compaction record.
	Compaction atomic.Pointer[CompactionStats]
	// Maintenance describes the table's files (upsert tables).
	Maintenance atomic.Pointer[MaintenanceStatus]
}

// tuning holds internal sizes that tests and benchmarks vary; zero values
// take the defaults.
type tuning struct {
	index indexOptions
	// rebuildBatch is how many keys an index rebuild writes at a time
	// (default rebuildBatchRows).
	rebuildBatch int64
}

// Sink writes every configured topic into its table, one loop per table.
type Sink struct {
	cfg    Config
	cat    catalog.Catalog
	lg     log.Log
	reg    Registry
	logger *slog.Logger

	tune tuning
	// untrusted holds the log ranges tables wait at for a reset marker;
	// damaged the files their tables lost.
	untrusted untrusted
	damaged   damaged

	mu         sync.Mutex
	stats      []*TableStats
	compactNow []chan struct{} // per table: compact now (cdcd compact)
	caughtUp   []chan struct{} // per table: the source caught up (CaughtUp)
}

// defaults fills the zero fields with their defaults.
func (cfg *Config) defaults() {
	if cfg.MaxBufferedRows <= 0 {
		cfg.MaxBufferedRows = 500_000
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = 8 << 20
	}
	if cfg.FetchBytes <= 0 {
		cfg.FetchBytes = 1 << 20
	}
	if cfg.CommitInterval <= 0 {
		cfg.CommitInterval = 10 * time.Second
	}
	if cfg.FormatVersion == 0 {
		cfg.FormatVersion = 3
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeUpsert
	}
	if cfg.TargetFileSize <= 0 {
		cfg.TargetFileSize = 128 << 20
	}
	cfg.Maintenance = cfg.Maintenance.WithDefaults()
	cfg.Compaction = cfg.Compaction.WithDefaults()
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = 30 * time.Second
	}
	if cfg.CommitBudget <= 0 {
		cfg.CommitBudget = 2 * time.Minute
	}
}

// New returns a Sink; nothing runs until Run.
func New(cfg Config, cat catalog.Catalog, lg log.Log, reg Registry, logger *slog.Logger) *Sink {
	if k := failpoint.Knob("SINK_RETRY_INTERVAL_MS"); k > 0 {
		// A test's short retry interval (a binary built with failpoints).
		cfg.RetryInterval = time.Duration(k) * time.Millisecond
	}
	cfg.defaults()
	s := &Sink{cfg: cfg, cat: cat, lg: lg, reg: reg, logger: logger.With("sink", "iceberg")}
	for _, t := range cfg.Tables {
		s.stats = append(s.stats, &TableStats{Topic: t.Topic, Table: identString(t.Ident)})
		s.compactNow = append(s.compactNow, make(chan struct{}, 1))
		s.caughtUp = append(s.caughtUp, make(chan struct{}, 1))
	}
	return s
}

// CaughtUp tells every table that its source has caught up with its
// database after reading a backlog, and that what it read is durable in
// the log: each table's loop takes the ends of its topic's partitions
// now and, once it has read that far, commits what it holds at once
// instead of waiting out the commit interval (catchup.go). It does not
// wait.
func (s *Sink) CaughtUp() {
	for _, ch := range s.caughtUp {
		select {
		case ch <- struct{}{}:
		default: // one notice is pending already
		}
	}
}

// Stats returns each table's live counters.
func (s *Sink) Stats() []*TableStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*TableStats(nil), s.stats...)
}

// Run consumes and commits until ctx ends (then commits what it holds).
//
// A table that fails does not stop the sink or the other tables. A failure
// of class ErrPaused pauses the table at once: its stats say why and the
// fix, and it is looked at again every RetryInterval. Any other failure
// (past the commit budget) restarts the table's loop after RetryInterval.
// Either way the table resumes from the offsets its Iceberg table holds,
// so nothing is lost or doubled.
func (s *Sink) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, t := range s.cfg.Tables {
		g.Go(func() error {
			if err := s.RunTable(gctx, t.Topic); err != nil && gctx.Err() == nil {
				return err
			}
			return nil
		})
	}
	return g.Wait()
}

// RunTable runs the loop of the table of topic (as Run does for every
// table) until ctx ends. With Config.Shared it claims the table first and
// returns an error wrapping ErrFenced when a newer owner took it over.
// REQUIRES: topic is one of Config.Tables, and no other RunTable of it
// runs in this Sink.
func (s *Sink) RunTable(ctx context.Context, topic string) error {
	i := slices.IndexFunc(s.cfg.Tables, func(t TableConfig) bool { return t.Topic == topic })
	if i < 0 {
		return fmt.Errorf("iceberg: topic %s is not a table of this sink", topic)
	}
	t, stats := s.cfg.Tables[i], s.stats[i]
	logger := s.logger.With("table", identString(t.Ident), "topic", t.Topic)
	var epoch int64
	var quick time.Time // the last restart at once (errReload)
	var rewound bool    // the last run ended in a *rewindError
	for {
		var err error
		if s.cfg.Shared && epoch == 0 {
			epoch, err = s.claim(ctx, t, logger)
		}
		if err == nil {
			w := &tableWriter{s: s, cfg: t, stats: stats, logger: logger, compactNow: s.compactNow[i],
				sourceCaughtUp: s.caughtUp[i], epoch: epoch, serialFirst: rewound}
			err = w.run(ctx)
		}
		var rw *rewindError
		rewound = errors.As(err, &rw)
		if ctx.Err() != nil {
			return nil
		}
		wait := restartWait(err, &quick, time.Now(), s.cfg.RetryInterval)
		s.tableFailed(stats, logger, identString(t.Ident), err, wait)
		if errors.Is(err, ErrFenced) {
			return err
		}
		if wait == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// restartWait is how long a table's loop that ended with err waits before
// it starts again: interval, or nothing for a table rolled back or
// dropped under the sink (errReload) — but at most once per interval
// (quick is when it last did), so such a table does not spin.
func restartWait(err error, quick *time.Time, now time.Time, interval time.Duration) time.Duration {
	if errors.Is(err, errReload) && now.Sub(*quick) >= interval {
		*quick = now
		return 0
	}
	return interval
}

// tableFailed records why a table's loop stopped: paused (ErrPaused),
// failing, or to be loaded again (errReload); wait is how long until it
// starts again.
func (s *Sink) tableFailed(stats *TableStats, logger *slog.Logger, name string, err error, wait time.Duration) {
	var rb *rolledBackError
	var rw *rewindError
	switch {
	case errors.As(err, &rw) && wait == 0:
		logger.Warn("a commit failed while the table's loop went on; the table is read again from the offsets it holds and "+
			"the changes since are fetched again, nothing is lost", "err", rw.err)
		return
	case errors.As(err, &rb):
		offs := "none (the log's start)"
		if rb.Offsets != nil {
			offs = encodeOffsets(rb.Offsets)
		}
		logger.Warn("the table was rolled back under cdcd (another engine set its main branch to an older snapshot): "+
			"the rows of the snapshots after it are gone from the mirror, so cdcd loads the table again, rebuilds its key index "+
			"and writes the log's changes from the older snapshot's offsets again; nothing to do, unless the rollback was meant to drop "+
			"those changes for good (then re-snapshot the table)",
			"snapshot", rb.Current, "cdcd_snapshot", rb.Known, "offsets", offs, "cdcd_offsets", encodeOffsets(rb.Held), "restart_in", wait)
		return
	case errors.Is(err, errKeyRedefined):
		logger.Info("restarting at the re-snapshot's reset markers (the source's primary key was redefined)", "restart_in", wait)
		return
	case errors.Is(err, errTableGone):
		logger.Warn("the table is gone from the catalog (dropped?): it is created again and written from the log's start; "+
			"to stop capturing it, remove its source table from the config", "err", err, "restart_in", wait)
		return
	}
	if classify(err) != ErrPaused {
		msg := err.Error()
		stats.Failing.Store(&msg)
		logger.Error("table's commits are failing; it is retried from the offsets its table holds, nothing is lost",
			"err", err, "retry_in", s.cfg.RetryInterval)
		return
	}
	if path := missingFile(err); path != "" {
		s.damaged.set(stats.Topic, path)
	}
	pe := asPause(name, err)
	// The reason names the fix too: it is what /status and the alert show.
	reason, fix := pe.What+"; to fix: "+pe.Fix, pe.Fix
	if prev := stats.Paused.Load(); prev != nil && *prev == reason {
		logger.Debug("table still paused", "reason", reason)
		return
	}
	stats.PausedAt.Store(time.Now().UnixMilli())
	stats.PausedFix.Store(&fix)
	stats.Paused.Store(&reason)
	logger.Error("table paused: its changes wait in the log; the other tables go on",
		"reason", pe.What, "what_to_do", fix, "err", err, "checked_again_every", s.cfg.RetryInterval)
	if s.cfg.OnPause != nil {
		s.cfg.OnPause(stats)
	}
}

// healthy clears a pause or failure: the table commits again, or has
// nothing waiting to be committed.
func (st *TableStats) healthy() {
	st.Failing.Store(nil)
	st.Paused.Store(nil)
	st.PausedFix.Store(nil)
}

func identString(id table.Identifier) string {
	out := ""
	for i, p := range id {
		if i > 0 {
			out += "."
		}
		out += p
	}
	return out
}

// encodeOffsets renders next offsets as the cdcd.offsets property.
func encodeOffsets(next []int64) string {
	m := make(map[string]int64, len(next))
	for p, o := range next {
		m[strconv.Itoa(p)] = o
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// decodeOffsets parses cdcd.offsets into next offsets for n partitions.
func decodeOffsets(s string, n int) ([]int64, error) {
	var m map[string]int64
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("iceberg: bad %s %q: %w", PropOffsets, s, err)
	}
	next := make([]int64, n)
	for k, v := range m {
		p, err := strconv.Atoi(k)
		if err != nil || p < 0 {
			return nil, fmt.Errorf("iceberg: bad partition %q in %s", k, PropOffsets)
		}
		if p >= n {
			return nil, fmt.Errorf("iceberg: %s names partition %d but the topic has %d partitions", PropOffsets, p, n)
		}
		next[p] = v
	}
	return next, nil
}

// committedOffsets walks the current snapshot's ancestry to the newest
// snapshot that carries offsets (maintenance commits may carry none).
func committedOffsets(tbl *table.Table, pipeline string, n int) ([]int64, *table.Snapshot, error) {
	snap, broken := newestOffsets(tbl)
	if snap == nil {
		if broken {
			name := identString(tbl.Identifier())
			return nil, nil, &PauseError{Table: name,
				What: "no snapshot left in the table's history carries cdcd's offsets (another engine's snapshots are on top and the ones between were expired, with cdcd's " +
					OffsetsTag + " tag): resuming from the log's start could apply its changes twice",
				Fix: resnapshotFix(name) + " (the table resumes at the re-snapshot's reset marker)"}
		}
		return make([]int64, n), nil, nil
	}
	if owner := snap.Summary.Properties[PropPipeline]; owner != pipeline {
		return nil, nil, &PauseError{Table: identString(tbl.Identifier()),
			What: fmt.Sprintf("the table was last written by pipeline %q, not %q; two pipelines must not write one table", owner, pipeline),
			Fix:  fmt.Sprintf("give this pipeline other tables (sink.iceberg.namespace or the table's target), or name it %q again", owner)}
	}
	next, err := decodeOffsets(snap.Summary.Properties[PropOffsets], n)
	return next, snap, err
}

// newestOffsets finds the newest snapshot carrying offsets in tbl's
// ancestry; where the walk meets a parent that was expired (another
// engine's snapshots on top, and an expiry that kept few), the snapshot
// tagged OffsetsTag, which cdcd moves to each such snapshot, if it can be
// an ancestor of the current one (behindBreak). broken says the walk met
// an expired parent and no tag helped: offsets may have been there.
func newestOffsets(tbl *table.Table) (snap *table.Snapshot, broken bool) {
	meta := tbl.Metadata()
	carries := func(s *table.Snapshot) bool {
		if s == nil || s.Summary == nil {
			return false
		}
		_, ok := s.Summary.Properties[PropOffsets]
		return ok
	}
	var oldest *table.Snapshot // the last snapshot the walk reached
	for s := tbl.CurrentSnapshot(); s != nil; {
		if carries(s) {
			return s, false
		}
		if s.ParentSnapshotID == nil {
			return nil, false
		}
		oldest = s
		if s = meta.SnapshotByID(*s.ParentSnapshotID); s == nil {
			broken = true
		}
	}
	if !broken {
		return nil, false
	}
	for name, ref := range meta.Refs() {
		if name == OffsetsTag {
			if s := meta.SnapshotByID(ref.SnapshotID); carries(s) && behindBreak(s, oldest) {
				return s, false
			}
		}
	}
	return nil, true
}

// behindBreak reports whether tagged can be an ancestor of oldest, the
// snapshot whose parent is gone: it is older. A tag ahead of the current
// snapshot (the branch rolled back behind it) is not: trusting it would
// skip every change after the rollback point. Sequence numbers grow along
// every ancestry (v2 and later); v1 tables have none, and their
// timestamps stand in.
func behindBreak(tagged, oldest *table.Snapshot) bool {
	if tagged.SequenceNumber != 0 || oldest.SequenceNumber != 0 {
		return tagged.SequenceNumber < oldest.SequenceNumber
	}
	return tagged.TimestampMs < oldest.TimestampMs
}

// hasCommit reports whether any snapshot of tbl carries commit id.
func hasCommit(tbl *table.Table, id string) bool {
	for _, snap := range tbl.Metadata().Snapshots() {
		if snap.Summary != nil && snap.Summary.Properties[PropCommitID] == id {
			return true
		}
	}
	return false
}
