package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/compactor"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// tableWriter is the loop of one table: fetch, decode, buffer, commit.
type tableWriter struct {
	s      *Sink
	cfg    TableConfig
	stats  *TableStats
	logger *slog.Logger

	tbl        *table.Table // nil until it exists
	topicID    string       // the log topic's identity (log.TopicInfo.ID)
	partitions int
	next       []int64 // next offset to fetch
	committed  []int64 // offsets the table holds
	// buffer is the changes the next commit takes.
	buffer
	// behind says the fetcher had not caught up with the log when it sent
	// the last batch taken (commitDue).
	behind  bool
	lastPos []byte
	seen    [][]byte // per partition: the position of the newest record read (nil: unknown)
	// resumed: some partition starts at a reset marker, not at the table's
	// offsets (reset.go), until the next commit lands.
	resumed bool
	tables  map[uint32]*schema.Table // schema id -> table version (fetcher's)
	scanner schema.EnvelopeScanner   // the fetcher's decode's (a load's tails repeat)
	// windows is the table's pool of read buffers (windows.go).
	windows *windowPool

	// pipeline: a commit may land on a goroutine of its own while the loop
	// stages the next (flight.go); set by run when the sink's config says
	// PipelineCommits. pipelineInserts: so may a commit of inserts only
	// (buffer.others 0), set by run unless SerialInserts; pipelineLanding:
	// so may any other, the next staged once it landed, set by run unless
	// SerialUpserts. flight is that commit (nil: none). serialFirst: the
	// loop lands its first commit itself (it starts again after a flight
	// failed: land retries a failure that lasts).
	pipeline, pipelineInserts bool
	pipelineLanding           bool
	flight                    *flight
	serialFirst               bool
	launched                  int // flights launched (tests)

	up      *upsert // upsert mode state
	pending *plan   // the upsert commit in flight
	// files names (and remembers) the files of the current commit attempt;
	// unsettled are those of attempts that did not land but might have,
	// removed once a later commit lands.
	files     *attemptFiles
	unsettled []string
	prod      *snapshotProducer // made by producer()

	// comp maintains the table between its commits (made by compactor()).
	comp       *compactor.Compactor
	compactNow <-chan struct{} // cdcd compact asks
	// sourceCaughtUp: the source caught up after a backlog (Sink.CaughtUp);
	// flushAt is then the topic's ends, to commit at once when read
	// (caughtup.go).
	sourceCaughtUp <-chan struct{}
	flushAt        []int64
	// catchingUp: the last commit was forced by the buffer limits (a
	// backlog), not by the commit interval: compaction waits.
	catchingUp bool
	// backlog counts the bytes of the full batches read since the fetcher
	// last found the topic's end, and snapshotEnded says they held the
	// last row of a load (caughtUp).
	backlog       int
	snapshotEnded bool
	// epoch is this process's owner epoch of a shared table (0: not
	// shared); every commit carries it and checks it (owner.go).
	epoch int64
}

// buffer is what a commit takes: the changes, and the pooled windows they
// may alias, handed back once the commit lands (windows.go).
type buffer struct {
	buf      []change
	bufBytes int       // record bytes in buf
	bufAt    time.Time // when the loop took the buffer's first batch
	// bufSince is the earliest any buffered change may have reached the
	// log (fetched.since).
	bufSince time.Time
	held     [][]byte
	// others counts the changes that are not inserts (snapshot reads and
	// creates): a buffer of inserts only lands in flight (pipelines).
	others int
}

