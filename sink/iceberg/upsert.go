package iceberg

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/schema"
)

// Upsert mode mirrors the source: every commit folds its changes per key
// (last change wins), writes the surviving rows into new data files sorted
// by key, and marks each replaced or deleted row's old position deleted:
// in the data file's deletion vector (format v3: the file's current vector
// is loaded, merged and replaced in the same commit, so a data file never
// has two live vectors) or in a position-delete file (format v2). Never
// equality deletes. The key index says where each key's current row is.

// upsert is an upsert table's state between commits.
type upsert struct {
	idx  *keyIndex
	data map[string]iceberg.DataFile // live data files by path
	dvs  map[string]iceberg.DataFile // v3: the live deletion vector of each data file
	// posDeletes are the live position-delete files (v2).
	posDeletes []iceberg.DataFile
	// dvCache holds the vectors this writer committed, so the next commit
	// touching the same data file need not read its Puffin file back.
	dvCache map[string]cachedDV
	// dvBuf is reused to encode one deletion vector after another.
	dvBuf []byte
	// dvOut buffers the Puffin file flushDVs streams, one file after
	// another (a new 256 KiB writer a commit was 20 of the 1,422 MB the
	// streaming phase of `cdcd bench -source mariadb` allocated).
	dvOut *bufio.Writer
	// keys are the identifier (primary-key) fields of the table.
	keys []iceberg.NestedField
	// rowIDs finds an updated row's old _row_id (v3, rowlineage.go).
	rowIDs rowIDs
	// ins is foldInserts' memory from commit to commit, and lookup stage's
	// list of keys to look up.
	ins      insertFold
	lookup   [][]byte
	parts    []int32   // stage's partition of each key (partitionsOf)
	sortKeys keySorter // foldByKey's
	// over is the key index as the commit in flight leaves it (nil: none;
	// flight.go), which stage's lookups consult before the index, and
	// ahead says stage makes the plan's own (plan.over) for the commit
	// after it. sub is lookupKeys' memory.
	over  *overlay
	ahead bool
	sub   overlayLookup
	// spareOver is a landed flight's overlay, which the next overlay stage
	// makes reuses (newOverlay).
	spareOver *overlay
}

// loadFiles reads the live data files and deletion vectors of tbl's current
// snapshot.
func (u *upsert) loadFiles(ctx context.Context, tbl *table.Table) error {
	u.data, u.dvs, u.posDeletes = map[string]iceberg.DataFile{}, map[string]iceberg.DataFile{}, nil
	u.dvCache = map[string]cachedDV{}
	u.rowIDs.reset()
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	mfs, err := snap.Manifests(fs)
	if err != nil {
		return fmt.Errorf("iceberg: read manifest list of %s: %w", identString(tbl.Identifier()), err)
	}
	for _, mf := range mfs {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return fmt.Errorf("iceberg: read manifest %s: %w", mf.FilePath(), err)
			}
			df := e.DataFile()
			switch df.ContentType() {
			case iceberg.EntryContentData:
				u.data[df.FilePath()] = df
			case iceberg.EntryContentPosDeletes:
				if table.IsDeletionVector(df) && df.ReferencedDataFile() != nil {
					u.dvs[*df.ReferencedDataFile()] = df
				} else {
					u.posDeletes = append(u.posDeletes, df)
				}
			}
		}
	}
	return nil
}

// liveRows is about how many rows the table holds: its live data files'
// rows less the positions their vectors or position-delete files delete
// (the key index's size, for its choice of seek: denseLookups).
func (u *upsert) liveRows() int64 {
	var n int64
	for _, df := range u.data {
		n += df.Count()
	}
	for _, d := range u.dvs {
		n -= d.Count()
	}
	for _, d := range u.posDeletes {
		n -= d.Count()
	}
	return max(n, 0)
}

// keyFields returns the table's identifier fields in id order.
func keyFields(sc *iceberg.Schema) ([]iceberg.NestedField, error) {
	ids := sc.IdentifierFieldIDs
	if len(ids) == 0 {
		return nil, errors.New("iceberg: upsert table has no identifier fields (primary key)")
	}
	out := make([]iceberg.NestedField, 0, len(ids))
	for _, id := range ids {
		f, ok := sc.FindFieldByID(id)
		if !ok {
			return nil, fmt.Errorf("iceberg: identifier field %d is not in the schema", id)
		}
		out = append(out, f)
	}
	return out, nil
}

// keyOf encodes the key of row (in t's column order) canonically.
func (u *upsert) keyOf(t *schema.Table, row []any) ([]byte, error) {
	vals := make([]any, len(u.keys))
	for i, f := range u.keys {
		ci := t.ColumnIndex(f.Name)
		if ci < 0 {
			return nil, fmt.Errorf("iceberg: %s has no key column %q", t.QualifiedName(), f.Name)
		}
		v, err := keyValue(f.Type, row[ci])
		if err != nil {
			return nil, fmt.Errorf("iceberg: %s key column %q: %w", t.QualifiedName(), f.Name, err)
		}
		vals[i] = v
	}
	return encodeKey(nil, vals)
}

