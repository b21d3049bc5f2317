package iceberg

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/cockroachdb/pebble/v2"
)

// Compaction, per upsert table, inside the table's own loop:
//
//  1. plan (in the loop): pick small files in groups and delete-heavy files
//     of one partition, up to a byte cap, and take their current vectors;
//  2. rewrite (in the background, while the sink keeps committing): merge
//     the files' surviving rows — each file is sorted by key, so a k-way
//     merge keeps the output sorted and memory small — into new files,
//     remembering each old row's new position;
//  3. commit (in the loop, between two sink commits): rows the sink deleted
//     in the old files meanwhile get the same deletion in the new files;
//     one REPLACE snapshot removes the old files and their vectors and adds
//     the new ones, carrying the latest offsets and the compaction id; then
//     the key index moves the keys still pointing at old files.
//
// An intent {id, old files, new files} is stored in the key index before
// the commit and removed with the index update, atomically. On a restart
// with an intent left: if the commit landed the index is rebuilt; if not,
// the new files are deleted.

// CompactionConfig configures compaction.
type CompactionConfig struct {
	// Disabled turns compaction off.
	Disabled bool
	// Interval between compaction plans of a table; default 1m.
	Interval time.Duration
	// SmallFileRatio: files smaller than this share of the target file size
	// are small; default 0.75.
	SmallFileRatio float64
	// MinGroup is the fewest small files of one partition worth a rewrite;
	// default 5.
	MinGroup int
	// DeleteRatio: a file with at least this share of its rows deleted is
	// rewritten on its own; default 0.30.
	DeleteRatio float64
	// MaxBytes caps the input of one compaction; default 192 MiB (one and a
	// half times the default target, so two files under SmallFileRatio of
	// it fit in one compaction).
	MaxBytes int64
	// MaxRows caps the rows of one compaction's input and of each file it
	// writes; default 2M. The rewrite holds every copied row's key and new
	// position until its commit (about 30 bytes a row with a bigint key,
	// so 60 MB at the default); narrow rows compress so well that a byte
	// cap alone let one compaction take a 20M-row table whole (1.7 GB).
	MaxRows int64
	// OrphanAge is how old an unreferenced file must be before it is
	// removed; default 24h, never less than 1h.
	OrphanAge time.Duration
	// OrphanInterval between orphan sweeps of a table; default 6h.
	OrphanInterval time.Duration
}

func (c *CompactionConfig) defaults() {
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.SmallFileRatio <= 0 {
		c.SmallFileRatio = 0.75
	}
	if c.MinGroup <= 0 {
		c.MinGroup = 5
	}
	if c.DeleteRatio <= 0 {
		c.DeleteRatio = 0.30
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 192 << 20
	}
	if c.MaxRows <= 0 {
		c.MaxRows = 2_000_000
	}
	if c.OrphanAge < time.Hour {
		c.OrphanAge = 24 * time.Hour
	}
	if c.OrphanInterval <= 0 {
		c.OrphanInterval = 6 * time.Hour
	}
}

// compaction is one rewrite in flight.
type compaction struct {
	id      string
	old     []iceberg.DataFile
	oldDV   []*dv.RoaringPositionBitmap // each old file's vector when planned (nil: none)
	started time.Time

	// set by the rewrite
	newFiles []iceberg.DataFile
	moved    [][]newLoc // per old file, per old position: where the row went
	keys     movedKeys  // every row written, for the index
	err      error
	done     chan struct{}
}

type newLoc struct {
	file int32 // index into newFiles; -1: the row was deleted when planned
	pos  int32
}

// movedKeys are the keys a rewrite copied and where each went, packed:
// the keys end to end in one buffer. A slice and an allocation per key
// took about 48 bytes a row, so a compaction of 128 MiB of narrow rows
// (2.8M) held 130 MB; packed, a bigint key takes 17.
type movedKeys struct {
	buf  []byte
	ends []uint32 // ends[i]: where key i ends in buf
	locs []newLoc
}

