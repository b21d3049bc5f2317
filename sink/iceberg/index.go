package iceberg

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sync/errgroup"
)

// The key index maps each primary key of an upsert table to the data file
// and row position holding its current row. It lives in a pebble database
// per table under <data_dir>/index/, so memory stays bounded for tables of
// any size, and is tagged with the snapshot id it reflects.
//
// Its layout is frozen and documented in doc.go ("The key index"); these
// are its keys.
const (
	idxPrefixKey  = 'k' // 'k' key -> uvarint file id | uvarint row position
	idxPrefixFile = 'f' // 'f' file id (4B big-endian) -> data file path
	idxPrefixMeta = 'm' // 'm' name -> the index's own records
)

var (
	// idxSnapshotKey holds the snapshot id the index reflects (8B big-endian).
	idxSnapshotKey = []byte{idxPrefixMeta, 's', 'n', 'a', 'p'}
	// idxIntentKey holds a compaction's intent (JSON) while it commits.
	idxIntentKey = []byte{idxPrefixMeta, 'i', 'n', 't', 'e', 'n', 't'}
)

func isNotFound(err error) bool { return errors.Is(err, pebble.ErrNotFound) }

// location is where a key's current row lives.
type location struct {
	file string
	pos  int64
}

type keyIndex struct {
	db       *pebble.DB
	dir      string
	opts     *pebble.Options
	ids      map[string]uint32
	paths    map[uint32]string
	nextID   uint32
	snapshot int64 // the snapshot the index reflects; 0 = empty table
	// last is at least the greatest key the index holds (nil: none). A key
	// above it cannot be in the index, so lookups of new keys that arrive
	// in ascending order (serial and time-ordered primary keys, the common
	// case) cost no seek at all. Deletes leave it as is: still an upper bound.
	last []byte
	// lastBefore is last before the batch that last raised it (nil: none):
	// keys above it are that batch's range, where a file of keys below
	// last overlaps only that batch's files (index_ingest.go).
	lastBefore []byte
	// ingested counts the entries ingested as table files (index_ingest.go).
	ingested int64
	noIngest bool
	// sought and found count the keys the last getMany looked up with a
	// seek and those it found (useL6Filters).
	sought, found int
	// seeks counts every key looked up with a seek since the index opened.
	seeks int64
	// size is about how many keys the index holds, as its owner counts
	// them (the table's live rows); 0: not known. getMany's choice of seek
	// (denseLookups) uses it.
	size int64
	// denseRanges counts the ranges looked up with plain seeks (tests).
	denseRanges int64
	// denseGap is denseLookups' gap: the const denseGap unless an
	// experiment set indexOptions.denseGap.
	denseGap int64
	// sorted is getMany's list of keys to seek, kept from call to call
	// (getMany runs on the table's loop only), and spare the held entries'
	// memory of the last batch that ended (index_ingest.go).
	sorted []indexedKey
	spare  heldBufs
	// bounds are upper bounds of the index's keys by the log partition
	// whose changes set them (getMany's second shortcut).
	bounds partBounds
}