func (w *tableWriter) run(ctx context.Context) error {
	defer w.close() // also after a load that failed with the index open
	// A commit landing on its own goroutine is waited for before the index
	// closes; a table's loop that restarts reloads its outcome.
	defer w.waitFlight()
	w.pipeline, w.pipelineInserts, w.pipelineLanding = w.s.cfg.PipelineCommits, !w.s.cfg.SerialInserts, !w.s.cfg.SerialUpserts
	if err := w.load(ctx); err != nil {
		return err
	}
	w.logger.Info("sink table ready", "mode", w.s.cfg.Mode, "offsets", encodeOffsets(w.next))
	// The fetcher reads and decodes while this loop commits: the two
	// overlap, and the channel bounds what waits in between.
	fctx, stopFetch := context.WithCancel(ctx)
	in := make(chan fetched, 2)
	resume := make(chan struct{})
	fetchErr := make(chan error, 1)
	// A commit hands back its buffer's windows: about MaxBufferedBytes of
	// records and the last batch (batchBytes and a fetch) on top, in
	// windows that a fetch fills only up to the last whole log batch that
	// fits (a load's windows held 0.5–1 MiB of records each).
	w.windows, w.held = newWindowPool(2*(w.s.cfg.MaxBufferedBytes+batchBytes+w.s.cfg.FetchBytes)), nil
	f := newFetcher(w, append([]int64(nil), w.next...))
	go func() { fetchErr <- f.run(fctx, in, resume) }()
	defer func() {
		stopFetch()
		<-fetchErr
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	// A paused or failing table that runs a while with nothing waiting to
	// be committed is well again (one that commits is, at once). An idle
	// one looks at its table every RetryInterval (checkUnderneath).
	health := time.NewTimer(w.s.cfg.RetryInterval)
	defer health.Stop()
	for ctx.Err() == nil {
		if len(w.buf) > 0 {
			timer.Reset(max(time.Until(w.commitDue(len(in) > 0)), 0))
		}
		select {
		case b := <-in:
			if b.barrier || (b.resumed && w.flight != nil) {
				// A truncate, or a reset marker: after the flight.
				if err := w.drain(ctx); err != nil {
					return err
				}
			}
			if b.barrier {
				w.held = append(w.held, b.windows...)
				w.resumed = w.resumed || b.resumed
				if err := w.commitTruncate(ctx, b.next, b.shape); err != nil {
					return err
				}
				select {
				case resume <- struct{}{}:
				case <-ctx.Done():
				}
				continue
			}
			w.accept(b)
			caught := w.caughtUp(b)
			f.recycle(b.changes) // copied into w.buf
			if caught && len(w.buf) > 0 {
				// The end of a backlog or a load: its tail is committed
				// now, not a commit interval later.
				w.catchingUp = true
				if err := w.commit(ctx); err != nil {
					return err
				}
				w.catchingUp = false
			}
		case err := <-fetchErr:
			fetchErr <- err // for the deferred wait
			if ctx.Err() != nil {
				break
			}
			return err
		case <-timer.C:
		case <-health.C:
			health.Reset(w.s.cfg.RetryInterval)
			if len(w.buf) == 0 && w.flight == nil {
				if err := w.checkUnderneath(ctx); err != nil {
					return err
				}
				w.stats.healthy()
			}
		case <-w.flightDone():
			if err := w.drain(ctx); err != nil {
				return err
			}
		case <-w.compactionDone():
			if err := w.drain(ctx); err != nil { // the rewrite commits between the sink's commits
				return err
			}
			if err := w.finishCompaction(ctx); err != nil {
				return err
			}
		case <-w.compactNow:
			w.compactor().Force()
		case <-w.sourceCaughtUp:
			if err := w.noteCaughtUp(ctx); err != nil {
				return err
			}
		case <-ctx.Done():
		}
		if err := w.commitIfCaughtUp(ctx); err != nil {
			return err
		}
		if full := len(w.buf) >= w.s.cfg.MaxBufferedRows || w.bufBytes >= w.s.cfg.MaxBufferedBytes; len(w.buf) > 0 &&
			(full || !time.Now().Before(w.commitDue(len(in) > 0))) {
			w.catchingUp = full
			if err := w.commit(ctx); err != nil {
				return err
			}
		}
		if w.flight == nil {
			w.compactor().Poll(ctx, w.catchingUp)
		}
	}
	if w.comp != nil {
		w.comp.Wait()
	}
	// Stopping: commit what was consumed, within a bounded time, the last
	// commit on the loop.
	w.pipeline, w.pipelineInserts, w.pipelineLanding = false, false, false
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopCommitTimeout)
	defer cancel()
	if err := w.drain(cctx); err != nil {
		return fmt.Errorf("iceberg: final commit of %s: %w", identString(w.cfg.Ident), err)
	}
	if len(w.buf) > 0 {
		if err := w.commit(cctx); err != nil {
			return fmt.Errorf("iceberg: final commit of %s: %w", identString(w.cfg.Ident), err)
		}
	}
	return ctx.Err()
}

