package postgres

import (
	"slices"
	"sync"
)

// xidRing remembers the commit LSNs of the newest transactions the stream
// delivered row changes of (ringSize of them), and the relations (pg_class
// oids, as pgoutput names them) those changes were on, so a chunk can tell
// whether a transaction that changed rows of its table committed before
// its low watermark without its read seeing it. That happens when a
// transaction's commit record is flushed (and decoded) before the
// transaction leaves the proc array, where new snapshots stop seeing it as
// in progress: a short window, longer under synchronous replication. Such
// a transaction is either in the snapshot's in-progress list or, when no
// newer transaction had completed, at or after the snapshot's xmax, where
// the list does not show it (PostgreSQL's snapshots stop listing at xmax).
// For the second check each relation keeps the running maximum of the
// xids that changed it (tableHist), as of each of its newest commits. A
// transaction in the list that waits while more than ringSize others
// commit is beyond the check. The stream adds; a chunk's check reads it
// from the engine's goroutine.
//
// Only a transaction that changed rows of a chunk's table (or of a
// relation its rows are read through or delivered under: relations) can
// make the chunk's read stale; one that changed only other tables cannot.
// Until session 20 the check asked about every transaction, and a busy
// database's other tables (the benchmark's lag probe, ~100 commits a
// second) refused chunks at random (BENCHMARKS.md, sessions 19 and 20).
type xidRing struct {
	mu      sync.Mutex
	entries []ringEntry // in commit order from next (once full)
	at      map[uint32]int32
	next    int
	max     uint32 // the newest xid added (xids compared modulo 2^32)
	tables  map[uint32]*tableHist
}

// ringEntry is a delivered commit, the newest xid delivered up to it (any
// table's) and the relations its row changes were on (owned by the entry,
// reused when the ring wraps).
type ringEntry struct {
	xid, max uint32
	lsn      uint64
	tables   []uint32
}

// tableHist is one relation's newest commits (histSize of them) and the
// running maximum of the xids that changed it up to each.
type tableHist struct {
	marks []histMark // in commit order from next (once full)
	next  int
	max   uint32
	// dropped: marks has wrapped; a commit before the oldest mark left is
	// not known any more.
	dropped bool
}

// histMark is a commit of a relation's rows and the relation's running
// maximum xid up to it.
type histMark struct {
	lsn uint64
	max uint32
}

const (
	ringSize = 1 << 16
	// histSize is the most commits a relation keeps. A check needs the
	// newest mark before its low watermark; when every mark kept is after
	// it (more than histSize commits of the chunk's own table between its
	// low watermark and the check), the check refuses the chunk. Marks
	// grow as a relation's commits come, so a quiet table keeps few.
	histSize = 1024
)

func newXidRing() *xidRing {
	return &xidRing{entries: make([]ringEntry, 0, ringSize), at: make(map[uint32]int32, ringSize), tables: map[uint32]*tableHist{}}
}

// xidAfter reports whether a is a newer xid than b (modulo 2^32, as
// PostgreSQL compares them).
func xidAfter(a, b uint32) bool { return int32(a-b) > 0 }

// add records the commit of a transaction whose row changes were on
// tables (the ring copies them).
func (x *xidRing) add(xid uint32, lsn uint64, tables []uint32) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.entries) == 0 || xidAfter(xid, x.max) {
		x.max = xid
	}
	var i int
	if len(x.entries) < ringSize {
		i = len(x.entries)
		x.entries = append(x.entries, ringEntry{})
	} else {
		i = x.next
		if old := x.entries[i].xid; x.at[old] == int32(i) {
			delete(x.at, old)
		}
		x.next = (x.next + 1) % ringSize
	}
	e := &x.entries[i]
	e.xid, e.max, e.lsn = xid, x.max, lsn
	e.tables = append(e.tables[:0], tables...)
	x.at[xid] = int32(i)
	for _, t := range tables {
		h := x.tables[t]
		if h == nil {
			h = &tableHist{max: xid}
			x.tables[t] = h
		}
		h.add(xid, lsn)
	}
}

// add records a commit of the relation's rows.
func (h *tableHist) add(xid uint32, lsn uint64) {
	if xidAfter(xid, h.max) {
		h.max = xid
	}
	m := histMark{lsn: lsn, max: h.max}
	if len(h.marks) < histSize {
		h.marks = append(h.marks, m)
		return
	}
	h.marks[h.next] = m
	h.next = (h.next + 1) % histSize
	h.dropped = true
}

// atOrAfterBefore reports whether a transaction that changed the
// relation, at or after xmax, committed before lsn: the running maximum
// as of the newest mark before lsn (few marks come after it, those
// delivered since the low watermark). When every mark kept is at or after
// lsn and older ones were dropped, it cannot tell, and says so (true).
func (h *tableHist) atOrAfterBefore(xmax uint32, lsn uint64) bool {
	n := len(h.marks)
	for i := range n {
		m := h.marks[(h.next+n-1-i)%n]
		if m.lsn < lsn {
			return m.max == xmax || xidAfter(m.max, xmax)
		}
	}
	return h.dropped
}

// committedBefore reports whether a transaction the snapshot does not see
// committed before lsn (one of its in-progress xids, or one at or after its
// xmax) having changed rows of one of relations. Nil relations asks about
// every transaction (a plan's check).
func (x *xidRing) committedBefore(snap pgSnapshot, lsn uint64, relations []uint32) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for xid := range snap.xip {
		if i, ok := x.at[xid]; ok {
			if e := &x.entries[i]; e.lsn < lsn && (relations == nil || touches(e.tables, relations)) {
				return true
			}
		}
	}
	if relations != nil {
		for _, t := range relations {
			if h := x.tables[t]; h != nil && h.atOrAfterBefore(snap.xmax, lsn) {
				return true
			}
		}
		return false
	}
	// The newest entry before lsn: few entries come after it (those
	// delivered since the low watermark).
	n := len(x.entries)
	for i := range n {
		e := x.entries[(x.next+n-1-i)%n]
		if e.lsn < lsn {
			return e.max == snap.xmax || xidAfter(e.max, snap.xmax)
		}
	}
	return false
}

// touches reports whether a transaction's relations include one of a
// chunk's.
func touches(tables, relations []uint32) bool {
	for _, t := range tables {
		if slices.Contains(relations, t) {
			return true
		}
	}
	return false
}