// partBounds lets getMany skip a key below last that is new all the same:
// a serial key of a partition that lags the others. A table's topic
// spreads its keys over partitions by a hash of the key, and every change
// of a key is in the key's one partition; each partition's inserts of
// serial keys ascend, but a commit takes each partition's changes as far
// as they have been fetched, so the keys of a partition a fetch behind the
// others are below the greatest key the index holds (last) and were each
// looked up and not found: half the lookups of cdcd bench's MariaDB stream
// (eight partitions) and nearly all of a load's.
//
// The bounds hold, for every key K in the index: K <= floor, or K <= hi[p]
// where p is the partition of K's changes. A key K whose changes are in
// partition p is then new when K > floor and K > hi[p]. What keeps it so:
//   - floor starts as last (every key the index held when the bounds were
//     made) and is raised to the greatest key of every batch that does not
//     say which partition set its keys (a rebuild, a catch-up, a
//     compaction's moves); a clear empties floor and hi with the index.
//   - a commit's batch says (indexBatch.parts): hi[p] rises to the
//     greatest key of the commit's changes in partition p, whether the key
//     lives or not; a batch whose greatest key no partition accounts for
//     raises floor to it.
//   - "p is K's partition" is checked, not assumed: stage gives getMany a
//     key's partition only when every change of the buffer is in the
//     partition the log's partitioner gives its key body among the
//     topic's n partitions, and all are of one table version (a key's
//     Avro body, which the partitioner hashes, is a function of its value
//     within one version); otherwise the bounds are dropped (made again
//     from last at the next use) and that batch says nothing. The bounds
//     are made for one partition count (n) and dropped when it differs.
//
// Bounds too high cost lookups, never a wrong answer: a commit that fails
// after getMany leaves them as they were (only apply raises them).
type partBounds struct {
	n     int32 // the partitions they are for; 0: none made
	floor []byte
	hi    [][]byte // hi[p]: nil when no key of partition p was set
	table any      // the table version the bounds were made under
}

// boundsFor makes the bounds for n partitions and table when they are not
// already: every key the index holds is under floor.
func (x *keyIndex) boundsFor(n int32, table any) {
	if x.bounds.n == n && x.bounds.table == table {
		return
	}
	x.bounds = partBounds{n: n, floor: x.last, hi: make([][]byte, n), table: table}
}

// dropBounds forgets the bounds: getMany uses last alone until boundsFor.
func (x *keyIndex) dropBounds() { x.bounds = partBounds{} }