func (m *movedKeys) add(key []byte, loc newLoc) {
	m.buf = append(m.buf, key...)
	m.ends = append(m.ends, uint32(len(m.buf)))
	m.locs = append(m.locs, loc)
}

func (m *movedKeys) len() int { return len(m.locs) }

// at returns key i (valid while m lives) and where it went.
func (m *movedKeys) at(i int) ([]byte, newLoc) {
	start := uint32(0)
	if i > 0 {
		start = m.ends[i-1]
	}
	return m.buf[start:m.ends[i]:m.ends[i]], m.locs[i]
}

// CompactionStats are a table's compaction counters.
type CompactionStats struct {
	Runs, FilesIn, FilesOut, BytesIn, BytesOut int64
	Last                                       time.Time
	LastDuration                               time.Duration
	LastErr                                    string
}

// compactCandidate is a live data file and how many of its rows are deleted.
type compactCandidate struct {
	df      iceberg.DataFile
	deleted int64
}

// pickCompaction chooses the files of one partition to rewrite: the files
// with at least DeleteRatio of their rows deleted, each due on its own,
// and the small ones (under SmallFileRatio of target) in size tiers, up to
// MaxBytes of input. The small files, sorted by size, are cut into buckets
// of similar size (a file joins while it is at most twice the mean of the
// bucket so far); the largest-sized bucket of MinGroup files is merged. A merge's
// output is then at least (MinGroup+1)/2 times its largest input, so a row
// is rewritten about log3(table / commit) times over the table's life. The
// two rules this replaced both rewrote more: path order made every cycle
// re-merge the largest small file with a few new ones (compaction fell
// behind on a steady stream), and "a file joins while at most twice the
// files before it together" rewrote the largest one each time the new data
// reached half of it (about log1.5 rewrites a row; on the 3,000-commit curve
// 4.5 rewrites a row, and the key index's own compactions, which follow each
// rewrite's re-pointed keys, took a third of the CPU).
//
// A file is small only if two of its size fit in one compaction (at most
// half of MaxBytes and of MaxRows): a tier of files that could not be
// merged with one another would be picked, cut to one file by the caps,
// and either dropped every cycle — starving the tiers below it — or
// rewritten alone again and again.
//
// force (an operator's `cdcd compact`) takes every small file, not a tier.
func pickCompaction(cands []compactCandidate, cc CompactionConfig, target int64, force bool) []iceberg.DataFile {
	byPart := map[string][]compactCandidate{}
	for _, c := range cands {
		k := fmt.Sprint(c.df.SpecID(), c.df.Partition())
		byPart[k] = append(byPart[k], c)
	}
	keys := make([]string, 0, len(byPart))
	for k := range byPart {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	bySize := func(g []iceberg.DataFile) {
		sort.Slice(g, func(i, j int) bool {
			if a, b := g[i].FileSizeBytes(), g[j].FileSizeBytes(); a != b {
				return a < b
			}
			return g[i].FilePath() < g[j].FilePath()
		})
	}
	var pick []iceberg.DataFile
	var bytes, rows int64
	for _, k := range keys {
		var small, heavy []iceberg.DataFile
		for _, c := range byPart[k] {
			switch {
			case c.df.Count() > 0 && float64(c.deleted)/float64(c.df.Count()) >= cc.DeleteRatio:
				heavy = append(heavy, c.df)
			case isSmall(c.df, cc, target):
				small = append(small, c.df)
			}
		}
		bySize(heavy)
		bySize(small)
		group := heavy
		if force {
			if len(small) > 1 || len(heavy) > 0 {
				group = append(group, small...)
			}
		} else if b := pickBucket(small, cc.MinGroup); len(b) >= cc.MinGroup || (len(b) > 0 && len(heavy) > 0) {
			group = append(group, b...)
		}
		for _, df := range group {
			if (bytes+df.FileSizeBytes() > cc.MaxBytes || rows+df.Count() > cc.MaxRows) && len(pick) > 0 {
				break
			}
			pick = append(pick, df)
			bytes += df.FileSizeBytes()
			rows += df.Count()
		}
		if len(pick) > 0 {
			break // one partition per compaction
		}
	}
	return pick
}

// isSmall says whether df is a small file: under SmallFileRatio of the
// target size, and at most half of each compaction cap.
func isSmall(df iceberg.DataFile, cc CompactionConfig, target int64) bool {
	return float64(df.FileSizeBytes()) < cc.SmallFileRatio*float64(target) &&
		2*df.FileSizeBytes() <= cc.MaxBytes && 2*df.Count() <= cc.MaxRows
}

// pickBucket cuts files (sorted by size) into buckets of similar size — a
// file joins a bucket while it is at most twice the bucket's mean — and
// returns the largest-sized bucket of at least min files, or the first
// bucket if none has that many. The largest first: under a steady stream
// the bucket of fresh files qualifies every cycle, and taking the smallest
// bucket first left the higher tiers waiting for ever (118 live files after
// 3,000 commits).
func pickBucket(files []iceberg.DataFile, min int) []iceberg.DataFile {
	var first, pick []iceberg.DataFile
	start, sum := 0, int64(0)
	for i := 0; i <= len(files); i++ {
		if i < len(files) && (i == start || files[i].FileSizeBytes()*int64(i-start) <= 2*sum) {
			sum += files[i].FileSizeBytes()
			continue
		}
		b := files[start:i]
		if len(b) >= min {
			pick = b
		}
		if first == nil {
			first = b
		}
		if i < len(files) {
			start, sum = i, files[i].FileSizeBytes()
		}
	}
	if pick == nil {
		return first
	}
	return pick
}

// planCompaction picks the files of one partition to rewrite; force takes
// every small file (see pickCompaction).
func (w *tableWriter) planCompaction(ctx context.Context, force bool) (*compaction, error) {
	cands := make([]compactCandidate, 0, len(w.up.data))
	for _, df := range w.up.data {
		c := compactCandidate{df: df}
		if d, ok := w.up.dvs[df.FilePath()]; ok {
			c.deleted = d.Count()
		}
		cands = append(cands, c)
	}
	pick := pickCompaction(cands, w.s.cfg.Compaction, int64(w.s.cfg.TargetFileSize), force)
	if len(pick) == 0 || (len(pick) == 1 && w.up.dvs[pick[0].FilePath()] == nil) {
		return nil, nil
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	c := &compaction{id: newCommitID(), old: pick, started: time.Now(), done: make(chan struct{})}
	current, err := w.deletedIn(ctx, fs, pick)
	if err != nil {
		return nil, err
	}
	for _, df := range pick {
		var bm *dv.RoaringPositionBitmap
		if cur := current[df.FilePath()]; cur != nil {
			bm = dv.NewRoaringPositionBitmap()
			bm.Or(cur)
		}
		c.oldDV = append(c.oldDV, bm)
	}
	return c, nil
}

// deletedIn returns the deleted positions of files: their deletion vectors
// (v3), or what the live position-delete files say about them (v2).
func (w *tableWriter) deletedIn(ctx context.Context, fs icebergio.IO, files []iceberg.DataFile) (map[string]*dv.RoaringPositionBitmap, error) {
	out := map[string]*dv.RoaringPositionBitmap{}
	if len(w.up.posDeletes) > 0 {
		all, err := w.up.deletedPositions(ctx, fs, w.tbl)
		if err != nil {
			return nil, err
		}
		for _, df := range files {
			out[df.FilePath()] = all[df.FilePath()]
		}
		return out, nil
	}
	for _, df := range files {
		if d, ok := w.up.dvs[df.FilePath()]; ok {
			cur, err := w.up.currentDV(fs, df.FilePath(), d)
			if err != nil {
				return nil, err
			}
			out[df.FilePath()] = cur
		}
	}
	return out, nil
}

// rewrite merges the old files' surviving rows into new files.
func (w *tableWriter) rewrite(ctx context.Context, tbl *table.Table, keys []iceberg.NestedField, c *compaction) error {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return errors.New("iceberg: the warehouse is not writable")
	}
	sc := tbl.Schema()
	fields := sc.Fields()
	keyIdx := make([]int, len(keys))
	for i, k := range keys {
		for j, f := range fields {
			if f.ID == k.ID {
				keyIdx[i] = j
			}
		}
	}
	var cursors mergeHeap
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	c.moved = make([][]newLoc, len(c.old))
	for i, df := range c.old {
		pf, closeFn, err := parquetFile(fs, df.FilePath())
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		c.moved[i] = make([]newLoc, pf.NumRows())
		for j := range c.moved[i] {
			c.moved[i][j] = newLoc{file: -1}
		}
		rows, err := newRowReader(pf, fields)
		if err != nil {
			return fmt.Errorf("iceberg: compaction read %s: %w", df.FilePath(), err)
		}
		cur := &fileCursor{src: i, rows: rows, keyIdx: keyIdx, keyTypes: keys, deleted: c.oldDV[i]}
		closers = append(closers, cur.rows.close)
		if ok, err := cur.next(); err != nil {
			return err
		} else if ok {
			cursors = append(cursors, cur)
		}
	}
	heap.Init(&cursors)
	fsch, err := newFileSchema(sc)
	if err != nil {
		return err
	}
	part, err := newPartitioner(sc, tbl.Spec())
	if err != nil {
		return err
	}
	lp, err := tbl.LocationProvider()
	if err != nil {
		return err
	}
	var d *dataFileWriter
	var path string
	var values map[int]any
	var pos int32
	defer func() {
		if d != nil {
			d.abort(wfs) // failed or cancelled midway
		}
	}()
	flush := func() error {
		df, err := d.finish(wfs, path, tbl, values)
		if err != nil {
			return err
		}
		c.newFiles = append(c.newFiles, df)
		d = nil
		return nil
	}
	for cursors.Len() > 0 {
		cur := cursors[0]
		if d == nil {
			if values, _, err = part.partition(cur.vals); err != nil {
				return err
			}
			name := fmt.Sprintf("compact-%s-%05d.parquet", c.id[:16], len(c.newFiles))
			if part.partitioned() {
				name = part.path(values) + "/" + name
			}
			path = lp.NewDataLocation(name)
			if d, err = streamDataFile(fsch, wfs, path); err != nil {
				return err
			}
			pos = 0
		}
		if err := d.add(cur.vals); err != nil {
			return err
		}
		fileIdx := int32(len(c.newFiles))
		c.moved[cur.src][cur.pos] = newLoc{file: fileIdx, pos: pos}
		c.keys.add(cur.key, newLoc{file: fileIdx, pos: pos})
		pos++
		if c.keys.len()%256 == 0 {
			// The rewrite is background work: every millisecond or so it
			// lets a woken goroutine of the table's commit have the CPU
			// rather than wait for the scheduler's 10 ms preemption.
			runtime.Gosched()
		}
		if d.size() >= w.s.cfg.TargetFileSize || int64(pos) >= w.s.cfg.Compaction.MaxRows {
			if err := flush(); err != nil {
				return err
			}
		}
		if ok, err := cur.next(); err != nil {
			return err
		} else if ok {
			heap.Fix(&cursors, 0)
		} else {
			heap.Pop(&cursors)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if d != nil {
		return flush()
	}
	return nil
}

// fileCursor walks one data file's live rows in order (the file is sorted
// by key), streaming (see rowReader).
type fileCursor struct {
	src      int
	rows     *rowReader
	keyIdx   []int
	keyTypes []iceberg.NestedField
	deleted  *dv.RoaringPositionBitmap

	pos  int64  // position of the current row
	vals []any  // current row
	key  []byte // its encoded key
	kv   []any  // its key values
}

func (c *fileCursor) next() (bool, error) {
	for {
		// The row is written before the cursor moves on: reuse its slice.
		if c.vals == nil {
			c.vals = make([]any, len(c.rows.fields))
		}
		pos, ok, err := c.rows.next(c.vals)
		if err != nil {
			return false, fmt.Errorf("iceberg: compaction read: %w", err)
		}
		if !ok {
			c.rows.close()
			return false, nil
		}
		c.pos = pos
		if c.deleted != nil && c.deleted.Contains(uint64(pos)) {
			continue
		}
		// The key is copied (movedKeys.add) before the cursor moves on:
		// reuse its buffers too.
		if c.kv == nil {
			c.kv = make([]any, len(c.keyIdx))
		}
		for i, fi := range c.keyIdx {
			v, err := keyValue(c.keyTypes[i].Type, c.vals[fi])
			if err != nil {
				return false, err
			}
			c.kv[i] = v
		}
		k, err := encodeKey(c.key[:0], c.kv)
		if err != nil {
			return false, err
		}
		c.key = k
		return true, nil
	}
}

type mergeHeap []*fileCursor

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return compareKeys(h[i].key, h[j].key) < 0 }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(*fileCursor)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// compactionIntent is stored in the key index while a compaction commits.
type compactionIntent struct {
	ID  string   `json:"id"`
	Old []string `json:"old"`
	New []string `json:"new"`
}

// commitCompaction commits a finished rewrite between two sink commits.
func (w *tableWriter) commitCompaction(ctx context.Context, c *compaction) error {
	for _, df := range c.old {
		if _, ok := w.up.data[df.FilePath()]; !ok {
			return w.dropCompaction(ctx, c, fmt.Errorf("%s is gone (truncated meanwhile)", df.FilePath()))
		}
	}
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return err
	}
	wfs, _ := fs.(icebergio.WriteFileIO)
	// Rows deleted in the old files since the plan are deleted in the new.
	deleted := map[string][]int64{}
	p := &plan{batch: w.up.idx.newBatch(), newDVs: map[string]iceberg.DataFile{}, bitmaps: map[string]*dv.RoaringPositionBitmap{},
		added: c.newFiles, removedData: c.old}
	gone := map[movedRef]bool{}
	current, err := w.deletedIn(ctx, fs, c.old)
	if err != nil {
		p.batch.discard()
		return err
	}
	obsolete := w.up.obsoletePosDeletes(c.old, c.newFiles)
	p.removedDVs = append(p.removedDVs, obsolete...)
	for i, df := range c.old {
		if d, ok := w.up.dvs[df.FilePath()]; ok {
			p.removedDVs = append(p.removedDVs, d)
		}
		if cur := current[df.FilePath()]; cur != nil {
			for pos := range cur.Positions() {
				if c.oldDV[i] != nil && c.oldDV[i].Contains(pos) {
					continue
				}
				if loc := c.moved[i][pos]; loc.file >= 0 {
					nf := c.newFiles[loc.file].FilePath()
					deleted[nf] = append(deleted[nf], int64(loc.pos))
					gone[movedRef{loc.file, loc.pos}] = true
				}
			}
		}
	}
	if len(deleted) > 0 {
		for _, df := range c.newFiles {
			w.up.data[df.FilePath()] = df // the delete writer looks data files up
		}
		err := w.up.writeDeletes(ctx, w, fs, wfs, w.tbl, deleted, p)
		for _, df := range c.newFiles {
			delete(w.up.data, df.FilePath())
		}
		if err != nil {
			p.batch.discard()
			return err
		}
	}
	// Every key whose row was copied and not deleted since moves to its new
	// place. No lookup is needed to know that it still points at its old
	// one: an index entry changes only when its key is written or deleted,
	// and either deletes the key's old position, which made it gone above.
	// (Looking each key up cost a seek per copied row, most of a large
	// compaction's time, with the table's loop waiting.)
	for i := range c.keys.len() {
		key, at := c.keys.at(i)
		if gone[movedRef{at.file, at.pos}] {
			continue
		}
		p.batch.set(key, location{file: c.newFiles[at.file].FilePath(), pos: int64(at.pos)})
	}
	intent := compactionIntent{ID: c.id}
	for _, df := range c.old {
		intent.Old = append(intent.Old, df.FilePath())
	}
	for _, df := range c.newFiles {
		intent.New = append(intent.New, df.FilePath())
	}
	if err := w.up.idx.putIntent(intent); err != nil {
		p.batch.discard()
		return err
	}
	p.batch.delIntent()
	w.pending = p
	props := iceberg.Properties(w.offsetProps(w.committed))
	props[PropCommitID], props[PropCompactionID] = c.id, c.id
	w.writeID, w.fileSeq = newCommitID()[:16], 0
	if err := w.produce(ctx, p, props); err != nil {
		landed, serr := w.settle(ctx, c.id)
		if serr != nil || !landed {
			w.dropPending()
			w.forgetIntent(fs, intent)
			return fmt.Errorf("iceberg: compaction commit of %s: %w", identString(w.cfg.Ident), err)
		}
	}
	w.failpoint("after-compaction-commit")
	if err := w.adoptUpsert(ctx); err != nil {
		return err
	}
	for _, df := range c.old {
		delete(w.up.data, df.FilePath())
		delete(w.up.dvs, df.FilePath())
		delete(w.up.dvCache, df.FilePath())
	}
	if len(obsolete) > 0 {
		gone := map[string]bool{}
		for _, d := range obsolete {
			gone[d.FilePath()] = true
		}
		w.up.posDeletes = slices.DeleteFunc(w.up.posDeletes, func(d iceberg.DataFile) bool { return gone[d.FilePath()] })
	}
	return nil
}

// obsoletePosDeletes returns the live position-delete files (v2) that
// apply to no data file once removed are replaced by added: no remaining
// data file's path lies within their file_path bounds. Such a file would
// stay live forever (a compaction's new files have newer sequence numbers,
// so it deletes nothing in them) and be read by every scan and compaction.
// Files without bounds are kept.
func (u *upsert) obsoletePosDeletes(removed, added []iceberg.DataFile) []iceberg.DataFile {
	if len(u.posDeletes) == 0 {
		return nil
	}
	gone := make(map[string]bool, len(removed))
	for _, df := range removed {
		gone[df.FilePath()] = true
	}
	remaining := make([]string, 0, len(u.data)+len(added))
	for path := range u.data {
		if !gone[path] {
			remaining = append(remaining, path)
		}
	}
	for _, df := range added {
		remaining = append(remaining, df.FilePath())
	}
	slices.Sort(remaining)
	pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	var out []iceberg.DataFile
	for _, d := range u.posDeletes {
		lo, okLo := d.LowerBoundValues()[pathField.ID]
		hi, okHi := d.UpperBoundValues()[pathField.ID]
		if !okLo || !okHi {
			continue
		}
		// Truncated bounds (older files) only widen the range: still safe.
		if i, _ := slices.BinarySearch(remaining, string(lo)); i < len(remaining) && remaining[i] <= string(hi) {
			continue // a remaining file may be one it deletes from
		}
		out = append(out, d)
	}
	return out
}

type movedRef struct{ file, pos int32 }

// dropCompaction abandons a rewrite: its files are deleted.
func (w *tableWriter) dropCompaction(ctx context.Context, c *compaction, why error) error {
	w.logger.Info("compaction abandoned", "id", c.id, "why", why)
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return nil
	}
	for _, df := range c.newFiles {
		_ = fs.Remove(df.FilePath())
	}
	return nil
}

