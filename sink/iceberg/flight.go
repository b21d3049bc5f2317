package iceberg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// Two commits of an upsert table at once. A commit is staged on the
// table's loop (fold, index lookups, rows and deletion vectors written) and
// then lands: manifests, manifest list, the catalog's commit, the key
// index's batch written; serially, nothing else of the table but the
// fetcher runs meanwhile. In flight, the landing runs on a
// goroutine of its own (a flight) while the loop takes the next batches
// and stages the next commit against the state the flight will leave:
//
//   - the key index: stage's lookups consult the flight's keys first (an
//     overlay: each key's new row, or deleted), then pebble, which holds
//     nothing of the flight's until its batch is written;
//   - the live files, vectors and cached vectors (upsert.data, dvs,
//     dvCache) take the flight's plan when it is launched, as adoptUpsert
//     would once it landed;
//   - row ids (format 3): the flight's data files' first_row_id are what
//     its manifest list will give them — the parent's next-row-id for its
//     new data manifest, first in the list, and each file the rows before
//     it — and are checked against the landed snapshot;
//   - index file ids are reserved when a batch takes them.
//
// The next commit is produced only after the flight landed and was
// adopted, from the flight's snapshot: snapshots stay in order, each with
// the offsets of exactly its changes, and the index stays tagged with the
// snapshot it reflects. One flight at most, and it keeps its plan only
// (its buffer and windows serve the next commit). When the flight fails,
// the next commit's staged files are removed and its plan dropped, and the
// flight's commit is settled as land settles an attempt: one that landed
// all the same is adopted and the next commit is made the serial way; one
// that did not rewinds the table's loop to the table's offsets (drain,
// rewindError). Anything unusual — a new table
// version, a reset marker, a key change held back, a truncate, a
// compaction's commit, the idle health check, a stop — waits for the
// flight first (drain). The compactor runs only with no flight.
//
// For every commit only with Config.PipelineCommits: measured in session
// 24 (BENCHMARKS.md) it bought no wall time end to end on two cores, where
// the source and the database take the core it would use, and landing
// beside the next commit's lookups made random updates dearer in CPU. A
// buffer of inserts only (buffer.others 0: a load's snapshot reads, a
// backlog of inserts) lands in flight unless Config.SerialInserts: its
// stage looks up keys no file holds yet, and once the source is done (a
// load's last seconds, session 30's tail) the fetcher, the loop and the
// flight then share two cores instead of taking turns on one (session 31).
//
// Any other commit lands in flight too unless Config.SerialUpserts, but is
// not staged ahead: the next commit waits for it (drain) before it is
// staged, so no overlay is made or consulted and the next stage's lookups
// never run beside a landing. What the flight overlaps is the loop taking
// the next buffer: a commit takes 8 MiB of changes and the fetcher may
// hold only 2 batches (1 MiB each) ready, so after a serial commit the
// loop waited ~15 ms a commit for the fetcher, while the landing
// (manifests, the catalog's commit, their syncs, the index batch) took
// ~16 ms of the loop's ~60. A small gain on two cores, where the source
// takes the core the landing would use: MariaDB streaming, 24 alternated
// pairs, less time in 14 and more in 7, 0.23 s less on average (0.09 in
// the 15 pairs of the build that landed), the same CPU (BENCHMARKS.md,
// session 35). A flight staged so has no overlay, and a commit staged
// ahead (of inserts only) waits for it too.

// flight is an upsert commit landing on its own goroutine.
type flight struct {
	// rows and reads are the changes it commits, and of them the
	// snapshot reads (committedNow's counts): its buffer and windows are
	// free once it is staged.
	rows, reads int
	next        []int64
	props       iceberg.Properties
	plan        *plan
	files       *attemptFiles
	parent      *table.Table
	started     time.Time
	// versions are its changes' table versions: a buffer of others waits
	// for it (evolve and checkKey need the landed table).
	versions []*schema.Table
	done     chan struct{}
	// Set before done closes: the table it left, and why it did not land
	// (errNotAdopted: it landed, the index batch failed).
	tbl *table.Table
	err error
}