// newInPartition reports whether key, whose changes are in partition p
// (-1: not known), is above every key the index may hold of p.
func (x *keyIndex) newInPartition(key []byte, p int32) bool {
	b := &x.bounds
	return p >= 0 && p < b.n && bytes.Compare(key, b.floor) > 0 && bytes.Compare(key, b.hi[p]) > 0
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// indexOptions tune a key index; zero values take the defaults. The
// commit curve varies them for experiments (BENCHMARKS.md has what they
// showed).
type indexOptions struct {
	// cacheSize is the index's pebble cache, from which the memtables are
	// reserved too; default 64 MiB.
	cacheSize int64
	// snappy compresses the index's blocks with snappy (pebble's
	// default); by default they are written uncompressed (blockCompression).
	snappy bool
	// noIngest puts every entry through the batch (index_ingest.go).
	noIngest bool
	// rowBlocks makes a new index in pebble's format major version 13
	// (row blocks: tables before TableFormatPebblev5), as every index was
	// made before session 34, instead of FormatColumnarBlocks
	// (indexFormat).
	rowBlocks bool
	// memTableSize, blockSize and l0Compaction are experiments too (0:
	// the defaults, 16 MiB, pebble's 4 KiB blocks, an L0 compaction
	// threshold of 16: L0 compacted at 8 sublevels).
	memTableSize uint64
	blockSize    int
	l0Compaction int
	// denseGap overrides the const denseGap (denseLookups): an experiment.
	denseGap int64
}

// indexFormat is the pebble format major version a new key index is made
// in: columnar blocks (TableFormatPebblev5). Against the row blocks of
// format 13 that every index had before session 34, a 5M-key index is a
// third smaller (57 against 87 MB, session 20), so more of it stays in the
// block cache, fewer misses allocate a block, and lookups cost less: cdcd
// bench's MariaDB streaming phase (700,000 lookups in a 5M-key index) took
// less time and CPU in 6 of 6 alternated pairs (BENCHMARKS.md, "Columnar
// index blocks, and what did not pay (lead, session 34)"). An existing
// index keeps the format it was made in: pebble ratchets a format up on
// open and never down, and an index ratcheted to columnar blocks could not
// be opened by a cdcd from before the change (it would have to be rebuilt
// from the table). An index whose directory was removed (the operator's
// fix for an index out of date) is new; the sink's own rebuild
// (rebuildIndex) clears an index in place and keeps its format
// (docs/internals.md, "Columnar blocks for a new key index").
const indexFormat = pebble.FormatColumnarBlocks

// indexIsNew reports whether dir holds no index yet (absent or empty). It
// reads one name, not the listing of an index's hundreds of table files.
func indexIsNew(dir string) (bool, error) {
	d, err := os.Open(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, nil
	case err != nil:
		return false, err
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return len(names) == 0, err
}

// blockCompression is the key index's block compression: none. Snappy
// made its table files about 1.8x smaller, which the index does not need
// (the block cache holds blocks uncompressed either way; a file is read
// only on a miss), and cost CPU on every table written (each flush and
// compaction compressed every block) and on every block a lookup read from
// a file (blocks of a table just written): about 4% of the sink
// benchmark's updates phase (BENCHMARKS.md, "The sink's cost a streamed
// change on a large table"). Pebble notes each block's compression in the
// block itself, so an index written with snappy reads as before, and its
// tables are rewritten uncompressed as compactions reach them.
func blockCompression() *sstable.CompressionProfile { return sstable.NoCompression }

func openIndex(dir string, o indexOptions) (*keyIndex, error) {
	opts := &pebble.Options{Logger: quietLogger{}, CacheSize: cmp.Or(o.cacheSize, 64<<20), MemTableSize: cmp.Or(o.memTableSize, 16<<20)}
	fresh, err := indexIsNew(dir)
	if err != nil {
		return nil, fmt.Errorf("iceberg: open key index %s: %w", dir, err)
	}
	if fresh && !o.rowBlocks {
		opts.FormatMajorVersion = indexFormat
	}
	if o.blockSize > 0 {
		for i := range opts.Levels {
			opts.Levels[i].BlockSize = o.blockSize
		}
	}
	// Bloom filters: most lookups are for new keys (inserts), which then
	// cost no block reads.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Write amplification: every commit writes keys all over the key
	// space (updates, and the compactor re-pointing the rows it rewrote,
	// whose batches are flushed as L0 tables of their own), so every
	// flush is an L0 sublevel over the whole key space and every L0
	// compaction rewrites much of Lbase. pebble compacts L0 once its fill
	// factor, 2 × its sublevels / L0CompactionThreshold, reaches 1
	// (compaction_picker.go, calculateL0FillFactor): its default of 4
	// compacted at 2 sublevels (write amplification 9 on a long upsert
	// stream); 16 compacts at 8 (3.0 at a 20M-key index in session 17's
	// curve, 3.74 over session 37's 10,000 commits). 32 (at 16
	// sublevels) was measured in session 37 and not kept: write
	// amplification 2.87 against 3.74 over 10,000 commits, but lookups
	// through up to 16 sublevels, read amplification 21 against 7, and
	// later commits slower (BENCHMARKS.md, "The key index's L0 at 16
	// sublevels: tried, not kept (lead, session 37)").
	l0 := cmp.Or(o.l0Compaction, 16)
	opts.L0CompactionThreshold, opts.L0StopWritesThreshold = l0, 2*l0
	// No tombstone-density compactions: a flush of a stream's deletes (a
	// third of its entries in cdcd bench's streaming phase) makes the L0
	// table "tombstone-dense", and pebble then compacted it at once with
	// every bottom-level table it overlaps, which is all of them (a
	// commit's keys spread over the key space): the whole index rewritten
	// at a flush, where the L0 threshold above waits for 8 sublevels. Such
	// compactions speed up scans over deleted keys; the index's lookups are
	// prefix seeks, which a tombstone ends early.
	opts.Experimental.TombstoneDenseCompactionThreshold = -1
	if !o.snappy {
		for i := range opts.Levels {
			opts.Levels[i].Compression = blockCompression
		}
	}
	opts.FS = yieldFS{vfs.Default}
	opts.EnsureDefaults() // the ingested files' writer options come from opts
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("iceberg: open key index %s: %w", dir, err)
	}
	// Under pebble's lock: no other process is ingesting.
	if err := removeIngestLeftover(dir); err != nil {
		db.Close()
		return nil, err
	}
	x := &keyIndex{db: db, dir: dir, opts: opts, noIngest: o.noIngest, ids: map[string]uint32{}, paths: map[uint32]string{}, nextID: 1,
		denseGap: cmp.Or(o.denseGap, denseGap)}
	if err := x.load(); err != nil {
		db.Close()
		return nil, err
	}
	return x, nil
}

func (x *keyIndex) load() error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{idxPrefixFile}, UpperBound: []byte{idxPrefixFile + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != 5 {
			it.Close()
			return fmt.Errorf("iceberg: key index: bad file entry %x", k)
		}
		id := binary.BigEndian.Uint32(k[1:])
		path := string(it.Value())
		x.ids[path], x.paths[id] = id, path
		if id >= x.nextID {
			x.nextID = id + 1
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	if err := x.loadLast(); err != nil {
		return err
	}
	v, closer, err := x.db.Get(idxSnapshotKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return err
	default:
		x.snapshot = int64(binary.BigEndian.Uint64(v))
		closer.Close()
	}
	return nil
}

// loadLast reads the greatest key the index holds.
func (x *keyIndex) loadLast() error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{idxPrefixKey}, UpperBound: []byte{idxPrefixKey + 1}})
	if err != nil {
		return err
	}
	x.last = nil
	if it.Last() {
		x.last = append([]byte(nil), it.Key()[1:]...)
	}
	return it.Close()
}