// forgetIntent removes an intent whose commit did not land, and its files.
func (w *tableWriter) forgetIntent(fs icebergio.IO, in compactionIntent) {
	for _, p := range in.New {
		_ = fs.Remove(p)
	}
	b := w.up.idx.newBatch()
	b.delIntent()
	_ = b.apply(w.up.idx.snapshot)
}

// resolveIntent settles a compaction intent left by a crash: if its commit
// landed, the index (behind the table) is rebuilt by loadUpsert; if not,
// its files are removed.
func (w *tableWriter) resolveIntent(ctx context.Context) error {
	in, ok, err := w.up.idx.intent()
	if err != nil || !ok {
		return err
	}
	if w.tbl != nil && hasCommit(w.tbl, in.ID) {
		w.logger.Info("a compaction committed before the last stop; its index update is redone by a rebuild", "id", in.ID)
		b := w.up.idx.newBatch()
		b.delIntent()
		return b.apply(w.up.idx.snapshot)
	}
	w.logger.Info("a compaction did not commit before the last stop; removing its files", "id", in.ID, "files", len(in.New))
	fs, err := w.tbl.FS(ctx)
	if err != nil {
		return err
	}
	w.forgetIntent(fs, in)
	return nil
}

func (x *keyIndex) putIntent(in compactionIntent) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return x.db.Set(idxIntentKey, b, pebble.Sync)
}

