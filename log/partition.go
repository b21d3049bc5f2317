package log

import (
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// partition is one ordered sequence of records: a list of segments, the
// last of which is active (appended to by the partition's flusher).
type partition struct {
	topic  string
	id     int32
	dir    string
	root   string // the log's directory (for quarantine)
	opts   *Options
	logger *slog.Logger
	// contiguous: the topic is never compacted, so consecutive segments
	// have no offsets between them; a gap is loss.
	contiguous bool
	// storedPer1K is the stored size of the last batch a fetch decoded per
	// 1024 bytes of its records (1024 for a plain batch; 0 before any):
	// readPlan sizes its reads of the file by it, so a fetch of compressed
	// batches reads about the batches its budget takes, not that budget in
	// stored bytes (3.6 times as many, read again by the next fetch).
	storedPer1K atomic.Int64

	mu sync.Mutex
	// Guarded by mu.
	segs       []*segment // copy-on-write: readers may keep a slice header
	next       int64      // offset the next enqueued record gets
	end        int64      // offset after the last durable record (visible)
	pending    []*appendReq
	closed     bool
	failing    *WriteError   // the last write error, until a write succeeds
	failSince  time.Time     // when writes began to fail
	failures   uint64        // failed writes since Open
	lost       []LostRange   // sorted, disjoint; copy-on-write
	notify     chan struct{} // closed and replaced when end advances
	lastAppend time.Time
	stats      appendStats

	// flushMu is held by whoever flushes: the partition's flusher goroutine
	// or a producer flushing inline. It guards fl.
	flushMu sync.Mutex
	fl      flusherState
	wf      writeFailure // guarded by flushMu
	mark    *syncMark    // nil when read-only

	// Owned by Cleanup (under Embedded.cleanMu).
	compactedTo    int64 // end of the closed segments at the last compaction
	tombstonesLeft bool  // that compaction kept tombstones still to expire

	kick chan struct{} // wakes the flusher; capacity 1
	stop chan struct{} // closed by close
	done chan struct{} // closed when the flusher exits
}

// appendStats counts appends since open.
type appendStats struct {
	records, batches, bytes, syncs uint64
}

// Truncation reports data dropped when a partition was opened.
type Truncation struct {
	Topic     string
	Partition int32
	Segment   string // file path
	At        int64  // byte position where the valid prefix ends
	Batches   int    // batches dropped (the bad one and every frame after it)
	Bytes     int64  // bytes dropped
	Reason    string // the first failed check, e.g. "bad crc"
}

// Loss reports offsets that recovery found lost in a partition.
type Loss struct {
	Topic     string
	Partition int32
	LostRange
}

// RecoveryReport lists what Open dropped; empty after a clean shutdown.
type RecoveryReport struct {
	// Truncations are torn tails: bytes past the last synced batch, which
	// no Produce had returned for.
	Truncations []Truncation
	// Losses are offsets that had been synced and are damaged or missing:
	// Fetch returns a *DataLossError for them.
	Losses []Loss
}

// Lost reports whether any data was dropped.
func (r RecoveryReport) Lost() bool { return len(r.Truncations) > 0 || len(r.Losses) > 0 }

func (p *partition) closeFiles() {
	for _, s := range p.segs {
		s.retire()
	}
}

// bounds returns the first and the next offset. REQUIRES: p.mu.
func (p *partition) boundsLocked() (start, end int64) {
	return p.segs[0].base, p.end
}

// info describes the partition.
func (p *partition) info() PartitionInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	start, end := p.boundsLocked()
	var bytes int64
	for _, s := range p.segs {
		bytes += s.size
	}
	return PartitionInfo{Partition: p.id, Start: start, End: end, Bytes: bytes, Lost: p.lost}
}

// segmentFor returns the index of the segment holding off: the last one
// whose base is at most off. REQUIRES: p.mu.
func segmentFor(segs []*segment, off int64) int {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > off })
	return max(i-1, 0)
}

// wakeLocked wakes every long-polling fetcher. REQUIRES: p.mu.
func (p *partition) wakeLocked() {
	close(p.notify)
	p.notify = make(chan struct{})
}