func (x *keyIndex) close() error { return x.db.Close() }

// get returns the location of key.
func (x *keyIndex) get(key []byte) (location, bool, error) {
	v, closer, err := x.db.Get(append([]byte{idxPrefixKey}, key...))
	if errors.Is(err, pebble.ErrNotFound) {
		return location{}, false, nil
	}
	if err != nil {
		return location{}, false, err
	}
	defer closer.Close()
	id, n := binary.Uvarint(v)
	pos, m := binary.Uvarint(v[max(n, 0):])
	if n <= 0 || m <= 0 {
		return location{}, false, fmt.Errorf("iceberg: key index: bad entry %x", v)
	}
	path, ok := x.paths[uint32(id)]
	if !ok {
		return location{}, false, fmt.Errorf("iceberg: key index: entry names unknown file id %d", id)
	}
	return location{file: path, pos: int64(pos)}, true, nil
}

// getMany looks up many keys, in key order, so keys that share blocks
// load each block once. found receives the index in keys of every key that
// has a location, in key order. Keys above the greatest indexed key cost
// nothing, and so do keys above every key of their partition (parts[i],
// -1: unknown; parts nil: none known) when the bounds are made
// (partBounds); the rest are split into contiguous ranges looked up in
// parallel (updates of old rows are random reads, each a block the cache
// may not hold: their cost grows with the index, and they are most of a
// commit's wait on it).
func (x *keyIndex) getMany(keys [][]byte, parts []int32, found func(i int, loc location) error) error {
	if len(keys) == 0 || x.last == nil {
		return nil
	}
	// Keys above the greatest indexed key are new: no seek, and no sort
	// (a load's keys all are). The list is kept for the next call (a
	// list of every key, made anew, was 46 of the 890 MB a 1M-row load
	// allocated, though a load's keys are mostly new), cleared so that it
	// pins no key or value.
	sorted := x.sorted[:0]
	defer func() {
		clear(sorted)
		x.sorted = sorted[:0]
	}()
	for i, k := range keys {
		if bytes.Compare(k, x.last) <= 0 && (parts == nil || !x.newInPartition(k, parts[i])) {
			sorted = append(sorted, indexedKey{key: k, i: i})
		}
	}
	if len(sorted) == 0 {
		return nil
	}
	if byKey := func(a, b indexedKey) int { return bytes.Compare(a.key, b.key) }; !slices.IsSortedFunc(sorted, byKey) {
		slices.SortFunc(sorted, byKey) // a commit's keys come sorted (stage)
	}
	l6 := x.useL6Filters()
	dense := x.denseLookups(len(sorted), l6)
	ways := min(runtime.GOMAXPROCS(0), 4, (len(sorted)+getManyPart-1)/getManyPart)
	if ways <= 1 {
		if err := x.seekRange(sorted, l6, dense); err != nil {
			return err
		}
	} else {
		var g errgroup.Group
		per := (len(sorted) + ways - 1) / ways
		for lo := 0; lo < len(sorted); lo += per {
			hi := min(lo+per, len(sorted))
			g.Go(func() error { return x.seekRange(sorted[lo:hi], l6, dense) })
		}
		if err := g.Wait(); err != nil {
			return err
		}
	}
	x.sought, x.found = len(sorted), 0
	x.seeks += int64(len(sorted))
	for _, k := range sorted {
		if k.val == nil {
			continue
		}
		x.found++
		id, n := binary.Uvarint(k.val)
		pos, m := binary.Uvarint(k.val[max(n, 0):])
		if n <= 0 || m <= 0 {
			return fmt.Errorf("iceberg: key index: bad entry %x", k.val)
		}
		path, ok := x.paths[uint32(id)]
		if !ok {
			return fmt.Errorf("iceberg: key index: entry names unknown file id %d", id)
		}
		if err := found(k.i, location{file: path, pos: int64(pos)}); err != nil {
			return err
		}
	}
	return nil
}