// caughtUp reports whether batch b ends a backlog or a load: the fetcher
// hands over full batches (batchBytes) while it reads a backlog and a
// smaller one when it finds the end of every partition; the full ones
// before this one held at least a whole buffer (MaxBufferedBytes), or the
// batches since the last end held the last row of a load (an initial
// load's table, source.snapshot "last_in_data_collection"). A stream that
// the fetcher keeps up with, or that a commit held up for a moment, builds
// no such backlog, so its commits keep their interval. (When the last
// batch was full, the fetcher hands over an empty one once it finds the
// end of every partition.)
func (w *tableWriter) caughtUp(b fetched) bool {
	for i := range b.changes {
		w.snapshotEnded = w.snapshotEnded || b.changes[i].info.SnapshotEnd
	}
	if b.bytes >= batchBytes {
		w.backlog += b.bytes
		return false
	}
	end := w.backlog >= w.s.cfg.MaxBufferedBytes || w.snapshotEnded
	w.backlog, w.snapshotEnded = 0, false
	return end
}

// commitDue is when the buffer is committed unless its limits force a
// commit first: a commit interval after its oldest change reached the log
// (fetched.since), so a change that waited in the log or in the fetcher's
// channel while a commit ran does not wait a whole interval more once the
// loop takes it. That early time holds only once the buffer has caught up
// with what the log held: no batch waits in the channel (waiting), and the
// last one taken was not full and had not waited for room (the fetcher
// had found the end of every partition and read on meanwhile). Otherwise
// one commit of every fetch waiting since the last commit would follow
// another, each with its fixed cost. At the latest, the interval counts
// from when the loop took the buffer's first batch, as it always did.
func (w *tableWriter) commitDue(waiting bool) time.Time {
	due := w.bufAt.Add(w.s.cfg.CommitInterval)
	if early := w.bufSince.Add(w.s.cfg.CommitInterval); !w.behind && !waiting && early.Before(due) {
		return early
	}
	return due
}

// accept appends a fetched batch to the buffer.
func (w *tableWriter) accept(b fetched) {
	if len(b.changes) > 0 {
		since := b.since
		if since.IsZero() {
			since = time.Now()
		}
		if len(w.buf) == 0 {
			w.bufAt, w.bufSince = time.Now(), since
		} else if since.Before(w.bufSince) {
			w.bufSince = since
		}
	}
	w.behind = b.bytes >= batchBytes || b.waited
	if need := len(w.buf) + len(b.changes); need > cap(w.buf) && b.bytes >= batchBytes {
		// A full batch (a load, a backlog): room for a whole buffer at its
		// bytes a change at once, where growing by doubling copied the
		// buffer about twice (a change is about 190 bytes).
		per := max(b.bytes/len(b.changes), 1)
		w.buf = slices.Grow(w.buf, max(need, min(w.s.cfg.MaxBufferedBytes/per, w.s.cfg.MaxBufferedRows)+len(b.changes))-len(w.buf))
	}
	w.buf = append(w.buf, b.changes...)
	w.others += b.others
	w.held = append(w.held, b.windows...)
	w.bufBytes += b.bytes
	if len(w.seen) < w.partitions {
		w.seen = make([][]byte, w.partitions)
	}
	// Positions are copied: they point into a fetch's read buffer, which
	// they would keep alive after the commit.
	for i := range b.changes {
		// A partition's positions grow with its offsets.
		p := b.changes[i].partition
		if i+1 == len(b.changes) || b.changes[i+1].partition != p {
			w.seen[p] = append(w.seen[p][:0:0], b.changes[i].position()...)
		}
	}
	copy(w.next, b.next)
	w.resumed = w.resumed || b.resumed
	if string(b.lastPos) > string(w.lastPos) {
		w.lastPos = append(w.lastPos[:0:0], b.lastPos...)
	}
}

