package snapshot

import (
	"bytes"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// run is one table's snapshot: its saved record (durable progress only)
// and what this session knows beyond it.
type run struct {
	rec     *record
	tbl     *Table // described this session; nil before
	stopped bool

	// Read progress of this session, ahead of rec until a checkpoint.
	readLast  Key
	readVals  []any // readLast's values for tbl.Compare; nil: unknown
	upperVals []any // rec.Upper's values; nil: unknown
	readRows  int64
	rangeDone bool
	emitted   []emitted // chunks emitted, not durable yet
	reread    map[string]*rereadKey
	finished  bool // nothing left to read; removed once durable

	resetWritten bool            // this session wrote the reset watermark
	resetSeen    bool            // the stream met it: the marker is emitted
	resetPos     source.Position // where
	resetCh      chan struct{}   // closed when resetSeen

	windows []*chunk // chunks whose low watermark the stream met

	// The engine goroutine's range cursor: the range chunks in flight, the
	// key the next one reads after, whether the range is all read.
	ahead     []*chunk
	cursor    Key
	cursorSet bool
	readEnd   bool
	// bounds are where the next range chunks after cursor end (Parallel
	// databases); boundsLast when about a chunk or less is left after
	// them. ends is the whole list of the Bounds read they come from (its
	// ends after endsAfter; endsLast its boundsLast), kept so a range that
	// goes on from one of them, or from a chunk cut short before cutTo,
	// need not read them again.
	bounds     []Key
	boundsLast bool
	ends       []Key
	endsAfter  Key
	endsLast   bool
	cutTo      Key
	// epoch counts the range's restarts after a chunk read again (from 1);
	// cancelEpoch is the epoch whose later chunks the stream refuses.
	epoch, cancelEpoch int

	// For the rate: when this session started reading, with rows done then.
	began     time.Time
	beganRows int64
	retries   int
	cuts      int // range chunks cut short at their Limit (outcomeCut)
}

// emitted is a chunk whose rows were handed to the stream at pos.
type emitted struct {
	pos   source.Position
	last  Key // the range's new last key; nil for a point chunk
	rows  int64
	point bool
}

// rereadKey is a key to read again.
type rereadKey struct {
	key        Key
	vals       []any
	resolvedAt source.Position // its read was emitted there; nil: not yet
	inFlight   bool            // a point chunk reads it now
	readded    bool            // a change was dropped while inFlight
	// maybe: added only because a window was open; the window's chunk
	// forgets it if the key is after the chunk (a later chunk reads it).
	maybe bool
}

// moveCursor puts the range cursor at the last key emitted: the next
// range chunk reads after it, up to the next of the ends known to follow
// it (none known: the next chunk reads new ones).
func (r *run) moveCursor() {
	r.cursor, r.readEnd, r.cursorSet = r.readLast, r.rangeDone, true
	r.bounds, r.boundsLast = nil, false
	if i := r.endsFrom(); i >= 0 {
		r.bounds, r.boundsLast = r.ends[i:], r.endsLast
	} else {
		r.ends, r.endsAfter = nil, nil
	}
	r.cutTo = nil
	r.epoch++
}

// endsFrom returns the index of the first of the ends after the cursor,
// -1 when not known without comparing keys: all when the cursor is where
// their read began, those after the end the cursor is at, and after a cut
// (the cursor is the cut chunk's Last, before its To) those from its To on.
func (r *run) endsFrom() int {
	if r.ends == nil {
		return -1
	}
	if keysEqual(r.cursor, r.endsAfter) {
		return 0
	}
	for i, k := range r.ends {
		if keysEqual(k, r.cursor) {
			return i + 1
		}
		if r.cutTo != nil && keysEqual(k, r.cutTo) {
			return i
		}
	}
	return -1
}

func newRun(rec *record) *run {
	r := &run{rec: rec, readLast: rec.Last, readRows: rec.Rows, reread: map[string]*rereadKey{}, resetCh: make(chan struct{})}
	r.rangeDone = rec.Planned && (rec.Upper == nil || (rec.Last != nil && keysEqual(rec.Last, rec.Upper)))
	// The saved re-read set is the run's from the start, before the table
	// is described (describe gives the keys their values): a save in
	// between (another run queued, a pause) writes r.reread, and a set
	// kept only in rec until then was saved empty — the keys were never
	// read again and their rows stayed out of a replaced table (the crash
	// suite's snapshots configuration, session 25).
	for _, k := range rec.Reread {
		r.addReread(k, nil, false)
	}
	rec.Reread = nil // r.reread is the set now; saves write it (durableReread)
	return r
}

// rows is how many rows the run has read and emitted.
func (r *run) rows() int64 { return r.readRows }

// describe sets the table description and what depends on it.
func (r *run) describe(t *Table) {
	r.tbl = t
	if t.ParseKey != nil && t.Compare != nil {
		if r.rec.Last != nil {
			r.readVals, _ = t.ParseKey(r.rec.Last)
		}
		if r.rec.Upper != nil {
			r.upperVals, _ = t.ParseKey(r.rec.Upper)
		}
	}
	// Keys loaded before the description have no values: give them
	// their values and the id a streamed change of them has.
	for id, k := range r.reread {
		if k.vals != nil || t.ParseKey == nil {
			continue
		}
		vals, ok := t.ParseKey(k.key)
		if !ok {
			continue
		}
		k.vals = vals
		nid := r.keyID(k.key, vals)
		if nid == id {
			continue
		}
		delete(r.reread, id)
		if o, dup := r.reread[nid]; dup { // one entry a key: unresolved if either is
			if k.resolvedAt == nil {
				o.resolvedAt = nil
			}
			continue
		}
		r.reread[nid] = k
	}
}

// addReread puts a key in the re-read set (vals may be nil: parsed from
// the key when the source can).
func (r *run) addReread(k Key, vals []any, maybe bool) {
	if vals == nil && r.tbl != nil && r.tbl.ParseKey != nil {
		vals, _ = r.tbl.ParseKey(k)
	}
	id := r.keyID(k, vals)
	if e, ok := r.reread[id]; ok {
		e.resolvedAt, e.maybe = nil, e.maybe && maybe
		if e.inFlight {
			e.readded = true
		}
		return
	}
	r.reread[id] = &rereadKey{key: k, vals: vals, maybe: maybe}
}

// settleBound decides the keys added before the upper bound was known:
// those at most the bound are left to the range.
func (r *run) settleBound() {
	for id, k := range r.reread {
		if !k.maybe || k.inFlight {
			continue
		}
		k.maybe = false
		if r.rec.Upper == nil || k.vals == nil || r.upperVals == nil || r.tbl.Compare == nil {
			continue
		}
		if c, err := r.tbl.Compare(k.vals, r.upperVals); err == nil && c <= 0 {
			delete(r.reread, id)
		}
	}
}

// settleMaybe decides the keys added while a range chunk's window was
// open: those after the chunk's last key are left to later chunks.
func (r *run) settleMaybe(last []any) {
	for id, k := range r.reread {
		if !k.maybe || k.inFlight {
			continue
		}
		k.maybe = false
		if last == nil || k.vals == nil || r.tbl.Compare == nil || r.rangeDone {
			continue
		}
		if c, err := r.tbl.Compare(k.vals, last); err == nil && c > 0 {
			delete(r.reread, id)
		}
	}
}

// keyID is the map key of a key: its encoding when values are known (the
// same as a streamed change's), else its text.
func (r *run) keyID(k Key, vals []any) string {
	if vals != nil && r.tbl != nil && r.tbl.Shape != nil {
		if id, ok := encodeKeyVals(r.tbl.Shape, vals); ok {
			return id
		}
	}
	var b bytes.Buffer
	b.WriteString("\x00text")
	for _, s := range k {
		b.WriteByte(0)
		b.WriteString(s)
	}
	return b.String()
}

// durableReread lists the keys a restart must read again: all not
// durably resolved.
func (r *run) durableReread() []Key {
	var out []Key
	for _, e := range r.reread {
		out = append(out, e.key)
	}
	return out
}

// unresolved reports whether a re-read key waits.
func (r *run) unresolved() bool {
	for _, e := range r.reread {
		if e.resolvedAt == nil {
			return true
		}
	}
	return false
}

// lacking reports whether the sink may lack rows of the run's table until
// the run reads them: a replacing run's (after its reset), or one that goes
// on after a key (Request.After).
func (r *run) lacking() bool { return r.rec.Replace || r.rec.After != nil }

// pendingOrder reports whether the sink may lack the row of a key (values of
// the table's current shape): not read yet by this run's range, or
// waiting in the re-read set. Unknown order: always.
//
// known is whether the answer is known: false when the key is pending only
// because its order could not be told (no comparison, values missing, or
// the comparison failed).
func (r *run) pendingOrder(id string, vals []any) (pending, known bool) {
	if e, ok := r.reread[id]; ok && e.resolvedAt == nil {
		return true, true
	}
	if r.tbl == nil || r.tbl.Compare == nil || (r.readLast != nil && r.readVals == nil) {
		return true, false
	}
	if r.rec.Planned {
		if r.rec.Upper != nil && r.upperVals == nil {
			return true, false
		}
		if r.rangeDone || r.rec.Upper == nil {
			return false, true
		}
	}
	if r.readVals != nil { // at most the last key read (or Request.After): in the sink
		c, err := r.tbl.Compare(vals, r.readVals)
		if err != nil {
			return true, false
		}
		if c <= 0 {
			return false, true
		}
	}
	if !r.rec.Planned { // the bound is read later: it and the chunks will see the key
		return true, true
	}
	c, err := r.tbl.Compare(vals, r.upperVals)
	if err != nil {
		return true, false
	}
	return c <= 0, true
}

// encodeKeyVals encodes key values (in key order) as the key of a change
// of t: the identity the windows and the re-read set compare.
func encodeKeyVals(t *schema.Table, vals []any) (string, bool) {
	if len(vals) != len(t.Key) {
		return "", false
	}
	row := make([]any, len(t.Columns))
	for i, ci := range t.Key {
		row[ci] = vals[i]
	}
	b, err := schema.AppendKey(nil, t, row)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// changeKey returns the encoded key of a change and its values.
func changeKey(c *source.Change) (string, []any, bool) {
	row := c.After
	if row == nil {
		row = c.Before
	}
	if row == nil {
		return "", nil, false
	}
	b, err := schema.AppendKey(nil, c.Table, row)
	if err != nil {
		return "", nil, false
	}
	return string(b), c.Key(), true
}

func keysEqual(a, b Key) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