// indexedKey is a key getMany looks up: its index in the caller's keys and
// the index's value (nil: absent).
type indexedKey struct {
	key []byte
	val []byte
	i   int
}

// getManyPart is the fewest keys worth a goroutine of their own.
const getManyPart = 64

// useL6Filters reports whether lookups consult the bottom level's bloom
// filters, which hold most of the index (a load's ingested entries, and
// everything compactions move down). pebble skips them unless asked and
// reads the key's data block instead. A filter answers "absent" without
// that block, which pays when most keys looked up are not in the index
// (new keys below the greatest one: random keys such as UUIDs, keys
// inserted again); when most are there (updates and deletes of existing
// rows, a stream's usual lookups) each costs a filter block's fetch and
// probes on top of the data block the key is read from: about a third of
// a lookup in cdcd bench's streaming phase. The last lookups decide: the
// filters are used unless more than half of their keys were found.
func (x *keyIndex) useL6Filters() bool { return 2*x.found <= x.sought }

// denseGap is the most index keys per key looked up at which a commit's
// lookups are dense (denseLookups): about a sixth of a data block's keys
// (some 400 entries of a 4 KB block), so the keys looked up share blocks.
// 256 (session 20, a 5M-row table's commits of a key every 100 taken
// dense) measured -16% in four loaded pairs and nothing in five quieter
// ones (BENCHMARKS.md, "The key index at 5M keys"): not resolved, so 64
// stays; the sink benchmark's dense=N knob (indexOptions.denseGap) tries
// others.
const denseGap = 64

// denseLookups reports whether n keys looked up, most of them found
// (!l6), are dense enough in the index for plain seeks (SeekGE) rather
// than prefix seeks. A prefix seek consults the bloom filter of every
// table above the bottom level that may hold the key — each of the L0
// tables an update stream leaves (a commit's batch of entries is a
// "large batch" that pebble flushes as an L0 table of its own, up to 16
// before a compaction) — a filter block fetched from the cache and probed
// per key and table, and it throws away the table's position, so the
// next key's seek starts from the index block again. A plain seek reads
// no filter and, sought in ascending order, steps forward from where the
// last key left each table (pebble's TrySeekUsingNext): in a table holding
// about as many keys as the commit looks up (an L0 table of an earlier
// commit's keys) or a few times more (the bottom level at denseGap), the
// next key is a few entries on, in a block at hand. Sparse keys gain
// nothing from that and would read a block in every table, and keys mostly
// absent (new keys below the greatest, l6) are what the filters answer
// best: those keep prefix seeks.
func (x *keyIndex) denseLookups(n int, l6 bool) bool {
	return !l6 && x.size > 0 && int64(n)*cmp.Or(x.denseGap, denseGap) >= x.size
}