func (w *tableWriter) close() {
	if w.up != nil && w.up.idx != nil {
		w.up.idx.close()
	}
}

// load reads the topic's shape and the table's committed offsets.
func (w *tableWriter) load(ctx context.Context) error {
	info, err := w.s.lg.DescribeTopic(ctx, w.cfg.Topic)
	if err != nil {
		return fmt.Errorf("iceberg: topic %s: %w", w.cfg.Topic, err)
	}
	w.partitions = len(info.Partitions)
	w.tables = map[uint32]*schema.Table{}
	tbl, err := w.s.cat.LoadTable(ctx, w.cfg.Ident)
	switch {
	case errors.Is(err, catalog.ErrNoSuchTable):
		w.tbl = nil
	case err != nil:
		return fmt.Errorf("iceberg: load table %s: %w", identString(w.cfg.Ident), err)
	default:
		if err := w.checkMode(tbl); err != nil {
			return err
		}
		w.tbl = tbl
	}
	w.committed = make([]int64, w.partitions)
	var snap *table.Snapshot
	if w.tbl != nil {
		if w.committed, snap, err = committedOffsets(w.tbl, w.s.cfg.Pipeline, w.partitions); err != nil {
			return err
		}
	}
	w.next = append([]int64(nil), w.committed...)
	if err := w.checkTopic(ctx, info, snap); err != nil {
		return err
	}
	w.buf, w.others = w.buf[:0], 0
	w.publishCommitted()
	// The first compaction and orphan sweep wait a full interval from
	// here: a table that starts behind (a restart with a backlog) knows it
	// from its first commits and defers compaction.
	w.comp = nil
	w.compactor()
	if err := w.mode().loaded(ctx); err != nil {
		return err
	}
	return w.checkDamage(ctx, info)
}

// placedByKey reports whether a record of partition p with key body key is
// where the log's partitioner puts it among n partitions (the emitter's
// partitionOf; the Kafka backend sets the same partition). The fetcher's
// decode asks while the key's bytes are at hand: asked at stage, after the
// fold, they were a cache miss a change (0.1 CPU-s of a 1M-row load).
func placedByKey(p int32, key []byte, n int32) bool {
	return n > 0 && key != nil && p == log.PartitionFor(key, n)
}

func (w *tableWriter) decode(rec *log.Record) (change, error) {
	id, body, err := schema.ParseFrame(rec.Value)
	if err != nil {
		return change{}, undecodable(fmt.Errorf("iceberg: %s/%d@%d: %w", w.cfg.Topic, rec.Partition, rec.Offset, err))
	}
	t, ok := w.tables[id]
	if !ok {
		s, err := w.s.reg.SchemaByID(id)
		if err != nil {
			return change{}, undecodable(fmt.Errorf("iceberg: %s/%d@%d: %w", w.cfg.Topic, rec.Partition, rec.Offset, err))
		}
		if t, err = schema.TableFromValueSchema(s); err != nil {
			return change{}, undecodable(fmt.Errorf("iceberg: %s/%d@%d: %w", w.cfg.Topic, rec.Partition, rec.Offset, err))
		}
		w.tables[id] = t
	}
	info, err := w.scanner.Scan(t, body)
	if err != nil {
		return change{}, undecodable(fmt.Errorf("iceberg: %s/%d@%d: %w", w.cfg.Topic, rec.Partition, rec.Offset, err))
	}
	c := change{table: t, info: info, body: body, partition: rec.Partition, offset: rec.Offset,
		keyChange: rec.Header(schema.HeaderKeyChange) != nil}
	if rec.Key != nil {
		if _, kb, err := schema.ParseFrame(rec.Key); err == nil {
			c.key = kb
			c.placed = placedByKey(rec.Partition, kb, int32(w.partitions))
			// A bigint key's value is read now, its bytes in cache: the
			// fold reading them again long after was a cache miss a change
			// (int64KeyValue).
			if v, n := binary.Varint(kb); n > 0 && n == len(kb) {
				c.keyInt, c.keyIsInt = v, true
			}
		}
	}
	return c, nil
}