func (x *keyIndex) intent() (compactionIntent, bool, error) {
	var in compactionIntent
	v, closer, err := x.db.Get(idxIntentKey)
	if isNotFound(err) {
		return in, false, nil
	}
	if err != nil {
		return in, false, err
	}
	defer closer.Close()
	return in, true, json.Unmarshal(v, &in)
}

func (b *indexBatch) delIntent() { _ = b.b.Delete(idxIntentKey, nil) }

// compactionDone is the in-flight rewrite's done channel (nil: none).
func (w *tableWriter) compactionDone() <-chan struct{} {
	if w.comp == nil {
		return nil
	}
	return w.comp.done
}

// compactDeferMax bounds how long a backlog defers compaction.
const compactDeferMax = 10 * time.Minute

// maybeCompact starts a rewrite when one is due and none runs.
func (w *tableWriter) maybeCompact(ctx context.Context) {
	cc := w.s.cfg.Compaction
	if cc.Disabled || !w.upsertMode() || w.comp != nil || w.tbl == nil || w.up == nil || time.Since(w.lastCompact) < cc.Interval {
		return
	}
	// A table catching up on a backlog (an initial load) defers compaction,
	// for compactDeferMax at most: the rewrite would compete with the
	// backlog for CPU and memory, and the small files it merges keep coming.
	if w.catchingUp {
		if w.deferredSince.IsZero() {
			w.deferredSince = time.Now()
		}
		if time.Since(w.deferredSince) < compactDeferMax {
			return
		}
	}
	w.deferredSince = time.Time{}
	w.lastCompact = time.Now()
	force := w.forceCompact
	w.forceCompact = false
	c, err := w.planCompaction(ctx, force)
	if err != nil {
		w.logger.Warn("compaction: plan failed", "err", err)
		return
	}
	if c == nil {
		return
	}
	w.comp = c
	tbl, keys := w.tbl, w.up.keys
	go func() {
		defer close(c.done)
		c.err = w.rewrite(ctx, tbl, keys, c)
	}()
}