// pipelines reports whether the buffer's commit may land on its own
// goroutine: every commit with PipelineCommits, else one of inserts only;
// of an upsert table of format 3 that exists, not shared, not resuming at
// a reset marker.
func (w *tableWriter) pipelines() bool {
	flies := w.pipelineLanding
	if w.others == 0 {
		flies = w.pipelineInserts
	}
	return (w.pipeline || flies) && !w.serialFirst && w.up != nil && w.up.idx != nil && w.tbl != nil && w.mode().name() == ModeUpsert &&
		w.tbl.Metadata().Version() >= 3 && w.epoch == 0 && !w.resumed
}

// stagesAhead reports whether the buffer's commit is staged while the
// flight before it lands (against its overlay); else the flight lands
// first (pipelineLanding).
func (w *tableWriter) stagesAhead() bool {
	return w.pipeline || (w.pipelineInserts && w.others == 0)
}

// commitAhead stages the buffer's commit, waits for the flight before it
// (which it was staged against, when it stages ahead), and launches it. A
// flight staged without an overlay (not ahead itself) lands first.
func (w *tableWriter) commitAhead(ctx context.Context) error {
	started := time.Now()
	ahead := w.stagesAhead()
	if f := w.flight; f != nil && (!ahead || f.plan.over == nil || !f.covers(w.buf)) {
		if err := w.drain(ctx); err != nil {
			return err
		}
	}
	p, props, err := w.stageAhead(ctx, ahead)
	if err != nil {
		// The serial way retries and settles what failed, or says why.
		w.voidAhead(ctx, nil)
		if err := w.drain(ctx); err != nil {
			return err
		}
		return w.commitWith(ctx, w.next, w.attempt)
	}
	if f := w.flight; f != nil {
		<-f.done
		if f.err != nil {
			w.voidAhead(ctx, p)
			if err := w.drain(ctx); err != nil {
				return err
			}
			return w.commitWith(ctx, w.next, w.attempt)
		}
		if err := w.drain(ctx); err != nil {
			w.voidAhead(ctx, p)
			return err
		}
	}
	w.launch(ctx, p, props, started)
	return nil
}

// stageAhead stages the buffer's commit, against the flight's state when
// one is landing (ahead: its keys kept in an overlay for the commit after).
func (w *tableWriter) stageAhead(ctx context.Context, ahead bool) (*plan, iceberg.Properties, error) {
	if w.flight == nil {
		if err := w.checkKey(ctx); err != nil {
			return nil, nil, err
		}
		if err := w.evolve(ctx); err != nil {
			return nil, nil, err
		}
	}
	w.files = newAttemptFiles()
	w.up.ahead = ahead
	defer func() { w.up.ahead = false }()
	return w.stagePlan(ctx, w.commitProps(w.next))
}

// voidAhead drops a commit staged ahead that will not be launched (p nil:
// staging failed), removing its files: nothing can have committed them.
func (w *tableWriter) voidAhead(ctx context.Context, p *plan) {
	if p != nil {
		p.batch.discard()
	}
	if w.files != nil {
		if fs, err := w.tbl.FS(ctx); err == nil {
			w.files.remove(fs)
		}
		w.files = nil
	}
}

// launch hands plan p, staged from the buffer, to a goroutine that lands
// it, and makes the writer's state what p leaves (see above).
func (w *tableWriter) launch(ctx context.Context, p *plan, props iceberg.Properties, started time.Time) {
	f := &flight{next: slices.Clone(w.next), props: props, plan: p, files: w.files,
		parent: w.tbl, started: started, done: make(chan struct{})}
	var last *schema.Table
	for i := range w.buf {
		if t := w.buf[i].table; t != nil && t != last && !slices.Contains(f.versions, t) {
			f.versions, last = append(f.versions, t), t
		}
	}
	// The plan holds what the commit needs (its files are written, its
	// keys copied into the index batch and the overlay): the buffer and
	// its windows serve the next commit. A flight that fails is not
	// retried from them: the table is read again (drain).
	f.rows, f.reads = w.buffer.emptied(w.windows)
	w.files = nil
	w.flight = f
	w.launched++

	u := w.up
	for _, df := range p.added {
		u.data[df.FilePath()] = df
	}
	if u.dvCache == nil {
		u.dvCache = map[string]cachedDV{}
	}
	for ref, d := range p.newDVs {
		u.dvs[ref] = d
		if bm := p.bitmaps[ref]; bm != nil {
			u.dvCache[ref] = cachedDV{puffin: d.FilePath(), bm: bm}
		}
	}
	if len(p.added) > 0 {
		r := &u.rowIDs
		if r.first == nil {
			r.first, r.ids, r.scanned = map[string]int64{}, map[string]*idList{}, map[string]bool{}
		}
		id := f.parent.Metadata().NextRowID()
		for _, df := range p.added {
			r.first[df.FilePath()] = id
			id += df.Count()
		}
	}
	u.over = p.over
	p.batch.bulk = w.catchingUp

	// Made here: the goroutine must not race the loop to make them.
	w.compactor()
	sp := w.producer()
	go func() {
		defer close(f.done)
		cctx := context.WithoutCancel(ctx) // a stop waits for it (drain)
		err := checkCatalog(w.s.cat)
		var tbl *table.Table
		if err == nil {
			tbl, err = sp.commit(cctx, f.parent, p, props, f.files)
		}
		if err != nil {
			f.err = err
			return
		}
		f.tbl = tbl
		if err := p.batch.write(tbl.CurrentSnapshot().SnapshotID); err != nil {
			f.err = errNotAdopted{err}
		}
	}()
}