// propMode is the table property naming the mode a table was created in.
const propMode = "cdcd.mode"

// checkMode refuses a table cdcd created in the other mode (its cdcd.mode
// property): a mirror and a changelog differ in columns and meaning, so
// the configured mode changed under existing tables would write one into
// the other — an append table's meta columns are not in a mirror, a
// mirror's key is not declared in a changelog — and mix two kinds of rows
// in one table. A table cdcd did not create (no property) is not judged.
func (w *tableWriter) checkMode(tbl *table.Table) error {
	was, ok := tbl.Properties()[propMode]
	if !ok || was == w.mode().name() {
		return nil
	}
	name := identString(w.cfg.Ident)
	return &PauseError{Table: name,
		What: fmt.Sprintf("table %s was created in %s mode (its %s property) but sink.iceberg.mode is %s: "+
			"cdcd does not write one kind of table into the other", name, was, propMode, w.mode().name()),
		Fix: fmt.Sprintf("set sink.iceberg.mode back to %s and restart; or, to have the table in %s mode, drop the Iceberg table %s "+
			"and re-snapshot it (cdcd snapshot -c FILE --replace %s); or capture it under another namespace (sink.iceberg.namespace)",
			was, w.mode().name(), name, name)}
}

// ensureTable creates the table (and namespace) from the first buffered
// change's table version.
func (w *tableWriter) ensureTable(ctx context.Context) error {
	if w.tbl != nil {
		return nil
	}
	var first *schema.Table
	for i := range w.buf {
		if w.buf[i].table != nil {
			first = w.buf[i].table
			break
		}
	}
	if first == nil {
		return errors.New("iceberg: no change to create the table from")
	}
	return w.createTable(ctx, first)
}

// createTable creates the table (and namespace) with the shape of first,
// or loads it when it exists.
func (w *tableWriter) createTable(ctx context.Context, first *schema.Table) error {
	ns := catalog.NamespaceFromIdent(w.cfg.Ident)
	if err := w.s.cat.CreateNamespace(ctx, ns, nil); err != nil && !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		return fmt.Errorf("iceberg: create namespace %v: %w", ns, err)
	}
	sc, err := w.mode().schema(first)
	if err != nil {
		return refuse(tableShapeFix, err)
	}
	spec, err := buildSpec(sc, w.cfg.PartitionBy)
	if err != nil {
		return refuse(tableShapeFix, fmt.Errorf("iceberg: table %s: %w", identString(w.cfg.Ident), err))
	}
	tbl, err := w.s.cat.CreateTable(ctx, w.cfg.Ident, sc, catalog.WithPartitionSpec(spec), catalog.WithProperties(iceberg.Properties{
		table.PropertyFormatVersion:  fmt.Sprint(w.s.cfg.FormatVersion),
		propMode:                     w.mode().name(),
		"cdcd.source-table":          first.QualifiedName(),
		table.ReadSplitTargetSizeKey: fmt.Sprint(readSplitTargetSize),
		// Old metadata.json files go once they leave the metadata log
		// (write.metadata.previous-versions-max, 100): see dropOldMetadata.
		table.MetadataDeleteAfterCommitEnabledKey: "true",
	}))
	if errors.Is(err, catalog.ErrTableAlreadyExists) {
		if tbl, err = w.s.cat.LoadTable(ctx, w.cfg.Ident); err == nil {
			err = w.checkMode(tbl)
		}
	}
	if err != nil {
		return fmt.Errorf("iceberg: create table %s: %w", identString(w.cfg.Ident), err)
	}
	w.logger.Info("created table", "location", tbl.Location(), "format_version", w.s.cfg.FormatVersion, "mode", w.mode().name())
	w.tbl = tbl
	return w.mode().created(ctx)
}