// keyValue normalizes a key value so the same key always encodes the same
// way: decimals by their unscaled integer; intervals by the ISO 8601 text
// the table stores (IntervalValue.String, one text per months/days/micros
// triple, the parts never converted into each other: PostgreSQL's key
// equality of '1 mon' and '30 days' never matters, as both cannot be keys
// of one table at once), so a key from the source and the same key read
// back from a data file encode alike. Lists cannot be keys.
func keyValue(typ iceberg.Type, v any) (any, error) {
	switch v := v.(type) {
	case schema.IntervalValue:
		return v.String(), nil
	case []any:
		return nil, errors.New("an array cannot be a key column")
	}
	if d, ok := typ.(iceberg.DecimalType); ok {
		s, ok := v.(string)
		if !ok {
			return v, nil
		}
		u, err := unscaledDecimal(s, d.Scale())
		if err != nil {
			return nil, err
		}
		return u.String(), nil
	}
	return v, nil
}

// keyOfChange encodes a change's key: from its Avro key when it has one,
// else from its row.
func (u *upsert) keyOfChange(c *change) ([]byte, error) {
	if c.key == nil || c.env != nil {
		env, err := c.envelope()
		if err != nil {
			return nil, err
		}
		row := env.After
		if row == nil {
			row = env.Before
		}
		return u.keyOf(c.table, row)
	}
	if k, ok := u.int64Key(c); ok {
		return k, nil
	}
	kv, err := schema.DecodeKey(c.table, c.key)
	if err != nil {
		return nil, err
	}
	vals := make([]any, len(u.keys))
	for i, f := range u.keys {
		found := false
		for j, ci := range c.table.Key {
			if c.table.Columns[ci].Name == f.Name {
				v, err := keyValue(f.Type, kv[j])
				if err != nil {
					return nil, fmt.Errorf("iceberg: %s key column %q: %w", c.table.QualifiedName(), f.Name, err)
				}
				vals[i], found = v, true
			}
		}
		if !found {
			return nil, fmt.Errorf("iceberg: %s has no key column %q", c.table.QualifiedName(), f.Name)
		}
	}
	return encodeKey(nil, vals)
}

// int64Key encodes the key of a change whose key is one NOT NULL bigint
// column (the common case) straight from its Avro key, which is then the
// value's zigzag varint alone: no decoded values, no allocation but the
// key's (none from an arena: keyArena.int64Key).
func (u *upsert) int64Key(c *change) ([]byte, bool) {
	return u.appendInt64Key(make([]byte, 0, 9), c)
}

// appendInt64Key appends int64Key's encoding to dst.
func (u *upsert) appendInt64Key(dst []byte, c *change) ([]byte, bool) {
	v, ok := u.int64KeyValue(c)
	if !ok {
		return nil, false
	}
	return appendKeyInt(dst, v), true
}

// int64KeyValue is the value of c's key when it is one NOT NULL bigint
// column read from its Avro key (int64Key).
func (u *upsert) int64KeyValue(c *change) (int64, bool) {
	if len(u.keys) != 1 || c.table == nil || len(c.table.Key) != 1 || c.key == nil || c.env != nil {
		return 0, false
	}
	col := &c.table.Columns[c.table.Key[0]]
	if col.Kind != schema.Int64 || col.Nullable || col.Name != u.keys[0].Name {
		return 0, false
	}
	if c.keyIsInt {
		return c.keyInt, true // read by the fetcher's decode
	}
	v, n := binary.Varint(c.key)
	if n <= 0 || n != len(c.key) {
		return 0, false
	}
	return v, true
}

// keyArena holds a fold's bigint keys in shared chunks. A key is written
// once and its bytes never again, so it may alias its chunk and serve as
// a map's string key without a copy (two allocations a key before).
type keyArena struct{ chunk []byte }

const keyArenaChunk = 64 << 10

// key encodes c's key (keyOfChange), from the arena when it is a bigint.
func (a *keyArena) key(u *upsert, c *change) ([]byte, error) {
	if c.key != nil && c.env == nil {
		if cap(a.chunk)-len(a.chunk) < 9 {
			a.chunk = make([]byte, 0, keyArenaChunk)
		}
		start := len(a.chunk)
		if k, ok := u.appendInt64Key(a.chunk, c); ok {
			a.chunk = k
			return k[start:len(k):len(k)], nil
		}
	}
	return u.keyOfChange(c)
}

