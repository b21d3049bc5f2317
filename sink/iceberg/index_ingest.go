package iceberg

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
)

// Bulk-built key index: a commit's entries for keys above every key the
// index holds (a load, or inserts with serial or time-ordered keys) are
// written as one sorted table file and ingested by pebble, which places a
// file that overlaps nothing in the bottom level: those keys never pass
// through the WAL, the memtable, a flush or a compaction. Everything else
// (deletes, file ids, the snapshot tag) goes through the batch as before.
//
// Keys at or below the greatest indexed key are ingested too, as a second
// file, when the batch deleted nothing (a load's): pebble places that one
// above the bottom level, over the files it overlaps, where a flushed
// memtable would have gone. A load's commits take 30–60% of their keys
// there: the fetcher reads the log's partitions a batch at a time, so a
// commit holds each partition's keys up to a different point, and the next
// one's keys of the partitions read least far are below the greatest key
// of the last (lead, session 32: 10,000–25,000 of each 35,000-row commit
// of cdcd bench's load). Through the batch they cost the WAL, the memtable
// and its flushes (0.5 of 11 CPU-s of the load), and memtables of 2, 4, 8,
// 16 and 16 MiB were live in the Go heap at the load's peak (pebble's
// !cgo allocator is make), 46 MB of a 170–187 MB live heap under the
// daemon's memory limit, which had the collector run every 15–30 MB
// allocated. The split is made when the batch is written (ingestHeld), the
// last commit adopted, against the index's greatest key then.
//
// What is durable when: the ingestion is durable when Ingest returns (the
// file is synced and named in pebble's manifest), before the batch that
// registers the entries' file ids and tags the index with the new snapshot.
// A crash between the two leaves the index tagged with the snapshot before
// a commit that changed rows, so the next start rebuilds it from the table
// (loadUpsert): the extra entries are never read. A batch that clears the
// index, or deletes a key held for ingestion, is never split this way.

// Only bulk batches ingest (indexBatch.bulk: a commit forced by the
// buffer's limits — a load, or a table catching up on a backlog — and a
// rebuild), and only when they hold at least ingestMinKeys entries: each
// ingestion leaves a table file in the bottom level that pebble does not
// merge with its neighbours until later writes overlap it, so a table
// committing a few thousand serial keys every interval would gather
// thousands of small files a day.

// ingestMinKeys is the fewest held entries worth a table file of their
// own; ingestMinBelow the fewest of those below the greatest indexed key
// (their file goes above the bottom level, which compactions merge).
const (
	ingestMinKeys  = 8192
	ingestMinBelow = 1024
)

// ingestFile and ingestBelowFile are the table files being written for
// an ingestion, inside the index's directory; pebble moves them into the
// database (a leftover from a crash is removed at open).
const (
	ingestFile      = "ingest.sst.tmp"
	ingestBelowFile = "ingest-below.sst.tmp"
)

// heldEntry is an index entry held for ingestion: its key (with the
// prefix) is arena[at:k] and its value arena[k:end] of its batch. Offsets,
// not slices: a load's commit holds tens of thousands, and a slice of
// pointer-free entries grows by a plain copy.
type heldEntry struct{ at, k, end uint32 }

// hold keeps the entry of a key for ingestion; false when the batch
// cannot ingest (it clears the index or deleted a key above the greatest
// indexed one: ordering matters then), and for a key at or below the
// greatest indexed one (or the flight's) once the batch deleted a key.
func (b *indexBatch) hold(key []byte, id uint32, pos int64) bool {
	if b.noIngest || b.reset {
		return false
	}
	if bytes.Compare(key, b.x.last) <= 0 || bytes.Compare(key, b.holdAbove) <= 0 {
		if b.deleted {
			return false
		}
		b.heldBelow = true
	}
	if b.arena == nil {
		b.arena, b.held = b.x.spare.take()
	}
	at := len(b.arena)
	e := append(append(b.arena, idxPrefixKey), key...)
	k := len(e)
	e = binary.AppendUvarint(binary.AppendUvarint(e, uint64(id)), uint64(pos))
	b.arena = e
	b.held = append(b.held, heldEntry{at: uint32(at), k: uint32(k), end: uint32(len(e))})
	return true
}

func (b *indexBatch) heldKey(e heldEntry) []byte { return b.arena[e.at:e.k] }
func (b *indexBatch) heldVal(e heldEntry) []byte { return b.arena[e.k:e.end] }

// release puts the held entries into the batch, in the order they were
// set, and stops holding: what follows (a delete, a clear) must apply
// after them.
func (b *indexBatch) release() {
	b.setHeld(b.held)
	b.giveBack()
	b.noIngest = true
}

// giveBack hands the held entries' memory to the index for the next batch
// once nothing reads it (the entries are in the pebble batch, or in an
// ingested file, or the batch is dropped).
func (b *indexBatch) giveBack() {
	if b.arena != nil {
		b.x.spare.put(b.arena, b.held)
	}
	b.held, b.arena = nil, nil
}

// heldBufs is the memory of a batch's held entries, kept by the index from
// one batch to the next: a load's commit holds tens of thousands of
// entries, and its arena and entries grown by doubling anew each commit
// were 68 of the 890 MB a 1M-row load allocated. Two sets are kept: a
// load's commit stages its batch while the last one's lands in flight
// (flight.go), so with one set every other batch grew its own anew (73 of
// the 763 MB a 5M-row load allocated, lead, session 33). Batches may be
// made on more than one goroutine (a compaction's, a flight's), hence the
// lock; a batch that finds none takes new memory.
type heldBufs struct {
	mu   sync.Mutex
	kept [2]heldBuf // the larger arenas given back; empty ones are nil
}