// readSplitTargetSize is the read.split.target-size of the tables cdcd
// creates: readers (iceberg-go, Spark) split a data file larger than this
// along its row groups and read the parts in parallel. The default, 128 MiB,
// is the size compaction aims for, so a compacted table would be read one
// file at a time per reader task (BENCHMARKS.md: TestSplitScan).
const readSplitTargetSize = 32 << 20

// evolve brings the table's schema up to the buffered table versions
// before their rows are written: new columns are added; a column whose type
// widened the way Iceberg allows (int to long, float to double, a decimal's
// precision) is promoted; a narrower type is written into the wider
// column. Any other type change is refused with the column and both types:
// Iceberg cannot change it in place.
func (w *tableWriter) evolve(ctx context.Context) error {
	cur := w.tbl.Schema()
	type add struct {
		name string
		typ  iceberg.Type
		doc  string
		def  iceberg.Literal // the initial-default (defaults.go), or nil
	}
	format := w.tbl.Metadata().Version()
	var adds []add
	widen := map[string]iceberg.Type{}
	seen := map[*schema.Table]bool{}
	for i := range w.buf {
		t := w.buf[i].table
		if t == nil || seen[t] {
			continue
		}
		seen[t] = true
		for _, c := range t.Columns {
			typ, err := icebergType(c)
			if err != nil {
				return refuse(tableShapeFix, err)
			}
			f, ok := cur.FindFieldByName(c.Name)
			if !ok {
				dup := false
				for _, a := range adds {
					dup = dup || a.name == c.Name
				}
				if !dup {
					if err := w.columnGone(t, c.Name); err != nil {
						return err
					}
					a := add{name: c.Name, typ: typ, doc: c.SourceType}
					if HoldsDefault(format, c) {
						a.def = defaultLiteral(c)
					} else if HoldsDefault(w.s.cfg.FormatVersion, c) {
						// The source relied on the configured format.
						w.logger.Error("a column was added with a default that rows already there hold, but this table's format cannot give it to them: "+
							"they read NULL; run cdcd snapshot -c FILE "+t.QualifiedName()+" to read them again",
							"column", c.Name, "format_version", format)
					}
					adds = append(adds, a)
				}
				continue
			}
			to := f.Type
			if wt, ok := widen[c.Name]; ok {
				to = wt
			}
			switch {
			case sameType(to, typ) || promotable(typ, to): // a list's element id is the catalog's
			case promotable(to, typ):
				widen[c.Name] = typ
			default:
				return &PauseError{Table: identString(w.cfg.Ident), What: fmt.Sprintf("column %q of %s changed type to %s (%s) but table %s has %s, and Iceberg cannot change a column's type that way",
					c.Name, t.QualifiedName(), c.SourceType, typ, identString(w.cfg.Ident), f.Type),
					Fix: "rename or drop the column in the Iceberg table (the sink then adds the new one; the rows already there read NULL in it " +
						"until a re-snapshot: cdcd snapshot -c FILE --replace " + t.QualifiedName() + "), or recreate the table, and the table resumes"}
			}
		}
	}
	if len(adds) == 0 && len(widen) == 0 {
		return nil
	}
	tx := w.tbl.NewTransaction()
	us := tx.UpdateSchema(true, false)
	for _, a := range adds {
		us = us.AddColumn([]string{a.name}, a.typ, a.doc, false, a.def)
	}
	for name, typ := range widen {
		us = us.UpdateColumn([]string{name}, table.ColumnUpdate{FieldType: iceberg.Optional[iceberg.Type]{Valid: true, Val: typ}})
	}
	if err := us.Commit(); err != nil {
		return fmt.Errorf("iceberg: evolve the schema of %s: %w", identString(w.cfg.Ident), err)
	}
	tbl, err := tx.Commit(ctx)
	if err != nil {
		return fmt.Errorf("iceberg: evolve the schema of %s: %w", identString(w.cfg.Ident), err)
	}
	w.logger.Info("evolved the table schema", "added", len(adds), "widened", len(widen))
	w.tbl = tbl
	return nil
}