// seekRange looks up sorted keys with one iterator, storing a copy of each
// present key's value in its val; l6 says whether it consults the bottom
// level's bloom filters (useL6Filters), dense whether it seeks without
// filters (denseLookups).
func (x *keyIndex) seekRange(sorted []indexedKey, l6, dense bool) error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{idxPrefixKey}, UpperBound: []byte{idxPrefixKey + 1}, UseL6Filters: l6})
	if err != nil {
		return err
	}
	if dense {
		atomic.AddInt64(&x.denseRanges, 1)
	}
	buf := make([]byte, 0, 64)
	var vals []byte // the values' copies, carved from shared chunks
	for i := range sorted {
		k := &sorted[i]
		buf = append(append(buf[:0], idxPrefixKey), k.key...)
		// SeekPrefixGE: only a prefix seek consults the bloom filters (the
		// prefix is the whole key with the default Split), so a key skips
		// the levels that do not hold it instead of reading a data block in
		// each. Dense keys seek with SeekGE (denseLookups): an absent key
		// then lands on the next key in the index (past any deleted ones
		// between: at most the tombstones above the bottom level, once per
		// range, as the next seeks start from there), which the comparison
		// below turns away.
		var ok bool
		if dense {
			ok = it.SeekGE(buf)
		} else {
			ok = it.SeekPrefixGE(buf)
		}
		if !ok || string(it.Key()) != string(buf) {
			continue
		}
		v := it.Value()
		if cap(vals)-len(vals) < len(v) {
			vals = make([]byte, 0, max(4<<10, len(v)))
		}
		start := len(vals)
		vals = append(vals, v...)
		k.val = vals[start:len(vals):len(vals)]
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// indexBatch stages index changes for one commit; apply makes them durable
// together with the snapshot id they reflect.
type indexBatch struct {
	x     *keyIndex
	b     *pebble.Batch
	ids   map[string]uint32 // files registered by this batch
	reset bool
	last  []byte // the greatest key set by this batch
	// held are entries of keys above every indexed key, ingested as one
	// table file at apply (index_ingest.go); noIngest: not this batch.
	held     []heldEntry
	arena    []byte // the held entries' bytes
	noIngest bool
	// bulk: the batch may ingest its held entries (set by the caller).
	bulk bool
	// lastFile's id is lastID (0: none yet): set's last file.
	lastFile string
	lastID   uint32
	// parts, when set, has the greatest key of the batch's keys in each
	// partition (partBounds): every key the batch sets is a key of the
	// commit's changes in that partition. nil: the batch does not say.
	parts [][]byte
	// holdAbove is the greatest key of the commit in flight, whose entries
	// pebble does not hold yet (upsert.stage): a key at or below it is
	// below the index's greatest key by the time the batch is written.
	holdAbove []byte
	// deleted: the batch deleted a key, so it holds no key below the
	// greatest indexed one for ingestion from then on (hold); heldBelow:
	// it held one, so a delete puts the held entries into the batch first.
	deleted, heldBelow bool
	// ingestedLast and ingestedN are the greatest key and the number of
	// the entries ingested by write (adopt records them).
	ingestedLast []byte
	ingestedN    int64
}

func (x *keyIndex) newBatch() *indexBatch {
	return &indexBatch{x: x, b: x.db.NewBatch(), ids: map[string]uint32{}, noIngest: x.noIngest}
}

func (b *indexBatch) fileID(path string) uint32 {
	if id, ok := b.ids[path]; ok {
		return id
	}
	if id, ok := b.x.ids[path]; ok && !b.reset {
		return id
	}
	// Reserved at once: a batch staged while another is in flight (a
	// commit landing in the background, writer.go's flight) takes ids past
	// the other's, which apply has not recorded yet. An id of a batch
	// dropped is never used.
	id := b.x.nextID
	b.x.nextID++
	b.ids[path] = id
	var k [5]byte
	k[0] = idxPrefixFile
	binary.BigEndian.PutUint32(k[1:], id)
	_ = b.b.Set(k[:], []byte(path), nil)
	return id
}

func (b *indexBatch) set(key []byte, loc location) {
	// A commit sets a file's keys one after another: its id is at hand.
	id := b.lastID
	if loc.file != b.lastFile || id == 0 {
		id = b.fileID(loc.file)
		b.lastFile, b.lastID = loc.file, id
	}
	if !b.hold(key, id, loc.pos) {
		// Written in place in the batch: no copies of the key and value.
		var v [2 * binary.MaxVarintLen64]byte
		n := binary.PutUvarint(v[:], uint64(id))
		n += binary.PutUvarint(v[n:], uint64(loc.pos))
		op := b.b.SetDeferred(1+len(key), n)
		op.Key[0] = idxPrefixKey
		copy(op.Key[1:], key)
		copy(op.Value, v[:n])
		_ = op.Finish()
	}
	if bytes.Compare(key, b.last) > 0 {
		b.last = append(b.last[:0], key...)
	}
}

func (b *indexBatch) del(key []byte) {
	if len(b.held) > 0 && (b.heldBelow || bytes.Compare(key, b.x.last) > 0) {
		b.release() // the key may be held: the delete must follow its set
	}
	b.deleted = true
	op := b.b.DeleteDeferred(1 + len(key))
	op.Key[0] = idxPrefixKey
	copy(op.Key[1:], key)
	_ = op.Finish()
}

// clear drops every entry and file (a truncate, or a rebuild).
func (b *indexBatch) clear() {
	b.release()
	// An empty index (a new table, a load's reset marker) gets no range
	// deletion: one would stay in the LSM, every lookup would step through
	// it, and an ingested file overlapping it could not go below it.
	if b.x.last != nil || len(b.x.ids) > 0 || !b.b.Empty() {
		_ = b.b.DeleteRange([]byte{idxPrefixKey}, []byte{idxPrefixKey + 1}, nil)
		_ = b.b.DeleteRange([]byte{idxPrefixFile}, []byte{idxPrefixFile + 1}, nil)
	}
	b.ids = map[string]uint32{}
	b.reset = true
	b.last = nil
	b.lastFile, b.lastID = "", 0
}

// apply commits the batch durably, tagged with snapshot.
func (b *indexBatch) apply(snapshot int64) error {
	if err := b.write(snapshot); err != nil {
		b.x.raiseLast(b.ingestedLast) // still an upper bound of what pebble holds
		return err
	}
	return b.adopt(snapshot)
}

// write makes the batch durable in pebble, tagged with snapshot: the half
// of apply that a commit landing in the background runs on its own
// goroutine. It reads and changes nothing of the index's memory but the
// held entries' spare buffers (locked), so the table's loop may look keys
// up meanwhile; adopt, on the loop, then records it.
func (b *indexBatch) write(snapshot int64) error {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(snapshot))
	_ = b.b.Set(idxSnapshotKey, v[:], nil)
	if err := b.ingestHeld(); err != nil {
		b.discard()
		return err
	}
	if err := b.b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("iceberg: key index: %w", err)
	}
	return nil
}