type heldBuf struct {
	arena []byte
	held  []heldEntry
}

// take returns empty buffers, the largest kept ones if any.
func (h *heldBufs) take() ([]byte, []heldEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	if cap(h.kept[1].arena) > cap(h.kept[0].arena) {
		i = 1
	}
	b := h.kept[i]
	h.kept[i] = heldBuf{}
	if b.arena == nil {
		b.arena = make([]byte, 0, 64<<10)
	}
	return b.arena[:0], b.held[:0]
}

// put keeps buffers for a later batch, in place of the smaller kept ones
// if they are larger.
func (h *heldBufs) put(arena []byte, held []heldEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	if cap(h.kept[1].arena) < cap(h.kept[0].arena) {
		i = 1
	}
	if cap(arena) > cap(h.kept[i].arena) {
		h.kept[i] = heldBuf{arena: arena[:0], held: held[:0]}
	}
}

// ingestHeld writes the held entries into one table file and ingests it,
// or, when they are too few, puts them into the batch.
func (b *indexBatch) ingestHeld() error {
	if !b.bulk || len(b.held) < ingestMinKeys {
		b.release()
		return nil
	}
	held := b.held
	defer b.giveBack()
	cmpKey := func(x, y heldEntry) int { return bytes.Compare(b.heldKey(x), b.heldKey(y)) }
	if !slices.IsSortedFunc(held, cmpKey) {
		slices.SortStableFunc(held, cmpKey)
	}
	// The same key set twice: the last set wins, as in a batch.
	out := held[:0]
	for i, e := range held {
		if i+1 < len(held) && bytes.Equal(b.heldKey(e), b.heldKey(held[i+1])) {
			continue
		}
		out = append(out, e)
	}
	// Keys at or below the index's greatest (the last commit's adopted)
	// go to a file of their own, which pebble places above the bottom
	// level; the rest to the bottom level. Too few for a file go into the
	// batch.
	cut, _ := slices.BinarySearchFunc(out, b.x.last, func(e heldEntry, last []byte) int {
		if bytes.Compare(b.heldKey(e)[1:], last) <= 0 {
			return -1
		}
		return 1
	})
	below, above := out[:cut], out[cut:]
	// Only keys in the last batch's range (above lastBefore: a load's
	// partitions read less far) make a file that overlaps a file or two;
	// keys spread over the index (updates, random keys) would leave a
	// file over all of it a commit, where the memtable gathers many
	// commits' before a flush.
	if len(below) < ingestMinBelow || b.x.lastBefore == nil || bytes.Compare(b.heldKey(below[0])[1:], b.x.lastBefore) <= 0 {
		b.setHeld(below)
		below = nil
	}
	if len(above) < ingestMinKeys {
		b.setHeld(above)
		above = nil
	}
	var runs [][]heldEntry
	for _, r := range [][]heldEntry{below, above} {
		if len(r) > 0 {
			runs = append(runs, r)
		}
	}
	if len(runs) == 0 {
		return nil
	}
	last, err := b.x.ingest(runs, b.arena)
	if err == nil {
		b.ingestedLast, b.ingestedN = last, int64(len(below)+len(above))
	}
	return err
}

// setHeld puts held entries into the batch.
func (b *indexBatch) setHeld(es []heldEntry) {
	for _, e := range es {
		_ = b.b.Set(b.heldKey(e), b.heldVal(e), nil) // copied into the batch
	}
}

// ingest writes runs of sorted entries (in arena), each run after the
// last, into a table file each and ingests them at once, returning the
// greatest key ingested. It changes nothing of the index's memory
// (indexBatch.write).
func (x *keyIndex) ingest(runs [][]heldEntry, arena []byte) ([]byte, error) {
	names := []string{ingestBelowFile, ingestFile}[2-len(runs):] // a leftover of either is removed at open
	var paths []string
	removeAll := func() {
		for _, p := range paths {
			_ = os.Remove(p)
		}
	}
	n := 0
	for i, entries := range runs {
		path := filepath.Join(x.dir, names[i])
		paths = append(paths, path)
		n += len(entries)
		f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			removeAll()
			return nil, fmt.Errorf("iceberg: key index: %w", err)
		}
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), x.opts.MakeWriterOptions(len(x.opts.Levels)-1, x.db.TableFormat()))
		for _, e := range entries {
			if err := w.Set(arena[e.at:e.k], arena[e.k:e.end]); err != nil {
				_ = w.Close()
				removeAll()
				return nil, fmt.Errorf("iceberg: key index: write the ingested entries: %w", err)
			}
		}
		if err := w.Close(); err != nil { // syncs the file
			removeAll()
			return nil, fmt.Errorf("iceberg: key index: write the ingested entries: %w", err)
		}
	}
	if err := x.db.Ingest(context.Background(), paths); err != nil {
		removeAll()
		return nil, fmt.Errorf("iceberg: key index: ingest %d entries: %w", n, err)
	}
	afterIngest()
	// The caller keeps last an upper bound of every key pebble holds, even
	// if the batch that follows fails (apply).
	last := runs[len(runs)-1]
	k := last[len(last)-1]
	return slices.Clone(arena[k.at+1 : k.k]), nil
}

// afterIngest runs once an ingestion is durable, before the batch that
// tags it: crash tests stop the process there.
var afterIngest = func() { failpoint.Hit("sink.after-index-ingest") }

// removeIngestLeftover removes a table file a crash left before its
// ingestion.
func removeIngestLeftover(dir string) error {
	for _, name := range []string{ingestFile, ingestBelowFile} {
		err := os.Remove(filepath.Join(dir, name))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("iceberg: key index: %w", err)
		}
	}
	return nil
}