// flightDone is the flight's done channel (nil: none).
func (w *tableWriter) flightDone() <-chan struct{} {
	if w.flight == nil {
		return nil
	}
	return w.flight.done
}

// waitFlight waits for the flight's goroutine, leaving its outcome to the
// table's next load.
func (w *tableWriter) waitFlight() {
	if w.flight != nil {
		<-w.flight.done
	}
}

// drain waits for the flight and makes its outcome the writer's state: a
// landed commit is adopted like one landed on the loop. A failed one is
// settled as land settles a failed attempt: one that landed all the same
// is adopted; one that did not leaves the writer's state as its parent's,
// and the table's loop starts again from the table's offsets (a
// *rewindError), its changes fetched again, its next commit made on the
// loop with land's retries.
func (w *tableWriter) drain(ctx context.Context) error {
	f := w.flight
	if f == nil {
		return nil
	}
	<-f.done
	w.flight = nil
	// The flight's overlay: nothing reads it once the flight is done (the
	// next commit's stage consulted it, and copied the one key it keeps,
	// holdAbove), so the commit after the next fills it again.
	w.up.spareOver, w.up.over = w.up.over, nil
	var na errNotAdopted
	switch {
	case f.err == nil:
		w.tbl = f.tbl
		snap := w.tbl.CurrentSnapshot()
		if len(f.plan.added) > 0 {
			if want := f.parent.Metadata().NextRowID(); snap.FirstRowID == nil || *snap.FirstRowID != want {
				return errNotAdopted{fmt.Errorf("snapshot %d's first row id is %v, and its files' row ids were taken from %d", snap.SnapshotID, snap.FirstRowID, want)}
			}
		}
		if err := f.plan.batch.adopt(snap.SnapshotID); err != nil {
			return errNotAdopted{err}
		}
	case errors.As(f.err, &na):
		w.tbl = f.tbl
		return f.err
	default:
		w.files, w.pending = f.files, f.plan
		landed, err := w.settleWithin(ctx, f.props[PropCommitID], newBackoff(w.s.cfg.CommitBudget))
		if err != nil {
			w.dropPending()
			if errors.Is(err, errReload) {
				w.discardAttempt(ctx, f.err)
				return err
			}
			w.keepAttempt()
			return fmt.Errorf("iceberg: commit to %s failed (%v), and then: %w", identString(w.cfg.Ident), f.err, err)
		}
		if !landed {
			// settle voided the plan and read the state again.
			w.discardAttempt(ctx, f.err)
			return &rewindError{f.err}
		}
		w.logger.Warn("commit reported an error but landed", "commit_id", f.props[PropCommitID], "err", f.err)
		w.files = nil
		if err := w.landed(ctx); err != nil {
			return errNotAdopted{err}
		}
		// The next commit, staged and dropped, may have taken the
		// flight's cached vectors and marked its own positions in them.
		clear(w.up.dvCache)
	}
	w.committedRows(ctx, f.rows, f.reads, f.next, f.started)
	return nil
}

// rewindError: a commit that landed on its own goroutine failed, and its
// changes, no longer held, are fetched again: the table's loop starts
// again at once from load (class errReload), and lands its next commit on
// the loop (tableWriter.serialFirst).
type rewindError struct{ err error }