// keyState is one key's fold over a commit's changes.
type keyState struct {
	key     []byte
	changes []*change // in source order
	live    bool
	// deleted: one of changes is a delete (set by the folds, which read
	// each change's op anyway; oldRowIDs asks it for every found key, and
	// reading the changes again there was a cache miss a key).
	deleted bool
	// part is the partition of the key's changes, -1 when they are in two
	// (set by the folds, which have each change at hand; partitionsOf).
	part int32
	// table and row are the final image, set by materialize for live keys;
	// a value still schema.Unchanged comes from the current row of the
	// table of key from (this key, or the old key of a key change).
	table *schema.Table
	row   []any
	from  []byte
	// direct: the final image is this change's after-image, whole (no
	// unchanged values), left undecoded (row is nil): writeRows decodes it
	// straight into Parquet values (rowCodec) where it can.
	direct *change
	// loc is where the key's current row in the table is, when indexed
	// (stage); rowID is that row's _row_id, kept by the live row that
	// replaces it, when hasRowID (format 3: oldRowIDs).
	loc      location
	indexed  bool
	rowID    int64
	hasRowID bool
	// ov is the key's entry in its plan's overlay (plan.over), when made.
	ov int32
	// one holds changes while the key has a single one (most keys).
	one [1]*change
}

// fold groups the buffer's changes per key in offset order; a key's last
// change decides whether it lives. It returns the keys' states by key and
// in the order the keys first appear.
//
// A key's changes are all in its partition, and the buffer holds each
// partition's changes in offset order (fetches are appended as they come,
// a partition's one after another), so the buffer's own order is every
// key's order: no ordering across partitions is needed, since a key
// change's halves find each other by position (keyChangeOrigin). Only a
// key found in two partitions (a topic's keys re-partitioned, which cdcd
// never does) makes the fold start again in source order (byPartition,
// mergeRuns), as it always did before.
//
// A buffer keyed by one bigint column is folded by sorting instead
// (foldByKey): the same states, sorted by key.
func (u *upsert) fold(buf []change) (map[string]*keyState, []*keyState, error) {
	states, keys, _, err := u.foldSorted(buf)
	return states, keys, err
}

// foldSorted is fold; sorted says the keys are in key order (foldByKey's).
func (u *upsert) foldSorted(buf []change) (_ map[string]*keyState, _ []*keyState, sorted bool, _ error) {
	if states, keys, ok, err := u.foldByKey(buf); ok || err != nil {
		return states, keys, ok, err
	}
	states, keys, err := u.foldMap(buf)
	return states, keys, false, err
}

