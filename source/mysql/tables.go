package mysql

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// tableMap records which table a table id names, and for a captured
// table the version of its shape the following row events have. The shape
// comes from the table map itself (binlog_row_metadata=FULL: names, types,
// signedness, character sets, labels, key), so a reader far behind still
// decodes each row with the shape it was written with; the information
// schema adds what a table map lacks (the declared type's text, MariaDB's
// JSON columns) where the two agree.
func (s *streamer) tableMap(ctx context.Context, tm *replication.TableMapEvent) error {
	if v := s.byID[tm.TableID]; v != nil && sameTableMap(v.tm, tm) {
		return nil
	}
	qn := string(tm.Schema) + "." + string(tm.Table)
	desc := s.captured[qn]
	if desc == nil {
		if s.fk[qn] != nil {
			s.byID[tm.TableID] = s.watchedVersion(qn, tm) // fkcascade.go
			return nil
		}
		s.byID[tm.TableID] = &tableVersion{tm: tm, qn: qn}
		return nil
	}
	v, err := buildVersion(desc, tm, s.colls)
	var te *TableError
	if errors.As(err, &te) && s.stoppable(qn) {
		t := desc.table
		if old := s.latest[qn]; old != nil {
			t = old.table
		}
		s.byID[tm.TableID] = &tableVersion{tm: tm, captured: true, qn: qn, table: t, shapeFault: shapeFault(te)}
		return nil
	}
	if err != nil {
		return err
	}
	if err := s.reReadUncarried(ctx, desc, s.latest[qn], v); err != nil {
		return err
	}
	v.table.Dropped = s.r.dropped(qn, func(c string) bool { return v.table.ColumnIndex(c) >= 0 })
	if old := s.latest[qn]; old != nil && old.table.Equal(v.table) {
		v.table = old.table // changes share the shape's pointer until it changes
	} else if old != nil {
		s.r.logger.Info("table changed shape", "table", qn, "shape", v.table.String())
	}
	s.byID[tm.TableID] = v
	s.latest[qn] = v
	return nil
}

// sameTableMap reports whether two table maps describe the same shape.
func sameTableMap(a, b *replication.TableMapEvent) bool {
	return a.ColumnCount == b.ColumnCount && bytes.Equal(a.ColumnType, b.ColumnType) &&
		slices.Equal(a.ColumnMeta, b.ColumnMeta) && bytes.Equal(a.NullBitmap, b.NullBitmap) &&
		bytes.Equal(a.SignednessBitmap, b.SignednessBitmap) && slices.Equal(a.DefaultCharset, b.DefaultCharset) &&
		slices.Equal(a.ColumnCharset, b.ColumnCharset) && slices.Equal(a.PrimaryKey, b.PrimaryKey) &&
		slices.EqualFunc(a.ColumnName, b.ColumnName, bytes.Equal) &&
		slices.EqualFunc(a.EnumStrValue, b.EnumStrValue, func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) }) &&
		slices.EqualFunc(a.SetStrValue, b.SetStrValue, func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) })
}