// raiseLast keeps last at least k.
func (x *keyIndex) raiseLast(k []byte) {
	if bytes.Compare(k, x.last) > 0 {
		x.last = k
	}
}

// adopt records a written batch in the index's memory.
func (b *indexBatch) adopt(snapshot int64) error {
	x := b.x
	x.ingested += b.ingestedN
	if b.reset {
		x.ids, x.paths = map[string]uint32{}, map[uint32]string{}
		x.last, x.lastBefore = nil, nil
	}
	x.raiseBounds(b)
	before := x.last
	x.raiseLast(b.ingestedLast)
	x.raiseLast(b.last)
	if bytes.Compare(x.last, before) > 0 {
		x.lastBefore = before
	}
	for path, id := range b.ids {
		x.ids[path], x.paths[id] = id, path
		if id >= x.nextID {
			x.nextID = id + 1
		}
	}
	x.snapshot = snapshot
	return b.b.Close()
}

// raiseBounds keeps the partitions' bounds above the keys b set.
func (x *keyIndex) raiseBounds(b *indexBatch) {
	pb := &x.bounds
	if pb.n == 0 {
		return
	}
	if b.reset {
		pb.floor = nil
		clear(pb.hi)
	}
	var top []byte // the greatest key a partition accounts for
	if len(b.parts) == int(pb.n) {
		for p, k := range b.parts {
			if k != nil && bytes.Compare(k, pb.hi[p]) > 0 {
				pb.hi[p] = bytes.Clone(k)
			}
			if bytes.Compare(k, top) > 0 {
				top = k
			}
		}
	}
	if bytes.Compare(b.last, top) > 0 && bytes.Compare(b.last, pb.floor) > 0 {
		pb.floor = bytes.Clone(b.last)
	}
}