// finishCompaction commits a finished rewrite (or drops a failed one).
func (w *tableWriter) finishCompaction(ctx context.Context) error {
	c := w.comp
	w.comp = nil
	st := w.compStats
	st.Runs++
	st.Last, st.LastDuration, st.LastErr = time.Now(), time.Since(c.started), ""
	defer func() { s := st; w.stats.Compaction.Store(&s); w.compStats = st }()
	if c.err != nil {
		st.LastErr = c.err.Error()
		if ctx.Err() == nil {
			w.logger.Warn("compaction: rewrite failed; will plan again", "err", c.err)
		}
		return w.dropCompaction(ctx, c, c.err)
	}
	if err := w.commitCompaction(ctx, c); err != nil {
		st.LastErr = err.Error()
		w.logger.Warn("compaction: commit failed; will plan again", "err", err)
		return nil
	}
	for _, df := range c.old {
		st.FilesIn++
		st.BytesIn += df.FileSizeBytes()
	}
	for _, df := range c.newFiles {
		st.FilesOut++
		st.BytesOut += df.FileSizeBytes()
	}
	w.logger.Info("compacted", "files_in", len(c.old), "files_out", len(c.newFiles), "took", time.Since(c.started).Round(time.Millisecond))
	w.maintain(ctx)
	return nil
}