// columnGone checks a source column the table lacks: a column an earlier
// schema of the table had is gone from it — cdcd never drops or renames
// one, so another writer did — and adding it again would leave every row
// already in the table NULL in it. That pauses the table, unless the table
// holds no rows (a re-snapshot's truncate just emptied it).
func (w *tableWriter) columnGone(t *schema.Table, name string) error {
	meta := w.tbl.Metadata()
	id, had := 0, false
	for _, sc := range meta.Schemas() {
		if f, ok := sc.FindFieldByName(name); ok && sc.ID != meta.CurrentSchema().ID {
			id, had = f.ID, true
		}
	}
	if !had || w.up != nil && len(w.up.data) == 0 {
		return nil
	}
	tname := identString(w.cfg.Ident)
	what := fmt.Sprintf("column %q of %s is gone from table %s (dropped by another writer: cdcd never drops or renames a column)", name, t.QualifiedName(), tname)
	back := ""
	if f, ok := meta.CurrentSchema().FindFieldByID(id); ok {
		what = fmt.Sprintf("column %q of %s is named %q in table %s (renamed by another writer: cdcd never renames a column)", name, t.QualifiedName(), f.Name, tname)
		back = fmt.Sprintf("rename it back (ALTER TABLE %s RENAME COLUMN %s TO %s) and the table resumes; or ", tname, f.Name, name)
	}
	fix := back + "re-snapshot it: cdcd snapshot -c FILE --replace " + t.QualifiedName() + " (the re-snapshot empties the table and fills the column)"
	if w.up == nil {
		fix = back + "add the column to the table yourself, accepting NULL in the rows already there"
	}
	return &PauseError{Table: tname, What: what + "; added again, every row already in the table would read NULL in it", Fix: fix}
}

// promotable reports whether a column of type from may become (or hold
// values of) type to: Iceberg's allowed promotions.
func promotable(from, to iceberg.Type) bool {
	switch f := from.(type) {
	case iceberg.Int32Type:
		return to.Equals(iceberg.PrimitiveTypes.Int64)
	case iceberg.Float32Type:
		return to.Equals(iceberg.PrimitiveTypes.Float64)
	case iceberg.DecimalType:
		t, ok := to.(iceberg.DecimalType)
		return ok && t.Scale() == f.Scale() && t.Precision() >= f.Precision()
	}
	return false
}

// failpoint kills the process at a named point when crash tests arm it:
// "sink.<point>" counts hits over all tables, "sink.<table>.<point>" (the
// table's name without namespace) over one.
func (w *tableWriter) failpoint(name string) {
	failpoint.Hit("sink." + name)
	failpoint.Hit("sink." + w.cfg.Ident[len(w.cfg.Ident)-1] + "." + name)
}

// stopCommitTimeout bounds a commit that goes on while the sink stops: the
// final commit of what was consumed, and a compaction's commit begun before
// the stop (CommitRewrite).
const stopCommitTimeout = 30 * time.Second

func newCommitID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