// buildVersion maps a captured table's table map into a table version.
func buildVersion(desc *tableDesc, tm *replication.TableMapEvent, colls collations) (*tableVersion, error) {
	qn := desc.qualified()
	v := &tableVersion{tm: tm, captured: true, qn: qn, table: &schema.Table{Namespace: desc.db, Name: desc.name}}
	for i := 0; i < int(tm.ColumnCount); i++ {
		t, err := fromTableMap(tm, i, colls)
		if errors.Is(err, errNoMetadata) {
			return nil, &TableError{Table: qn, Err: err}
		}
		if err == nil {
			for _, it := range desc.cols {
				if sameType(t, it) {
					it.Nullable, it.binaryJSON = t.Nullable, t.binaryJSON
					t = it
					break
				}
			}
			var col schema.Column
			if col, err = t.column(); err == nil {
				v.cols = append(v.cols, t)
				v.table.Columns = append(v.table.Columns, col)
				continue
			}
		}
		return nil, &TableError{Table: qn, Column: t.Name, Type: t.SourceType,
			Err: fmt.Errorf("%w; change the column's type or exclude the table", err)}
	}
	if len(tm.PrimaryKey) == 0 {
		return nil, &TableError{Table: qn, Err: errors.New("the binlog shows no primary key (it was dropped?): every captured " +
			"table needs one (ALTER TABLE … ADD PRIMARY KEY (…)), or remove the table from source.mysql.tables")}
	}
	for _, k := range tm.PrimaryKey {
		if int(k) >= len(v.cols) {
			return nil, &TableError{Table: qn, Err: fmt.Errorf("the binlog's primary key names column %d of %d", k, len(v.cols))}
		}
		v.table.Key = append(v.table.Key, int(k))
		v.table.Columns[k].Nullable = false
	}
	return v, nil
}

// decodable are the row event kinds rows decodes.
var decodable = []replication.EnumRowsEventType{replication.EnumRowsEventTypeInsert, replication.EnumRowsEventTypeDelete,
	replication.EnumRowsEventTypeUpdate}

// rows turns a row event into changes; every row, of captured tables or
// not, takes an index in the transaction, so the positions of a
// transaction's changes do not depend on which tables are captured.
func (s *streamer) rows(ctx context.Context, h *replication.EventHeader, e *replication.RowsEvent) error {
	v := s.byID[e.TableID]
	if v == nil {
		return fmt.Errorf("mysql: a row event for table id %d without its table map", e.TableID)
	}
	if s.fk[v.qn] != nil && s.tx.active {
		if err := s.cascades(h, e, v); err != nil { // fkcascade.go
			return err
		}
	}
	imgs, err := s.images(h, e, v)
	if err != nil {
		return err
	}
	typ := e.Type()
	if !v.captured {
		return s.skipRows(imgs, typ)
	}
	if s.catchUpFile != "" {
		s.catchUpData += int64(h.EventSize)
	}
	if !s.tx.active {
		return fmt.Errorf("mysql: a row event for %s outside a transaction (no GTID event before it)", v.qn)
	}
	s.rowsEv, s.row = h, 0
	stop := v.shapeFault
	if stop == nil && imgs.partial() {
		if !s.stoppable(v.qn) {
			return &TableError{Table: v.qn, Err: errPartialImage}
		}
		stop = imageFault(v.qn)
	}
	if stop == nil && !slices.Contains(decodable, typ) && s.stoppable(v.qn) {
		stop = eventFault(v.qn, h.EventType)
	}
	if stop != nil {
		s.stopTable(v.qn, v.table, stop)
		return s.skipRows(imgs, typ)
	}
	switch typ {
	case replication.EnumRowsEventTypeInsert, replication.EnumRowsEventTypeDelete:
		op := source.OpCreate
		if typ == replication.EnumRowsEventTypeDelete {
			op = source.OpDelete
		}
		for imgs.more() {
			row, f, err := imgs.next(&s.arena)
			if err != nil {
				return err
			}
			if op == source.OpCreate {
				err = s.change(ctx, v, op, nil, row, f)
			} else {
				err = s.change(ctx, v, op, row, nil, f)
			}
			if err != nil {
				return err
			}
		}
	case replication.EnumRowsEventTypeUpdate:
		for imgs.more() {
			before, f1, err := imgs.next(&s.arena)
			if err != nil {
				return err
			}
			after, f2, err := imgs.next(&s.arena)
			if err != nil {
				return err
			}
			f := cmp.Or(f2, f1)
			if keysDiffer(v.table, before, after) {
				// A key change: a delete of the old key, an insert of the new.
				if err := s.change(ctx, v, source.OpDelete, before, nil, f1); err != nil {
					return err
				}
				if err := s.change(ctx, v, source.OpCreate, nil, after, f2); err != nil {
					return err
				}
				continue
			}
			if err := s.change(ctx, v, source.OpUpdate, before, after, f); err != nil {
				return err
			}
		}
	default:
		return &TableError{Table: v.qn, Err: fmt.Errorf("row event %s is not supported (partial JSON updates?): "+
			"SET GLOBAL binlog_row_value_options = ''", h.EventType)}
	}
	return nil
}

