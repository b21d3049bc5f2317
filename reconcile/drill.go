package reconcile

import (
	"context"
	"sort"
)

// mirrorKey is a key found in the mirror while drilling.
type mirrorKey struct {
	key   Key
	lit   Key
	cols  []uint64
	rows  int      // > 1: the key is live more than once
	shown []string // display texts of the columns that differ from the source's
}

// drill reads ranges key by key in one source read, and compares each key
// with the mirror read after the log reached that read.
func (tr *tableRun) drill(ctx context.Context, ranges []Range, _ []retryKey) error {
	t := tr.t
	rows, read, err := tr.r.src.Rows(ctx, t, ranges)
	if err != nil {
		return err
	}
	st, err := tr.settle(ctx, []*Read{read}, nil)
	if err != nil {
		return err
	}
	src := make(map[string]*KeyRow, len(rows))
	for i := range rows {
		src[rows[i].Key.id()] = &rows[i]
	}
	eq := map[string]bool{}
	var spans []Range // key ranges, in key order
	for _, rg := range ranges {
		if rg.Eq != nil {
			eq[rg.EqC.id()] = true
		} else {
			spans = append(spans, Range{LoC: rg.LoC, HiC: rg.HiC})
		}
	}
	inSpan := func(k Key) bool {
		i := sort.Search(len(spans), func(i int) bool {
			return spans[i].HiC == nil || t.compareKeys(k, spans[i].HiC) <= 0
		})
		return i < len(spans) && (spans[i].LoC == nil || t.compareKeys(k, spans[i].LoC) > 0)
	}
	found := map[string]*mirrorKey{}
	mr := newMirrorRow(t)
	err = mr.scan(ctx, st.live, func(mr *mirrorRow) error {
		k := mr.key()
		id := k.id()
		sr := src[id]
		if sr == nil && !eq[id] && !inSpan(k) {
			return nil
		}
		if m := found[id]; m != nil {
			m.rows++
			return nil
		}
		m := &mirrorKey{key: k, rows: 1, cols: make([]uint64, len(t.Columns))}
		for i := range t.Columns {
			m.cols[i] = tr.r.src.RowHash(mr.col(i))
			if sr != nil && sr.Cols[i] != m.cols[i] {
				m.shown = append(m.shown, displayValue(t.Columns[i], mr.vals[i]))
			}
		}
		if sr != nil {
			m.lit = sr.Lit
		} else {
			m.lit = tr.litOf(k)
		}
		found[id] = m
		return nil
	})
	if err != nil {
		return err
	}
	settledKey := func(k Key) bool { return !st.racy[0] && !st.u.has(k) }
	var differ []diffRow
	for id, sr := range src {
		m := found[id]
		switch {
		case !settledKey(sr.Key):
			tr.retry = append(tr.retry, retryKey{key: sr.Key, lit: sr.Lit})
		case m == nil:
			tr.rep.addMissing(t, sr.Lit)
			tr.differ(sr.Key, sr.Lit, false)
		default:
			var cols []int
			for i := range t.Columns {
				if sr.Cols[i] != m.cols[i] {
					cols = append(cols, i)
				}
			}
			if len(cols) > 0 {
				differ = append(differ, diffRow{key: sr.Key, lit: sr.Lit, cols: cols, shown: m.shown})
			} else {
				tr.rep.Rows++
			}
			if m.rows > 1 {
				tr.rep.addDuplicate(t, sr.Lit, m.rows)
				tr.differ(sr.Key, sr.Lit, true)
			}
		}
	}
	for id, m := range found {
		if src[id] != nil {
			continue
		}
		k := m.key
		switch {
		case !settledKey(k):
			tr.retry = append(tr.retry, retryKey{key: k, lit: m.lit})
		case !t.Ordered && !eq[id]:
			// Found by cdcd's order, which is not the database's: the
			// source may hold it in another range. Read it by its key.
			tr.retry = append(tr.retry, retryKey{key: k, lit: m.lit})
		default:
			tr.rep.addExtra(t, m.lit)
			if m.rows > 1 {
				tr.rep.addDuplicate(t, m.lit, m.rows)
			}
			tr.differ(k, m.lit, true)
		}
	}
	return tr.reportDiffer(ctx, differ)
}

// diffRow is a key whose values differ.
type diffRow struct {
	key   Key
	lit   Key
	cols  []int
	shown []string
}

// reportDiffer adds keys whose values differ, with the source's values of
// the listed ones read now (they may have changed since).
func (tr *tableRun) reportDiffer(ctx context.Context, rows []diffRow) error {
	t := tr.t
	var lits []Key
	colSet := map[string]bool{}
	var cols []string
	for i, d := range rows {
		if tr.rep.DifferCount+i >= tr.rep.listed {
			break
		}
		lits = append(lits, d.lit)
		for _, c := range d.cols {
			if name := t.Columns[c].Name; !colSet[name] {
				colSet[name] = true
				cols = append(cols, name)
			}
		}
	}
	vals, err := tr.r.src.Values(ctx, t, lits, cols)
	if err != nil {
		tr.r.logger.Warn("reconcile: the source's values of differing rows could not be read for the report", "table", t.Name, "err", err)
	}
	for _, d := range rows {
		var diffs []ColumnDiff
		cur := vals[d.key.id()]
		for j, c := range d.cols {
			cd := ColumnDiff{Column: t.Columns[c].Name}
			if j < len(d.shown) {
				cd.Iceberg = d.shown[j]
			}
			if cur != nil {
				for k, name := range cols {
					if name == cd.Column && k < len(cur) {
						cd.Source = cur[k]
					}
				}
			}
			diffs = append(diffs, cd)
		}
		tr.rep.addDiffer(t, d.lit, diffs)
		tr.differ(d.key, d.lit, false)
	}
	return nil
}