func (b *indexBatch) discard() {
	b.giveBack()
	_ = b.b.Close()
}

// files returns the data files the index knows, sorted.
func (x *keyIndex) files() []string {
	out := make([]string, 0, len(x.ids))
	for p := range x.ids {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// encodeKey renders key values canonically: equal keys give equal bytes
// whatever Go integer width or decimal spelling they arrive in.
//
//	integers: 0x01 | 8 bytes big-endian, sign bit flipped
//	strings, bytes, decimals: 0x02 | bytes with 0x00 escaped as 0x00 0xFF | 0x00 0x01
//	booleans: 0x03 | 0 or 1;  floats: 0x04 | 8 bytes;  uuids: 0x05 | 16 bytes
func encodeKey(dst []byte, vals []any) ([]byte, error) {
	for _, v := range vals {
		switch v := v.(type) {
		case int64:
			dst = appendKeyInt(dst, v)
		case int32:
			dst = appendKeyInt(dst, int64(v))
		case string:
			dst = appendKeyBytes(dst, []byte(v))
		case []byte:
			dst = appendKeyBytes(dst, v)
		case bool:
			b := byte(0)
			if v {
				b = 1
			}
			dst = append(dst, 0x03, b)
		case float64:
			dst = binary.BigEndian.AppendUint64(append(dst, 0x04), math.Float64bits(v))
		case float32:
			dst = binary.BigEndian.AppendUint64(append(dst, 0x04), math.Float64bits(float64(v)))
		case [16]byte:
			dst = append(append(dst, 0x05), v[:]...)
		case nil:
			return nil, errors.New("iceberg: a primary-key column is NULL")
		default:
			return nil, fmt.Errorf("iceberg: no key encoding for %T", v)
		}
	}
	return dst, nil
}

func appendKeyInt(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, 0x01), uint64(v)^(1<<63))
}

func appendKeyBytes(dst, b []byte) []byte {
	dst = append(dst, 0x02)
	for _, c := range b {
		dst = append(dst, c)
		if c == 0 {
			dst = append(dst, 0xFF)
		}
	}
	return append(dst, 0x00, 0x01)
}

// yieldFS is the OS's file system for the index, except that a goroutine
// writing a table file (a flush or a compaction: pebble's background work)
// gives the CPU away before each write: pebble's compactions run beside the
// table's commit and the compactor's rewrite, and a commit goroutine woken
// from I/O would wait for a processor until the scheduler's 10 ms
// preemption; this way it waits at most one buffered write's worth of
// work. The WAL, which a commit waits for, is left alone.
type yieldFS struct{ vfs.FS }

func (fs yieldFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || !strings.HasSuffix(name, ".sst") {
		return f, err
	}
	return yieldFile{f}, nil
}

type yieldFile struct{ vfs.File }

func (f yieldFile) Write(p []byte) (int, error) {
	runtime.Gosched()
	return f.File.Write(p)
}