// skipRows gives the rows of a row event that are not emitted their
// indexes in the transaction.
func (s *streamer) skipRows(imgs *rowImages, typ replication.EnumRowsEventType) error {
	n, err := imgs.count()
	if err != nil {
		return err
	}
	if typ == replication.EnumRowsEventTypeUpdate {
		n /= 2
	}
	s.tx.idx += uint32(n)
	return nil
}

// rowImages are the row images of one row event, as go-mysql decoded them
// or as rowsHook left them (image.go).
type rowImages struct {
	v   *tableVersion
	raw [][]any
	img *imageReader
	e   *replication.RowsEvent
	i   int
	// fields is the streamer's, reused for every image; vals is its
	// slab of the images' values (fromImage).
	fields []field
	vals   *pgdecode.Slab
}

// images returns the row images of e, a row event of table v.
func (s *streamer) images(h *replication.EventHeader, e *replication.RowsEvent, v *tableVersion) (*rowImages, error) {
	body, ok, err := bodyOf(h, e)
	if err != nil || !ok {
		return &rowImages{v: v, raw: e.Rows, e: e}, err
	}
	if n := len(e.Table.ColumnType); cap(s.fields) < n {
		s.fields = make([]field, n)
	}
	return &rowImages{v: v, img: newImageReader(e, body), e: e, fields: s.fields[:len(e.Table.ColumnType)], vals: &s.vals}, nil
}

func (r *rowImages) more() bool {
	if r.img != nil {
		return r.img.more()
	}
	return r.i < len(r.raw)
}

// partial reports whether the images lack columns (binlog_row_image is
// not FULL).
func (r *rowImages) partial() bool {
	if r.img == nil {
		return slices.ContainsFunc(r.e.SkippedColumns, func(skips []int) bool { return len(skips) > 0 })
	}
	n := len(r.e.Table.ColumnType)
	for _, bm := range [][]byte{r.e.ColumnBitmap1, r.e.ColumnBitmap2} {
		for i := 0; bm != nil && i < n; i++ {
			if i/8 >= len(bm) || !bitSet(bm, i) {
				return true
			}
		}
	}
	return false
}

// count is the number of images.
func (r *rowImages) count() (int, error) {
	if r.img == nil {
		return len(r.raw), nil
	}
	n := 0
	for r.img.more() {
		if _, err := r.img.next(r.fields); err != nil {
			return 0, err
		}
		n++
	}
	return n, nil
}

// next decodes the next image.
func (r *rowImages) next(slab *rowArena) ([]any, *source.Fault, error) {
	if r.img == nil {
		r.i++
		return r.v.decodeRow(r.raw[r.i-1], slab)
	}
	row := slab.next(len(r.v.cols))
	f, err := r.img.decode(r.v, row, r.vals)
	if err != nil {
		return nil, nil, fmt.Errorf("mysql: %s: %w", r.v.qn, err)
	}
	return row, f, nil
}

func (s *streamer) change(ctx context.Context, v *tableVersion, op source.Op, before, after []any, f *source.Fault) error {
	if s.inc.signal(v, op, after) {
		s.tx.idx++
		return nil
	}
	if wm, rows := s.inc.watermark(v, after, Position(s.tx.ord, s.tx.idx)); wm {
		s.tx.idx++
		return s.chunk(ctx, rows)
	}
	s.add(source.Change{Table: v.table, Op: op, Before: before, After: after,
		Pos: s.position(), TxID: s.tx.ord, CommitTime: s.tx.ts, Fault: f, Binlog: s.place()})
	s.tx.idx++
	return nil
}