// MaintenanceStatus describes a table's files, as `cdcd maintenance
// status` shows them. The table's loop publishes it after its commits.
type MaintenanceStatus struct {
	DataFiles      int     `json:"data_files"`
	DataBytes      int64   `json:"data_bytes"`
	Partitions     int     `json:"partitions"`
	FilesPerPart   float64 `json:"files_per_partition"`
	SizeP10        int64   `json:"size_p10"`
	SizeP50        int64   `json:"size_p50"`
	SizeP90        int64   `json:"size_p90"`
	SmallShare     float64 `json:"small_file_share"`
	Rows           int64   `json:"rows"`
	DeletedRows    int64   `json:"deleted_rows"`
	DeletedRatio   float64 `json:"deleted_ratio"`
	DeleteFiles    int     `json:"delete_files"`
	DataManifests  int     `json:"data_manifests"`
	DelManifests   int     `json:"delete_manifests"`
	Snapshots      int     `json:"snapshots"`
	CompactionRuns int64   `json:"compaction_runs"`
	LastCompaction string  `json:"last_compaction,omitempty"`
	LastError      string  `json:"last_error,omitempty"`
}

// publishMaintenance computes the table's maintenance status.
func (w *tableWriter) publishMaintenance() {
	if w.up == nil || w.tbl == nil {
		return
	}
	st := MaintenanceStatus{DataFiles: len(w.up.data), DeleteFiles: len(w.up.dvs) + len(w.up.posDeletes),
		Snapshots: len(w.tbl.Metadata().Snapshots()), CompactionRuns: w.compStats.Runs, LastError: w.compStats.LastErr}
	if !w.compStats.Last.IsZero() {
		st.LastCompaction = w.compStats.Last.UTC().Format(time.RFC3339)
	}
	sizes := make([]int64, 0, len(w.up.data))
	parts := map[string]bool{}
	small := 0
	for _, df := range w.up.data {
		sizes = append(sizes, df.FileSizeBytes())
		st.DataBytes += df.FileSizeBytes()
		st.Rows += df.Count()
		parts[fmt.Sprint(df.SpecID(), df.Partition())] = true
		if isSmall(df, w.s.cfg.Compaction, int64(w.s.cfg.TargetFileSize)) {
			small++
		}
	}
	for _, d := range w.up.dvs {
		st.DeletedRows += d.Count()
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	if n := len(sizes); n > 0 {
		st.SizeP10, st.SizeP50, st.SizeP90 = sizes[n/10], sizes[n/2], sizes[n*9/10]
		st.SmallShare = float64(small) / float64(n)
	}
	st.Partitions = len(parts)
	if st.Partitions > 0 {
		st.FilesPerPart = float64(st.DataFiles) / float64(st.Partitions)
	}
	if st.Rows > 0 {
		st.DeletedRatio = float64(st.DeletedRows) / float64(st.Rows)
	}
	if ms := w.up.ms; ms != nil {
		st.DataManifests, st.DelManifests = len(ms.data), len(ms.deletes)
	}
	w.stats.Maintenance.Store(&st)
}

// Compact asks the table's loop to plan a compaction now.
func (s *Sink) Compact(tableName string) error {
	for i, t := range s.cfg.Tables {
		if identString(t.Ident) == tableName || t.Ident[len(t.Ident)-1] == tableName || t.Topic == tableName {
			select {
			case s.compactNow[i] <- struct{}{}:
			default: // one request is pending already
			}
			return nil
		}
	}
	return fmt.Errorf("iceberg: no table %q in this pipeline", tableName)
}