func (e *rewindError) Error() string {
	return "iceberg: a commit landing beside the table's loop failed (" + e.err.Error() + "); the table is read again from its offsets"
}
func (e *rewindError) Unwrap() []error { return []error{errReload, e.err} }

// covers reports whether every change of buf is of a table version of the
// flight's changes.
func (f *flight) covers(buf []change) bool {
	var last *schema.Table
	for i := range buf {
		if t := buf[i].table; t != last {
			if !slices.Contains(f.versions, t) {
				return false
			}
			last = t
		}
	}
	return true
}

// overlay is the key index as a commit in flight leaves it: its keys in
// key order, each with its new row's location or deleted (file -1).
type overlay struct {
	arena []byte
	ents  []overlayEntry
	files []string
}

type overlayEntry struct {
	at, end uint32 // the key: arena[at:end]
	file    int32  // in files; -1: deleted
	pos     int64
}

// newOverlay makes an empty overlay for n keys, which stage adds in key
// order (add) and writeRows places (place); spare, when not nil, is one
// nothing reads any more, whose memory it takes (a load's flights made one
// a commit: 132 of the 944 MB a 5M-row load allocated).
func newOverlay(n int, spare *overlay) *overlay {
	if spare == nil {
		return &overlay{ents: make([]overlayEntry, 0, n), arena: make([]byte, 0, 10*n)}
	}
	clear(spare.files)
	spare.ents, spare.arena, spare.files = slices.Grow(spare.ents[:0], n), spare.arena[:0], spare.files[:0]
	return spare
}

// add appends key, deleted until placed, and returns its entry.
func (o *overlay) add(key []byte) int32 {
	at := len(o.arena)
	o.arena = append(o.arena, key...)
	o.ents = append(o.ents, overlayEntry{at: uint32(at), end: uint32(len(o.arena)), file: -1})
	return int32(len(o.ents) - 1)
}

// place gives entry i its key's new row: position pos of file.
func (o *overlay) place(i int32, file string, pos int64) {
	// A commit writes a few files, each a run of its keys.
	n := len(o.files) - 1
	if n < 0 || o.files[n] != file {
		if n = slices.Index(o.files, file); n < 0 {
			o.files = append(o.files, file)
			n = len(o.files) - 1
		}
	}
	o.ents[i].file, o.ents[i].pos = int32(n), pos
}

func (o *overlay) key(i int) []byte { return o.arena[o.ents[i].at:o.ents[i].end] }

// overlayLookup is lookupKeys' memory from commit to commit: the keys the
// overlay does not hold, their indexes in the caller's list and their
// partitions.
type overlayLookup struct {
	keys  [][]byte
	idx   []int
	parts []int32
	// answered counts the keys the overlays answered (tests).
	answered int64
}

// lookupKeys is the index's getMany as the flight leaves it: a key the
// overlay holds is answered there (found at its new row, or not found when
// deleted), the rest by the index.
func (u *upsert) lookupKeys(keys [][]byte, parts []int32, found func(i int, loc location) error) error {
	o := u.over
	if o == nil || len(o.ents) == 0 {
		return u.idx.getMany(keys, parts, found)
	}
	s := &u.sub
	s.keys, s.idx, s.parts = s.keys[:0], s.idx[:0], s.parts[:0]
	defer func() { clear(s.keys) }()
	j := 0
	for i, k := range keys {
		if i > 0 && bytes.Compare(k, keys[i-1]) < 0 {
			// Not in key order (stage sorts them): search from the start.
			j = sort.Search(len(o.ents), func(n int) bool { return bytes.Compare(o.key(n), k) >= 0 })
		} else {
			for j < len(o.ents) && bytes.Compare(o.key(j), k) < 0 {
				j++
			}
		}
		if j < len(o.ents) && bytes.Equal(o.key(j), k) {
			s.answered++
			if e := o.ents[j]; e.file >= 0 {
				if err := found(i, location{file: o.files[e.file], pos: e.pos}); err != nil {
					return err
				}
			}
			continue
		}
		s.keys, s.idx = append(s.keys, k), append(s.idx, i)
		if parts != nil {
			s.parts = append(s.parts, parts[i])
		}
	}
	var sp []int32
	if parts != nil {
		sp = s.parts
	}
	return u.idx.getMany(s.keys, sp, func(i int, loc location) error { return found(s.idx[i], loc) })
}