// foldMap is fold's general way: the keys' states in a map, in the order
// the keys first appear.
func (u *upsert) foldMap(buf []change) (map[string]*keyState, []*keyState, error) {
	states, keys, spread, err := u.foldIn(len(buf), false, func(yield func(*change) error) error {
		for i := range buf {
			if c := &buf[i]; !c.skip && c.op() != 't' {
				if err := yield(c); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil || !spread {
		return states, keys, err
	}
	order := make([]*change, 0, len(buf))
	for i := range buf {
		if !buf[i].skip && buf[i].op() != 't' {
			order = append(order, &buf[i])
		}
	}
	order = mergeRuns(byPartition(order), func(a, b *change) int { return bytes.Compare(a.position(), b.position()) })
	states, keys, _, err = u.foldIn(len(order), true, func(yield func(*change) error) error {
		for _, c := range order {
			if err := yield(c); err != nil {
				return err
			}
		}
		return nil
	})
	return states, keys, err
}

// foldIn folds the changes each hands over (at most n), in that order.
// Unless ordered (each hands them over in source order), spread reports a
// key with changes in two partitions, and the states are then not
// materialized.
func (u *upsert) foldIn(n int, ordered bool, each func(yield func(*change) error) error) (_ map[string]*keyState, _ []*keyState, spread bool, _ error) {
	states := make(map[string]*keyState, n)
	slab := make([]keyState, 0, n) // never grows: the pointers stay
	keys := make([]*keyState, 0, n)
	var arena keyArena
	err := each(func(c *change) error {
		k, err := arena.key(u, c)
		if err != nil {
			return err
		}
		st := states[string(k)]
		if st == nil {
			slab = append(slab, keyState{key: k, part: c.partition})
			st = &slab[len(slab)-1]
			st.changes = st.one[:0]
			// A key's bytes are never written again (keyArena, or its own
			// allocation): the map's key may alias them.
			states[unsafe.String(unsafe.SliceData(k), len(k))] = st
			keys = append(keys, st)
		} else if st.part != c.partition {
			st.part = -1
			spread = spread || !ordered
		}
		st.changes = append(st.changes, c)
		st.live = c.op() != 'd'
		st.deleted = st.deleted || !st.live
		return nil
	})
	if err != nil || spread {
		return nil, nil, spread, err
	}
	for _, st := range keys {
		if err := u.materialize(states, st); err != nil {
			return nil, nil, false, err
		}
	}
	return states, keys, false, nil
}

// byPartition groups changes by partition, keeping each partition's in
// their order (offset order): mergeRuns then merges one run a partition
// (fold's order when a key is in two partitions). A
// buffer fetched while the fetcher keeps up with the log holds many short
// fetches, each a run of its own: thousands of runs, a dozen merge passes.
// Changes of different partitions have different positions, so the
// merged order is the same either way.
func byPartition(cs []*change) []*change {
	var counts []int
	for _, c := range cs {
		if int(c.partition) >= len(counts) {
			counts = append(counts, make([]int, int(c.partition)+1-len(counts))...)
		}
		counts[c.partition]++
	}
	if len(counts) <= 1 {
		return cs
	}
	at := 0
	for p, n := range counts {
		counts[p], at = at, at+n
	}
	out := make([]*change, len(cs))
	for _, c := range cs {
		out[counts[c.partition]] = c
		counts[c.partition]++
	}
	return out
}

// mergeRuns sorts a stably by cmp, merging its ascending runs: the buffer
// is a sequence of fetches, each from one partition, whose positions grow
// with its offsets, so a commit's changes form few runs and merging them
// costs a pass per doubling of the run length, where a stable sort moves
// each change log(n) times over. Equal changes keep their order. The
// result is a or a slice of the same length.
func mergeRuns[T any](a []T, cmp func(x, y T) int) []T {
	bounds := []int{0}
	for i := 1; i < len(a); i++ {
		if cmp(a[i-1], a[i]) > 0 {
			bounds = append(bounds, i)
		}
	}
	if len(bounds) == 1 {
		return a
	}
	bounds = append(bounds, len(a))
	buf := make([]T, len(a))
	for len(bounds) > 2 {
		next := bounds[:0:0]
		for i := 0; i+1 < len(bounds); i += 2 {
			lo, mid := bounds[i], bounds[i+1]
			next = append(next, lo)
			if i+2 == len(bounds) { // an odd run out: carried over
				copy(buf[lo:mid], a[lo:mid])
				continue
			}
			hi := bounds[i+2]
			l, r, k := lo, mid, lo
			for l < mid && r < hi {
				if cmp(a[r], a[l]) < 0 {
					buf[k], r = a[r], r+1
				} else {
					buf[k], l = a[l], l+1
				}
				k++
			}
			k += copy(buf[k:], a[l:mid])
			copy(buf[k:], a[r:hi])
		}
		next = append(next, len(a))
		a, buf, bounds = buf, a, next
	}
	return a
}

// materialize decodes a live key's last row, taking unchanged values from
// the key's earlier images in the commit where it has them (through key
// changes: fill), and notes whose current row in the table has the rest.
func (u *upsert) materialize(states map[string]*keyState, st *keyState) error {
	last := st.changes[len(st.changes)-1]
	if !st.live {
		st.table = last.table
		return nil
	}
	if last.env == nil && last.info.Unchanged == 0 && last.info.After != nil {
		st.table, st.direct = last.table, last
		return nil
	}
	env, err := last.envelope()
	if err != nil {
		return err
	}
	row := env.After // decoded for this call: the key's own to fill
	if last.env != nil {
		row = slices.Clone(row) // a test's envelope, shared
	}
	st.table, st.row = last.table, row
	for _, v := range row {
		if schema.IsUnchanged(v) {
			st.from, err = u.fill(states, st, len(st.changes)-1, row, last.table)
			return err
		}
	}
	return nil
}

// fill takes the values of row (columns of t) still schema.Unchanged from
// the images older than change j of st's key, newest first. An insert
// starts a key's life: a plain one has every value; the insert of a key
// change continues with its old key's images before that key's delete
// (skipping the delete itself). fill returns the key whose row in the
// table before the commit has what is still missing, nil when nothing is.
func (u *upsert) fill(states map[string]*keyState, st *keyState, j int, row []any, t *schema.Table) ([]byte, error) {
	missing := func() string {
		for i, v := range row {
			if schema.IsUnchanged(v) {
				return t.Columns[i].Name
			}
		}
		return ""
	}
	for hops := 0; ; {
		if c := st.changes[j]; c.op() == 'c' || c.op() == 'r' {
			if !c.needsOldKey() {
				return nil, fmt.Errorf("iceberg: %s column %q arrived as unchanged, but the key's insert in the same commit has no value for it",
					t.QualifiedName(), missing())
			}
			old, d, err := u.keyChangeOrigin(states, c)
			if err != nil {
				return nil, err
			}
			if hops++; hops > len(states) {
				return nil, fmt.Errorf("iceberg: %s: key changes in a cycle", t.QualifiedName())
			}
			st, j = old, d
		}
		if j--; j < 0 {
			return st.key, nil
		}
		prev := st.changes[j]
		if prev.op() == 'd' {
			return nil, fmt.Errorf("iceberg: %s column %q arrived as unchanged, but the key was deleted before in the same commit",
				t.QualifiedName(), missing())
		}
		penv, err := prev.envelope()
		if err != nil {
			return nil, err
		}
		left := false
		for i, v := range row {
			if !schema.IsUnchanged(v) {
				continue
			}
			if pi := prev.table.ColumnIndex(t.Columns[i].Name); pi >= 0 && penv.After != nil && !schema.IsUnchanged(penv.After[pi]) {
				row[i] = penv.After[pi]
			} else {
				left = true
			}
		}
		if !left {
			return nil, nil
		}
	}
}

// plan is one upsert commit, staged: files written, nothing committed.
type plan struct {
	added      []iceberg.DataFile // new data files
	deletes    []iceberg.DataFile // new deletion vectors or position-delete files
	removedDVs []iceberg.DataFile // superseded deletion vectors
	newDVs     map[string]iceberg.DataFile
	bitmaps    map[string]*dv.RoaringPositionBitmap // the merged vector per touched data file
	batch      *indexBatch
	rows       int
	// removedData are data files the commit removes (compaction), with
	// their vectors in removedDVs; the commit is then a REPLACE.
	removedData []iceberg.DataFile
	// over is the index as this plan leaves it, made when the next commit
	// is staged while this one lands (upsert.ahead).
	over *overlay
}

func (p *plan) empty() bool {
	return len(p.added) == 0 && len(p.deletes) == 0 && len(p.removedData) == 0
}

// stage folds buf and writes its data files and deletes against tbl.
func (u *upsert) stage(ctx context.Context, w *tableWriter, tbl *table.Table, buf []change) (*plan, error) {
	keys, inserts, err := u.foldInserts(buf)
	var states map[string]*keyState // a buffer of inserts needs none: no key takes values from another
	sorted := inserts
	if err == nil && !inserts {
		states, keys, sorted, err = u.foldSorted(buf)
	}
	if err != nil {
		return nil, badData(err)
	}
	// In key order once, for the index lookups and the rows written
	// (foldByKey and foldInserts hand them over so: sorted).
	if byKey := func(a, b *keyState) int { return compareKeys(a.key, b.key) }; !sorted && !slices.IsSortedFunc(keys, byKey) {
		slices.SortFunc(keys, byKey)
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, fmt.Errorf("iceberg: the warehouse of %s is not writable", identString(tbl.Identifier()))
	}
	p := &plan{batch: u.idx.newBatch(), newDVs: map[string]iceberg.DataFile{}, bitmaps: map[string]*dv.RoaringPositionBitmap{}}
	ok = false
	defer func() {
		if !ok {
			p.batch.discard()
		}
	}()
	// Where each key's current row is, and which positions that deletes.
	deleted := map[string][]int64{}
	// The keys that end deleted leave the index in this pass, which reads
	// every state anyway: a pass of their own after writeRows was a cache
	// miss a key. Keys are distinct, so these deletes and writeRows' sets
	// never meet at one key, and none is held yet (indexBatch.del).
	lookup := u.lookup[:0]
	if u.ahead {
		p.over, u.spareOver = newOverlay(len(keys), u.spareOver), nil
	}
	if o := u.over; o != nil && len(o.ents) > 0 {
		// Keys at or below the flight's are not ingested: a table file
		// overlapping its entries would land above the bottom level.
		// Copied: the flight's overlay is filled again once it landed.
		p.batch.holdAbove = bytes.Clone(o.key(len(o.ents) - 1))
	}
	for _, st := range keys {
		lookup = append(lookup, st.key)
		if !st.live {
			p.batch.del(st.key)
		}
		if p.over != nil {
			st.ov = p.over.add(st.key)
		}
	}
	defer func() { // kept for the next commit, pinning no key
		clear(lookup)
		u.lookup = lookup[:0]
	}()
	parts := u.partitionsOf(buf, keys, int32(w.partitions))
	if parts != nil {
		p.batch.parts = make([][]byte, w.partitions)
		for i, st := range keys { // in key order: the last is the greatest
			p.batch.parts[parts[i]] = st.key
		}
	}
	u.idx.size = u.liveRows()
	err = u.lookupKeys(lookup, parts, func(i int, loc location) error {
		if _, live := u.data[loc.file]; !live {
			return refuse("stop cdcd, remove the table's key index directory (under data_dir/index) and start it: the sink rebuilds the index from the table",
				fmt.Errorf("iceberg: key index points at %s, which is not a live data file of %s; the index is out of date",
					loc.file, identString(tbl.Identifier())))
		}
		keys[i].loc, keys[i].indexed = loc, true
		deleted[loc.file] = append(deleted[loc.file], loc.pos)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := u.resolveUnchanged(fs, tbl, states, keys); err != nil {
		return nil, err
	}
	if err := u.oldRowIDs(fs, tbl, keys); err != nil {
		return nil, err
	}
	if err := u.writeRows(w, wfs, tbl, keys, p); err != nil {
		return nil, err
	}
	if err := u.writeDeletes(ctx, w, fs, wfs, tbl, deleted, p); err != nil {
		return nil, err
	}
	ok = true
	return p, nil
}

// partitionsOf returns the partition of each key's changes, for getMany's
// bounds by partition (partBounds), or nil, having dropped the bounds, when
// the buffer does not show each key in one partition: a change not placed
// by its key among the topic's n partitions (placedByKey; a change without
// a key body is not), changes of two table versions, or a key with changes
// in two partitions. The bounds are made for n and the buffer's
// table version when they are not already (keys of another version are
// all under the new floor).
func (u *upsert) partitionsOf(buf []change, keys []*keyState, n int32) []int32 {
	if t := u.ins.placed; t != nil && len(u.ins.parts) == len(keys) {
		// foldInsertsByInt found them (insertFold.placed).
		u.ins.placed = nil
		if n <= 0 {
			return nil
		}
		u.idx.boundsFor(n, t)
		return u.ins.parts
	}
	var table *schema.Table
	for i := range buf {
		c := &buf[i]
		if c.skip {
			continue
		}
		if !c.placed || (table != nil && c.table != table) {
			u.idx.dropBounds()
			return nil
		}
		table = c.table
	}
	if table == nil || n <= 0 {
		return nil
	}
	parts := u.parts[:0]
	for _, st := range keys {
		if st.part < 0 || len(st.changes) == 0 {
			u.idx.dropBounds()
			return nil
		}
		parts = append(parts, st.part)
	}
	u.parts = parts
	u.idx.boundsFor(n, table)
	return parts
}

// unchangedColumns returns the columns of a live key's row whose value must
// come from the table's current row.
func (st *keyState) unchangedColumns() []int {
	if !st.live {
		return nil
	}
	var out []int
	for i, v := range st.row {
		if schema.IsUnchanged(v) {
			out = append(out, i)
		}
	}
	return out
}

// resolveUnchanged fills unchanged values from the current rows of the
// keys they come from (the key's own, or an old key's before a key change).
func (u *upsert) resolveUnchanged(fs icebergio.IO, tbl *table.Table, states map[string]*keyState, keys []*keyState) error {
	byFile := map[string]map[int64]bool{}
	for _, st := range keys {
		need := st.unchangedColumns()
		if len(need) == 0 {
			continue
		}
		src := states[string(st.from)]
		if src == nil || !src.indexed {
			whose := "its key"
			if !bytes.Equal(st.from, st.key) {
				whose = "the key it changed from"
			}
			return badData(fmt.Errorf("iceberg: %s column %q arrived as unchanged, but the table has no row for %s to take the value from",
				st.table.QualifiedName(), st.table.Columns[need[0]].Name, whose))
		}
		if byFile[src.loc.file] == nil {
			byFile[src.loc.file] = map[int64]bool{}
		}
		byFile[src.loc.file][src.loc.pos] = true
	}
	if len(byFile) == 0 {
		return nil
	}
	fields := tbl.Schema().Fields()
	current := map[location][]any{}
	for path, positions := range byFile {
		pf, closeFn, err := parquetFile(fs, path)
		if err != nil {
			return err
		}
		rows, err := readRowsAt(pf, fields, positions)
		closeFn()
		if err != nil {
			return err
		}
		for pos, r := range rows {
			current[location{path, pos}] = r
		}
	}
	for _, st := range keys {
		need := st.unchangedColumns()
		if len(need) == 0 {
			continue
		}
		cur := current[states[string(st.from)].loc]
		for _, ci := range need {
			name := st.table.Columns[ci].Name
			found := false
			for fi, f := range fields {
				if f.Name == name && cur != nil {
					st.row[ci], found = cur[fi], true
				}
			}
			if !found {
				return badData(fmt.Errorf("iceberg: %s column %q arrived as unchanged, but the table's row has no such column",
					st.table.QualifiedName(), name))
			}
		}
	}
	return nil
}

// writeRows writes every live key's row into new data files, sorted by key,
// and stages their index entries. On format 3 the files carry the row
// lineage columns: an updated row keeps its old _row_id (keyState.rowID).
//
// A large commit of an unpartitioned table is cut into key ranges
// (writeParts) written into files of their own at once, one goroutine a
// range: the table's loop is one goroutine, and writing data files (the
// rows decoded into Parquet values, parquet-go's encoding and compression)
// is most of its time in a load, while the second core waits. What the
// commit stages does not depend on the cut: each range's files are added,
// and their keys set in the index batch, in key order after every range is
// written.
func (u *upsert) writeRows(w *tableWriter, wfs icebergio.WriteFileIO, tbl *table.Table, keys []*keyState, p *plan) error {
	live := make([]*keyState, 0, len(keys))
	for _, st := range keys {
		if st.live {
			live = append(live, st)
		}
	}
	if len(live) == 0 {
		return nil
	}
	byKey := func(a, b *keyState) int { return compareKeys(a.key, b.key) }
	if !slices.IsSortedFunc(live, byKey) {
		slices.SortFunc(live, byKey)
	}
	fileSc := tbl.Schema()
	if tbl.Metadata().Version() >= 3 {
		fileSc = iceberg.SchemaWithRowLineage(fileSc)
	}
	part, err := newPartitioner(tbl.Schema(), tbl.Spec())
	if err != nil {
		return err
	}
	fields := tbl.Schema().Fields()
	rw := &rangeWriter{u: u, w: w, wfs: wfs, tbl: tbl, fileSc: fileSc, part: part,
		fields: fields, defaults: initialValues(fields)} // defaults: of columns a row's version lacks
	var written [][]writtenFile
	if n := writeParts(len(live), part.partitioned()); n > 1 {
		written = make([][]writtenFile, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			lo, hi := i*len(live)/n, (i+1)*len(live)/n
			wg.Add(1)
			go func() {
				defer wg.Done()
				written[i], errs[i] = rw.write(live[lo:hi])
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err // the files written are the attempt's: discardAttempt removes them
		}
	} else {
		one, err := rw.write(live)
		if err != nil {
			return err
		}
		written = [][]writtenFile{one}
	}
	lineage := slices.ContainsFunc(fileSc.Fields(), func(f iceberg.NestedField) bool { return f.ID == iceberg.RowIDFieldID })
	for _, files := range written {
		for _, f := range files {
			p.added = append(p.added, f.df)
			var ids []int64 // the file's explicit row ids, for a later update
			for i, st := range f.rows {
				p.batch.set(st.key, location{file: f.path, pos: int64(i)})
				if p.over != nil {
					p.over.place(st.ov, f.path, int64(i))
				}
				if st.hasRowID {
					if ids == nil {
						ids = slices.Repeat([]int64{noRowID}, len(f.rows))
					}
					ids[i] = st.rowID
				}
			}
			if lineage {
				u.rowIDs.remember(f.path, ids)
			}
			p.rows += len(f.rows)
		}
	}
	return nil
}

// Key ranges written at once (writeRows): at most maxWriteParts, each of
// at least writePartRows rows, and no more than GOMAXPROCS. A range is a
// data file of its own, so the bound on its rows keeps a commit from
// leaving many small files (the compactor merges them); a load's commit,
// about 35,000 rows of the benchmark's table at the default 8 MiB buffer,
// is cut in two on two cores.
const maxWriteParts = 4

// writePartRows is the fewest rows of a range (a variable for tests).
var writePartRows = 8 << 10

// writeParts is the number of key ranges a commit of rows live rows is
// written in; partitioned tables write one (a range would open a file in
// every partition it touches). A failpoint build takes the fewest rows of
// a range from the knob SINK_WRITE_PART_ROWS, so the crash suite's small
// commits are cut too.
func writeParts(rows int, partitioned bool) int {
	if partitioned {
		return 1
	}
	per := writePartRows
	if k := failpoint.Knob("SINK_WRITE_PART_ROWS"); k > 0 {
		per = k
	}
	return max(1, min(rows/per, maxWriteParts, runtime.GOMAXPROCS(0)))
}

// rangeWriter writes sorted live rows into data files (writeRows); one may
// write several ranges at once, each with write.
type rangeWriter struct {
	u        *upsert
	w        *tableWriter
	wfs      icebergio.WriteFileIO
	tbl      *table.Table
	fileSc   *iceberg.Schema
	part     *partitioner
	fields   []iceberg.NestedField
	defaults []any
	mu       sync.Mutex // names files (attemptFiles is not safe for concurrent use)
}

// writtenFile is a finished data file and the rows it holds, in order.
type writtenFile struct {
	df   iceberg.DataFile
	path string
	rows []*keyState
}

// name names a new data file of the attempt.
func (r *rangeWriter) name(partPath string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.files.data(r.tbl, partPath, "parquet")
}

// write writes live (sorted by key) into data files, one open file per
// partition, rolled at the target size; rows stay in key order within each
// file. It touches nothing shared but the states of its own rows.
func (r *rangeWriter) write(live []*keyState) (_ []writtenFile, err error) {
	fsch, err := newCommitFileSchema(r.fileSc)
	if err != nil {
		return nil, err
	}
	idLeaf, idCol, lineage := rowIDLeaf(fsch, r.fileSc.Fields())
	part, fields, tbl, wfs := r.part, r.fields, r.tbl, r.wfs
	// An open file's rows: in pending (partitioned tables), or, since an
	// unpartitioned table's rows all go to its one file in order, the run
	// live[first:first+rows] (a list per file, grown row by row, was 24 of
	// the 860 MB a 1M-row load allocated).
	partitioned := part.partitioned()
	type open struct {
		d       *dataFileWriter
		path    string
		values  map[int]any
		pending []*keyState
		first   int
		rows    int
	}
	files := map[string]*open{}
	var order []string
	var out []writtenFile
	defer func() { // on failure: no half-written file stays behind
		for _, o := range files {
			if o.d != nil {
				o.d.abort(wfs)
			}
		}
	}()
	flush := func(o *open) error {
		df, err := o.d.finish(wfs, o.path, tbl, o.values)
		if err != nil {
			return err
		}
		r.w.failpoint("after-data-file")
		rows := o.pending
		if !partitioned {
			rows = live[o.first : o.first+o.rows : o.first+o.rows]
		}
		out = append(out, writtenFile{df: df, path: o.path, rows: rows})
		o.d, o.pending, o.rows = nil, nil, 0
		return nil
	}
	// fileFor is the open file of partition key, started when needed.
	fileFor := func(values map[int]any, key string) (*open, error) {
		o := files[key]
		if o == nil {
			o = &open{values: values}
			files[key] = o
			order = append(order, key)
		}
		if o.d == nil {
			partPath := ""
			if part.partitioned() {
				partPath = part.path(values)
			}
			o.path = r.name(partPath)
			var err error
			if o.d, err = streamDataFile(fsch, wfs, o.path); err != nil {
				return nil, err
			}
		}
		return o, nil
	}
	added := func(o *open, at int, st *keyState) error {
		if partitioned {
			o.pending = append(o.pending, st)
		} else if o.rows++; o.rows == 1 {
			o.first = at
		}
		if o.d.size() >= r.w.s.cfg.TargetFileSize {
			return flush(o)
		}
		return nil
	}
	// Each table version's column of each field, found once (by name: a
	// scan of the columns per field and row before); its codec, if any.
	type versionCols struct {
		cols     []int // of each field, -1 when the version lacks it
		defaults []any // rowDefaults
	}
	colsOf := map[*schema.Table]versionCols{}
	codecs := map[*schema.Table]*rowCodec{}
	// The last row's table version and codec, and the unpartitioned file:
	// nearly every row of a commit has the same (two map lookups a row).
	var lastTable *schema.Table
	var lastCodec *rowCodec
	var one *open
	for at, st := range live {
		prefetchRows(live, at) // the rows ahead: a stream's are cache misses (prefetch.go)
		if st.direct != nil && !part.partitioned() {
			c := lastCodec
			if st.table != lastTable {
				var seen bool
				if c, seen = codecs[st.table]; !seen {
					if err := coversColumns(st.table, fields, identString(r.w.cfg.Ident)); err != nil {
						return nil, err
					}
					c = newRowCodec(st.table, fsch, rowDefaults(st.table, fields, r.defaults))
					codecs[st.table] = c
				}
				lastTable, lastCodec = st.table, c
			}
			if c != nil {
				o := one
				if o == nil || o.d == nil {
					if o, err = fileFor(nil, ""); err != nil {
						return nil, err
					}
					one = o
				}
				// A row the codec refuses takes the generic path, which
				// names what is wrong with it.
				if st.hasRowID && lineage {
					err = o.d.addAvroRowID(c, st.direct.info.After, idLeaf, idCol, st.rowID)
				} else {
					err = o.d.addAvro(c, st.direct.info.After)
				}
				if err == nil {
					if err := added(o, at, st); err != nil {
						return nil, err
					}
					continue
				}
			}
		}
		if st.row == nil {
			env, err := st.direct.envelope()
			if err != nil {
				return nil, badData(err)
			}
			st.row = env.After
		}
		vc := colsOf[st.table]
		if vc.cols == nil {
			if err := coversColumns(st.table, fields, identString(r.w.cfg.Ident)); err != nil {
				return nil, err
			}
			vc.cols = make([]int, len(fields))
			for fi, f := range fields {
				vc.cols[fi] = st.table.ColumnIndex(f.Name)
			}
			vc.defaults = rowDefaults(st.table, fields, r.defaults)
			colsOf[st.table] = vc
		}
		vals := make([]any, len(r.fileSc.Fields()))
		if st.hasRowID && lineage {
			vals[len(fields)] = st.rowID // _row_id follows the table's fields
		}
		for fi, ci := range vc.cols {
			if ci >= 0 {
				vals[fi] = st.row[ci]
			} else {
				vals[fi] = vc.defaults[fi]
			}
		}
		values, key, err := part.partition(vals)
		if err != nil {
			return nil, badData(fmt.Errorf("iceberg: %s: %w", st.table.QualifiedName(), err))
		}
		o, err := fileFor(values, key)
		if err != nil {
			return nil, err
		}
		if err := o.d.add(vals); err != nil {
			return nil, fmt.Errorf("iceberg: %s: %w", st.table.QualifiedName(), err)
		}
		if err := added(o, at, st); err != nil {
			return nil, err
		}
	}
	for _, key := range order {
		if o := files[key]; o.d != nil {
			if err := flush(o); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// coversColumns checks that the table's fields hold every column of row
// version t, whose values would otherwise be dropped without a word. evolve
// adds each buffered version's columns before rows are written, so a
// column missing here is a bug: the commit fails, naming it.
func coversColumns(t *schema.Table, fields []iceberg.NestedField, table string) error {
	for _, c := range t.Columns {
		if !slices.ContainsFunc(fields, func(f iceberg.NestedField) bool { return f.Name == c.Name }) {
			return fmt.Errorf("iceberg: column %q of %s is not in table %s, whose schema should have been evolved before the rows were written: "+
				"refusing to drop its values (a bug: report it; restart cdcd to evolve the table again)", c.Name, t.QualifiedName(), table)
		}
	}
	return nil
}

// compareKeys orders encoded keys; encodeKey is order-preserving for
// integers and byte strings, which is what sorting data files by key needs.
func compareKeys(a, b []byte) int { return bytes.Compare(a, b) }
