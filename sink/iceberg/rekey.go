package iceberg

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// A source primary key redefined (ALTER TABLE … DROP CONSTRAINT …, ADD
// PRIMARY KEY (id, r)) changes what a row is: rows the old key merged may
// now coexist at the source, and an upsert mirror still keyed by the old
// identifier fields would merge them — or, for a key of fewer columns,
// keep a row's old version beside its new one. No change in the stream
// can be applied under the old key once the key is another, so the table
// pauses at the first such change, naming the re-snapshot. The
// re-snapshot's reset marker then empties the table and sets the new key
// as its identifier fields (rekeyTruncate); the sink skips to that marker
// (every change before it is superseded by the re-snapshot's rows).

// errKeyRedefined: the buffered changes carry a primary key other than
// the table's identifier fields, and a reset marker follows the committed
// offsets in every partition: the table's loop restarts at once and
// resumes at the markers (the partitions are marked untrusted from the
// committed offsets on).
// Class errReload: the restart is at once.
var errKeyRedefined = &reloadError{msg: "iceberg: the source's primary key was redefined; resuming at the re-snapshot's reset markers"}

// keyNames are the names of t's primary-key columns, sorted.
func keyNames(t *schema.Table) []string {
	out := make([]string, len(t.Key))
	for i, k := range t.Key {
		out[i] = t.Columns[k].Name
	}
	slices.Sort(out)
	return out
}

// fieldNames are the names of fields, sorted.
func fieldNames(fields []iceberg.NestedField) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		out[i] = f.Name
	}
	slices.Sort(out)
	return out
}

// checkKey, in upsert mode, requires every buffered table version's
// primary key to be the table's identifier fields: otherwise it pauses
// the table naming the re-snapshot, or, when the re-snapshot's reset
// markers already follow the committed offsets, returns errKeyRedefined
// with the partitions set to skip to them.
func (w *tableWriter) checkKey(ctx context.Context) error {
	if w.up == nil || w.tbl == nil || w.mode().name() != ModeUpsert {
		return nil
	}
	have := fieldNames(w.up.keys)
	var t, last *schema.Table
	for i := range w.buf {
		// Changes share their table version: compare each version once,
		// not each change (a commit buffers tens of thousands).
		bt := w.buf[i].table
		if bt == nil || bt == last || len(bt.Key) == 0 {
			continue
		}
		last = bt
		if !slices.Equal(keyNames(bt), have) {
			t = bt
			break
		}
	}
	if t == nil {
		return nil
	}
	name := identString(w.cfg.Ident)
	info, err := w.s.lg.DescribeTopic(ctx, w.cfg.Topic)
	if err != nil {
		return err
	}
	at, err := w.resetMarkers(ctx, info, func(p int) int64 { return w.committed[p] })
	if err != nil {
		return err
	}
	if at != nil {
		for p := range w.committed {
			w.s.untrusted.set(w.cfg.Topic, int32(p), w.committed[p])
		}
		w.logger.Warn("the source's primary key was redefined; a re-snapshot's reset markers follow: resuming there, where the table is emptied and keyed by the new primary key",
			"source_table", t.QualifiedName(), "key", strings.Join(keyNames(t), ","), "identifier_fields", strings.Join(have, ","),
			"markers", encodeOffsets(at))
		return errKeyRedefined
	}
	return &PauseError{Table: name,
		What: fmt.Sprintf("the primary key of %s is now (%s) but table %s is keyed by (%s): applied under the old key, rows the new key tells apart would merge (or a row's old version stay beside its new one)",
			t.QualifiedName(), strings.Join(keyNames(t), ", "), name, strings.Join(have, ", ")),
		Fix: fmt.Sprintf("re-snapshot it: cdcd snapshot -c FILE --replace %s (its reset marker empties the table and keys it by the new primary key; the changes held until then are superseded by the re-snapshot's rows)", t.QualifiedName())}
}

// rekey stages, in tx, what a truncate of version shape must change for
// shape's primary key to be the table's: the key columns required (absent
// ones added), the identifier fields and the sort order. It reports
// whether the key changed. The table is emptied in the same commit, so
// making columns required is safe.
func (w *tableWriter) rekey(tx *table.Transaction, shape *schema.Table) (bool, error) {
	if shape == nil || len(shape.Key) == 0 || w.up == nil || w.mode().name() != ModeUpsert || slices.Equal(keyNames(shape), fieldNames(w.up.keys)) {
		return false, nil
	}
	name := identString(w.cfg.Ident)
	sc := w.tbl.Schema()
	us := tx.UpdateSchema(true, true)
	paths := make([][]string, 0, len(shape.Key))
	for _, k := range shape.Key {
		c := shape.Columns[k]
		paths = append(paths, []string{c.Name})
		f, ok := sc.FindFieldByName(c.Name)
		if !ok {
			typ, err := icebergType(c)
			if err != nil {
				return false, refuse(tableShapeFix, err)
			}
			us = us.AddColumn([]string{c.Name}, typ, c.SourceType, true, nil)
			continue
		}
		if !f.Required {
			us = us.UpdateColumn([]string{c.Name}, table.ColumnUpdate{Required: iceberg.Optional[bool]{Valid: true, Val: true}})
		}
	}
	us = us.SetIdentifierField(paths)
	if err := us.Commit(); err != nil {
		return false, fmt.Errorf("iceberg: key %s by its new primary key: %w", name, err)
	}
	staged, err := tx.StagedTable()
	if err != nil {
		return false, fmt.Errorf("iceberg: key %s by its new primary key: %w", name, err)
	}
	nsc := staged.Schema()
	fields := make([]table.SortField, 0, len(paths))
	for _, p := range paths {
		f, ok := nsc.FindFieldByName(p[0])
		if !ok {
			return false, fmt.Errorf("iceberg: key %s by its new primary key: column %q missing after the schema update", name, p[0])
		}
		fields = append(fields, table.SortField{SourceIDs: []int{f.ID}, Transform: iceberg.IdentityTransform{}, Direction: table.SortASC, NullOrder: table.NullsFirst})
	}
	order, err := table.NewSortOrder(1, fields)
	if err != nil {
		return false, err
	}
	if err := tx.ReplaceSortOrder(order); err != nil {
		return false, fmt.Errorf("iceberg: sort order of %s: %w", name, err)
	}
	return true, nil
}