// position is Position(s.tx.ord, s.tx.idx) cut from a slab of slabRows
// positions, one allocation for that many changes instead of one each.
// Positions are never written again (the Emitter keeps them: a kept one
// keeps its slab, 3 KB, alive).
func (s *streamer) position() source.Position {
	if cap(s.posSlab)-len(s.posSlab) < PositionLen {
		s.posSlab = make([]byte, 0, PositionLen*slabRows)
	}
	start := len(s.posSlab)
	s.posSlab = binary.BigEndian.AppendUint64(s.posSlab, s.tx.ord)
	s.posSlab = binary.BigEndian.AppendUint32(s.posSlab, s.tx.idx)
	return source.Position(s.posSlab[start:len(s.posSlab):len(s.posSlab)])
}

// place is where the next row of the row event being read lies; cut from
// s.places, which is used again with the rows (releaseRows).
func (s *streamer) place() *source.BinlogPlace {
	if s.placed == len(s.places) {
		if s.placed == cap(s.places) {
			s.places = make([]source.BinlogPlace, 0, max(2*cap(s.places), slabRows)) // the old one stays with its batch
			s.placed = 0
		}
		s.places = s.places[:s.placed+1]
	}
	p := &s.places[s.placed]
	s.placed++
	*p = source.BinlogPlace{File: s.file, Row: s.row, GTID: s.tx.text}
	if h := s.rowsEv; h != nil {
		p.Pos, p.ServerID = uint64(h.LogPos)-uint64(h.EventSize), h.ServerID
	}
	s.row++
	return p
}

// decodeRow converts a row image into table-model values. A value cdcd
// cannot carry (a zero date in a key column, text that is not UTF-8)
// does not stop the reader: it is nil in the row and the returned fault
// names it, so the Emitter stops that table alone.
func (v *tableVersion) decodeRow(raw []any, slab *rowArena) ([]any, *source.Fault, error) {
	if len(raw) != len(v.cols) {
		return nil, nil, fmt.Errorf("mysql: %s: a row of %d columns, the table map has %d", v.qn, len(raw), len(v.cols))
	}
	row := slab.next(len(raw))
	var fault *source.Fault
	for i := range raw {
		val, err := fromBinlog(&v.cols[i], raw[i])
		if err == nil && val == nil && raw[i] != nil && !v.table.Columns[i].Nullable {
			err = errNullKey
		}
		if err != nil {
			if fault == nil {
				fault = v.fault(i, raw[i], err)
			}
			val = nil
		}
		row[i] = val
	}
	return row, fault, nil
}

// errNullKey: a value cdcd maps to NULL in a column that cannot be NULL.
var errNullKey = errors.New("a value that cdcd maps to NULL (a zero date) in a column that cannot be NULL (a primary-key column)")

// fault describes a value of column i that cannot be carried.
func (v *tableVersion) fault(i int, raw any, err error) *source.Fault {
	c := &v.cols[i]
	value := source.Printable(fmt.Sprint(raw))
	if b, ok := raw.([]byte); ok {
		value = source.Printable(string(b))
	}
	hint := ""
	if c.Base == "date" || c.Base == "datetime" || c.Base == "timestamp" {
		hint = "give the row a real date"
	}
	return &source.Fault{
		Reason: fmt.Sprintf("table %s: column %q (%s) holds %s, which cdcd cannot carry exactly: %v", v.qn, c.Name, c.SourceType, value, err),
		Column: c.Name, Value: value, Fix: source.ValueFix(v.qn, hint),
	}
}

func keysDiffer(t *schema.Table, before, after []any) bool {
	for _, k := range t.Key {
		if !sameValue(before[k], after[k]) {
			return true
		}
	}
	return false
}

func sameValue(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && bytes.Equal(ab, bb)
	}
	return a == b
}
