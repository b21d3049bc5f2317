package reconcile

import (
	"context"
	"sort"

	icebergtypes "github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// mirrorRow is one row of the mirror in canonical texts.
type mirrorRow struct {
	t     *Table
	idx   []int // the compared columns' indexes among the mirror's
	buf   []byte
	ends  []int // each column's text ends at buf[ends[i]]
	vals  []any // the row's values (aliases the scan's; nil when raw)
	texts []string
	// raw are the row's values as stored (aliases the scan's; nil when
	// vals), types the mirror's types of the columns.
	raw   []parquet.Value
	types []icebergtypes.Type
	// hash is the row's hash when t.ColumnHash (rowhash.go), hashers
	// its columns'; isKey marks the key columns.
	hash    uint64
	hashers []*colHasher
	isKey   []bool
}

func newMirrorRow(t *Table) *mirrorRow {
	mr := &mirrorRow{t: t, idx: make([]int, len(t.Columns)), ends: make([]int, len(t.Columns)), isKey: make([]bool, len(t.Columns))}
	for i, c := range t.Columns {
		mr.idx[i] = c.Mirror
		if t.ColumnHash {
			mr.hashers = append(mr.hashers, newColHasher(c, i))
		}
	}
	for _, ci := range t.Key {
		mr.isKey[ci] = true
	}
	return mr
}

// set renders vals (the scan's values of t's columns) as the row's text:
// the columns' texts joined by ",". With t.ColumnHash it also hashes the
// row.
func (mr *mirrorRow) set(vals []any) error {
	mr.buf, mr.vals, mr.raw = mr.buf[:0], vals, nil
	var err error
	var x, h uint64
	for i, c := range mr.t.Columns {
		if i > 0 {
			mr.buf = append(mr.buf, ',')
		}
		if mr.buf, err = appendCanon(mr.buf, c, vals[i]); err != nil {
			return err
		}
		mr.ends[i] = len(mr.buf)
		if mr.t.ColumnHash {
			if h, err = mr.hashers[i].value(vals[i]); err != nil {
				return err
			}
			x ^= h
		}
	}
	if mr.t.ColumnHash {
		mr.hash = rowHash(x)
	}
	return nil
}

// setRaw is set from the values as the data file stores them. With
// t.ColumnHash only the key columns' texts are rendered (the others are
// empty): the row's hash needs none.
func (mr *mirrorRow) setRaw(vals []parquet.Value) error {
	mr.buf, mr.vals, mr.raw = mr.buf[:0], nil, vals
	var err error
	var x, h uint64
	for i, c := range mr.t.Columns {
		if i > 0 {
			mr.buf = append(mr.buf, ',')
		}
		if mr.t.ColumnHash {
			if h, err = mr.hashers[i].raw(mr.types[i], vals[i]); err != nil {
				return err
			}
			x ^= h
			if !mr.isKey[i] {
				mr.ends[i] = len(mr.buf)
				continue
			}
		}
		if mr.buf, err = appendRaw(mr.buf, c, mr.types[i], vals[i]); err != nil {
			return err
		}
		mr.ends[i] = len(mr.buf)
	}
	if mr.t.ColumnHash {
		mr.hash = rowHash(x)
	}
	return nil
}

// rowHash is the row's hash as the source computes it: its columns' mixed
// (t.ColumnHash), or src's of its text.
func (mr *mirrorRow) rowHash(src Source) uint64 {
	if mr.t.ColumnHash {
		return mr.hash
	}
	return src.RowHash(mr.buf)
}

// keyInt is the key of a table keyed by one integer column (intKey).
func (mr *mirrorRow) keyInt() (int64, bool) {
	i := mr.t.Key[0]
	if mr.raw == nil {
		return keyInt(mr.vals[i])
	}
	switch v := mr.raw[i]; {
	case v.IsNull():
	case v.Kind() == parquet.Int64:
		return v.Int64(), true
	case v.Kind() == parquet.Int32:
		return int64(v.Int32()), true
	}
	return 0, false
}

// col is column i's text.
func (mr *mirrorRow) col(i int) []byte {
	start := 0
	if i > 0 {
		start = mr.ends[i-1] + 1
	}
	return mr.buf[start:mr.ends[i]]
}

// key is the row's key.
func (mr *mirrorRow) key() Key {
	k := make(Key, len(mr.t.Key))
	for i, ci := range mr.t.Key {
		k[i] = string(mr.col(ci))
	}
	return k
}

// scan reads every live row of the mirror into mr and calls fn.
func (mr *mirrorRow) scan(ctx context.Context, live *iceberg.LiveSnapshot, fn func(*mirrorRow) error) error {
	return live.Scan(ctx, mr.idx, func(vals []any) error {
		if err := mr.set(vals); err != nil {
			return err
		}
		return fn(mr)
	})
}

// scanTexts is scan for a reader of the rows' keys and hashes only (not
// vals, nor the texts of other columns when t.ColumnHash):
// values are rendered as the data files store them (ScanRaw), without
// boxing each one.
func (mr *mirrorRow) scanTexts(ctx context.Context, live *iceberg.LiveSnapshot, fn func(*mirrorRow) error) error {
	mr.types = make([]icebergtypes.Type, len(mr.idx))
	for i, j := range mr.idx {
		mr.types[i] = live.Fields[j].Type
	}
	return live.ScanRaw(ctx, mr.idx, func(vals []parquet.Value) error {
		if err := mr.setRaw(vals); err != nil {
			return err
		}
		return fn(mr)
	}, func(vals []any) error {
		if err := mr.set(vals); err != nil {
			return err
		}
		return fn(mr)
	})
}

// settleSegment compares a segment's blocks with the mirror (the rows
// read ahead, or a read of the mirror now) and reads the blocks that
// differ (or could not be compared) key by key.
func (tr *tableRun) settleSegment(ctx context.Context, seg *segment, ahead *aheadRows) error {
	var live *iceberg.LiveSnapshot
	if ahead != nil {
		live = ahead.live
	}
	st, err := tr.settle(ctx, seg.reads, live)
	if err != nil {
		return err
	}
	n := len(seg.blocks)
	bad := make([]bool, n)
	for i := range seg.blocks {
		bad[i] = st.u.all || st.racy[seg.readOf[i]]
	}
	for _, k := range st.u.keys {
		if i, ok := seg.blockOf(tr.t, k); ok {
			bad[i] = true
		}
	}
	type sum struct {
		rows int64
		sum  uint64
	}
	sums := make([]sum, n)
	if ahead != nil {
		ahead.sum(tr.t, seg, func(i int, h uint64) {
			sums[i].rows++
			sums[i].sum += h
		})
	} else {
		mr := newMirrorRow(tr.t)
		err = mr.scanTexts(ctx, st.live, func(mr *mirrorRow) error {
			i, ok := seg.blockOf(tr.t, mr.key())
			if ok {
				sums[i].rows++
				sums[i].sum += mr.rowHash(tr.r.src)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	var drill []Range
	var drillRows int64
	prev := false // the block before was drilled
	for i, b := range seg.blocks {
		if !bad[i] && sums[i].rows == b.Rows && sums[i].sum == b.Sum {
			tr.rep.Rows += b.Rows
			tr.rep.Ranges++
			prev = false
			continue
		}
		lo, loC := seg.lowerLit, seg.lower
		if i > 0 {
			lo, loC = seg.blocks[i-1].LastLit, seg.blocks[i-1].Last
		}
		// Consecutive blocks are read together, up to a chunk's rows.
		if k := len(drill) - 1; prev && drillRows+b.Rows <= int64(tr.r.cfg.ChunkRows) {
			drill[k].Hi, drill[k].HiC = b.LastLit, b.Last
			drillRows += b.Rows
			continue
		}
		drill = append(drill, Range{Lo: lo, Hi: b.LastLit, LoC: loC, HiC: b.Last})
		drillRows, prev = b.Rows, true
	}
	tr.rep.Drilled += len(drill)
	if len(drill) == 0 {
		return nil
	}
	return tr.drill(ctx, drill, nil)
}

// blockOf finds the block holding key k: the first whose Last is at or
// after k; false when k is outside the segment.
func (seg *segment) blockOf(t *Table, k Key) (int, bool) {
	if seg.lower != nil && t.compareKeys(k, seg.lower) <= 0 {
		return 0, false
	}
	n := len(seg.blocks)
	i := sort.Search(n, func(i int) bool {
		l := seg.blocks[i].Last
		return l == nil || t.compareKeys(k, l) <= 0
	})
	return i, i < n
}
