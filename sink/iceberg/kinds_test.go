package iceberg

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestIntervalAndListKinds: intervals become ISO 8601 text and lists Iceberg
// lists (nested ones too, NULL elements kept); a table with them is
// accepted by the catalog, and a NaN in a decimal column is an error naming
// what to do, never a 0 or a NULL.
func TestIntervalAndListKinds(t *testing.T) {
	tbl := &schema.Table{Namespace: "public", Name: "k", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64},
		{Name: "iv", Kind: schema.Interval, Nullable: true},
		{Name: "ints", Kind: schema.List, Nullable: true, Elem: &schema.Column{Kind: schema.Int32, Nullable: true}},
		{Name: "grid", Kind: schema.List, Nullable: true, Elem: &schema.Column{Kind: schema.List, Elem: &schema.Column{Kind: schema.String, Nullable: true}}},
		{Name: "dec", Kind: schema.Decimal, Precision: 10, Scale: 2, Nullable: true},
	}, Key: []int{0}}
	sc, err := changelogSchema(tbl)
	if err != nil {
		t.Fatal(err)
	}
	asc, err := table.SchemaToArrowSchema(sc, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	rb := array.NewRecordBuilder(memory.DefaultAllocator, asc)
	defer rb.Release()
	row := []any{int64(1), schema.IntervalValue{Months: 14, Days: -1, Micros: 1_500_000},
		[]any{int64(1), nil, int64(3)}, []any{[]any{"a", nil}, []any{"c", "d"}}, "1.25"}
	for i, c := range tbl.Columns {
		if err := appendValue(rb.Field(i), c, row[i]); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
	for i := len(tbl.Columns); i < len(asc.Fields()); i++ {
		rb.Field(i).AppendNull() // the changelog's metadata columns
	}
	rec := rb.NewRecordBatch()
	defer rec.Release()
	for i, want := range []string{"1", "P1Y2M-1DT1.5S", `[1,null,3]`, `[["a",null],["c","d"]]`, "1.25"} {
		if got := rec.Column(i).ValueStr(0); got != want {
			t.Errorf("%s = %q, want %q", tbl.Columns[i].Name, got, want)
		}
	}
	err = appendValue(rb.Field(4), tbl.Columns[4], "NaN")
	if err == nil || !strings.Contains(err.Error(), "unconstrained numeric") {
		t.Errorf("NaN into a decimal: %v", err)
	}

	cat := testCatalog(t)
	if err := cat.CreateNamespace(t.Context(), table.Identifier{"ns"}, nil); err != nil {
		t.Fatal(err)
	}
	created, err := cat.CreateTable(t.Context(), table.Identifier{"ns", "k"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range tbl.Columns {
		typ, err := icebergType(c)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := created.Schema().FindFieldByName(c.Name)
		if !ok || !sameType(typ, f.Type) {
			t.Errorf("column %s: stored %v, built %v", c.Name, f.Type, typ)
		}
	}
}

// listsTable has every shape of list and an interval, mirrored in upsert
// mode; body plays the TOASTed column whose value arrives unchanged.
var listsTable = &schema.Table{Namespace: "public", Name: "lists", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64},
	{Name: "iv", Kind: schema.Interval, Nullable: true, SourceType: "interval"},
	{Name: "ints", Kind: schema.List, Nullable: true, SourceType: "integer[]", Elem: &schema.Column{Kind: schema.Int32, Nullable: true}},
	{Name: "grid", Kind: schema.List, Nullable: true, SourceType: "text[][]",
		Elem: &schema.Column{Kind: schema.List, Elem: &schema.Column{Kind: schema.String, Nullable: true}}},
	{Name: "ivs", Kind: schema.List, Nullable: true, SourceType: "interval[]", Elem: &schema.Column{Kind: schema.Interval, Nullable: true}},
	{Name: "decs", Kind: schema.List, Nullable: true, SourceType: "numeric(10,2)[]", Elem: &schema.Column{Kind: schema.Decimal, Precision: 10, Scale: 2, Nullable: true}},
	{Name: "body", Kind: schema.String, Nullable: true, SourceType: "text"},
}, Key: []int{0}}

// listRow is row id of listsTable; variant picks one of several shapes.
func listRow(id int64, variant int) []any {
	iv := schema.IntervalValue{Months: int32(variant) - 3, Days: int32(id % 40), Micros: -id * 1_234_567}
	body := fmt.Sprintf("body-%d-%d", id, variant)
	switch variant % 6 {
	case 0:
		return []any{id, iv, []any{int64(1), nil, int64(-3)}, []any{[]any{"a", nil}, []any{"c", "d"}},
			[]any{schema.IntervalValue{Days: 1}, nil}, []any{"1.25", nil, "-0.50"}, body}
	case 1: // NULL lists and interval
		return []any{id, nil, nil, nil, nil, nil, body}
	case 2: // empty lists, an empty inner list
		return []any{id, iv, []any{}, []any{[]any{}, []any{"x"}}, []any{}, []any{}, body}
	case 3: // lists of only NULL elements
		return []any{id, iv, []any{nil}, []any{[]any{nil, nil}}, []any{nil, nil}, []any{nil}, body}
	case 4: // an empty outer list of lists, long lists
		long := make([]any, 300)
		for i := range long {
			long[i] = int64(i * int(id))
		}
		return []any{id, schema.IntervalValue{}, long, []any{}, []any{iv, iv}, []any{"99999999.99"}, body}
	}
	return []any{id, iv, []any{int64(id)}, []any{[]any{"only"}}, []any{iv}, []any{"0.01"}, nil}
}

// cdcdValue is what a value of col reads back as from Iceberg, in cdcd's
// representation with intervals as their text.
func cdcdValue(v any) any {
	switch v := v.(type) {
	case schema.IntervalValue:
		return v.String()
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = cdcdValue(e)
		}
		return out
	}
	return v
}

// arrowValue converts element i of a scanned column to cdcd's
// representation (lists as []any, decimals as text).
func arrowValue(t *testing.T, a arrow.Array, i int) any {
	if a.IsNull(i) {
		return nil
	}
	switch a := a.(type) {
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	case *array.String:
		return a.Value(i)
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.List:
		start, end := a.ValueOffsets(i)
		out := []any{}
		for j := start; j < end; j++ {
			out = append(out, arrowValue(t, a.ListValues(), int(j)))
		}
		return out
	}
	t.Fatalf("no conversion of %T", a)
	return nil
}

// scanRows reads a table with iceberg-go's scan: key (column 0) -> row in
// cdcd's representation, columns by name.
func scanRows(t *testing.T, cat catalog.Catalog, ident table.Identifier, cols []schema.Column) map[int64][]any {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	out := map[int64][]any{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make([]any, len(cols))
			for j, c := range cols {
				row[j] = arrowValue(t, rec.Column(rec.Schema().FieldIndices(c.Name)[0]), i)
			}
			id := row[0].(int64)
			if _, dup := out[id]; dup {
				t.Fatalf("key %d appears twice", id)
			}
			out[id] = row
		}
	}
	return out
}

func compareRows(t *testing.T, want map[int64][]any, got map[int64][]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%d rows, want %d", len(got), len(want))
	}
	bad := 0
	for id, w := range want {
		if g := got[id]; !reflect.DeepEqual(cdcdValue(w), g) {
			if bad++; bad <= 5 {
				t.Errorf("row %d:\n got  %#v\n want %#v", id, g, cdcdValue(w))
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// TestUpsertIntervalsAndLists: upsert mode writes intervals and lists of
// every shape (NULL, empty, NULL elements, nested, long) into data files
// iceberg-go reads back exactly; unchanged values are taken from those
// files, also after a compaction rewrote them; the Parquet schema carries
// the Iceberg ids of the list and element fields, and the files' column
// statistics name the element fields.
func TestUpsertIntervalsAndLists(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			w.s.cfg.Compaction = CompactionConfig{MinGroup: 2}
			w.s.cfg.Compaction = w.s.cfg.Compaction.WithDefaults()
			want := map[int64][]any{}
			var off int64
			mk := func(op byte, after []any) change {
				c := change{table: listsTable, offset: off, env: &schema.Envelope{Op: op, After: after}}
				if op != 'c' {
					c.env.Before = []any{after[0], nil, nil, nil, nil, nil, nil}
				}
				c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
				off++
				return encoded(c)
			}
			commit := func(cs ...change) {
				t.Helper()
				w.buf = cs
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			var cs []change
			for id := int64(1); id <= 30; id++ {
				want[id] = listRow(id, int(id))
				cs = append(cs, mk('c', want[id]))
			}
			commit(cs...)
			compareRows(t, want, scanRows(t, cat, w.cfg.Ident, listsTable.Columns))
			// Updates whose lists, interval and body arrive unchanged take
			// them from the data files; others change shape.
			for round := 1; round <= 3; round++ {
				cs = nil
				for id := int64(round); id <= 30; id += 3 {
					row := append([]any(nil), want[id]...)
					if id%2 == 0 {
						for _, ci := range []int{1, 2, 3, 4, 5, 6} {
							row[ci] = schema.Unchanged
						}
						cs = append(cs, mk('u', row))
						continue
					}
					want[id] = listRow(id, int(id)+round)
					row = append([]any(nil), want[id]...)
					row[6] = schema.Unchanged
					want[id][6] = listRow(id, int(id))[6]
					if round > 1 {
						want[id][6] = nil
						row[6] = nil
					}
					cs = append(cs, mk('u', row))
				}
				cs = append(cs, mk('d', []any{int64(30 - round), nil, nil, nil, nil, nil, nil}))
				delete(want, int64(30-round))
				commit(cs...)
				compareRows(t, want, scanRows(t, cat, w.cfg.Ident, listsTable.Columns))
			}
			checkListFileIDs(t, w)
			// Compaction rewrites the files by reading and writing the rows.
			compactAll(t, w)
			if len(w.up.data) != 1 {
				t.Errorf("%d data files after compaction", len(w.up.data))
			}
			compareRows(t, want, scanRows(t, cat, w.cfg.Ident, listsTable.Columns))
			// Unchanged values from the compacted file.
			cs = nil
			for id := int64(1); id <= 26; id++ {
				row := []any{id, schema.Unchanged, schema.Unchanged, schema.Unchanged, schema.Unchanged, schema.Unchanged, "new body"}
				want[id][6] = "new body"
				cs = append(cs, mk('u', row))
			}
			commit(cs...)
			compareRows(t, want, scanRows(t, cat, w.cfg.Ident, listsTable.Columns))
			// The index rebuilt from the files agrees.
			w.close()
			w2 := upsertWriter(t, cat, version, 1)
			if err := w2.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			spotCheckIndex(t, w2)
			w2.close()
		})
	}
}

// checkListFileIDs: the data files carry the table's field ids on list
// columns and their elements, and statistics for the element fields.
func checkListFileIDs(t *testing.T, w *tableWriter) {
	t.Helper()
	fs := mustFS(t, w)
	sc := w.tbl.Schema()
	grid, _ := sc.FindFieldByName("grid")
	outer := grid.Type.(*iceberg.ListType)
	inner := outer.Element.(*iceberg.ListType)
	ints, _ := sc.FindFieldByName("ints")
	intsElem := ints.Type.(*iceberg.ListType).ElementID
	for path, df := range w.up.data {
		pf, closeFn, err := parquetFile(fs, path)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int
		var n parquet.Node = pf.Schema()
		for _, name := range []string{"grid", "list", "element", "list", "element"} {
			for _, f := range n.Fields() {
				if f.Name() == name {
					n = f
				}
			}
			if name == "element" || name == "grid" {
				ids = append(ids, n.ID())
			}
		}
		closeFn()
		if want := []int{grid.ID, outer.ElementID, inner.ElementID}; !reflect.DeepEqual(ids, want) {
			t.Errorf("%s: field ids of grid, its element and its element's element %v, want %v", path, ids, want)
		}
		if _, ok := df.ValueCounts()[intsElem]; !ok {
			t.Errorf("%s: no value count for the element of ints (field %d): %v", path, intsElem, df.ValueCounts())
		}
	}
}

// TestUpsertIntervalKeys: an interval key encodes from the source's value
// and from the text read back from a data file alike (a rebuilt index
// finds every row), and distinct intervals PostgreSQL compares equal stay
// distinct keys; its text is frozen, as the table's identifier values are
// that text.
func TestUpsertIntervalKeys(t *testing.T) {
	for iv, want := range map[schema.IntervalValue]string{
		{}: "PT0S",
		{Months: 14, Days: -1, Micros: 1_500_000}:         "P1Y2M-1DT1.5S",
		{Months: -1, Days: 2, Micros: -3 * 3_600_000_000}: "P-1M2DT-3H",
		{Micros: -1}: "PT-0.000001S",
		{Months: 1}:  "P1M",
		{Days: 30}:   "P30D",
	} {
		if got := iv.String(); got != want {
			t.Errorf("%+v renders %q, want %q: interval keys changed their encoding", iv, got, want)
		}
	}
	tbl := &schema.Table{Namespace: "public", Name: "ivk", Columns: []schema.Column{
		{Name: "k", Kind: schema.Interval, SourceType: "interval"},
		{Name: "v", Kind: schema.String, Nullable: true},
	}, Key: []int{0}}
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	var off int64
	mk := func(op byte, k schema.IntervalValue, v any) change {
		c := change{table: tbl, offset: off, env: &schema.Envelope{Op: op}}
		if op == 'd' {
			c.env.Before = []any{k, nil}
		} else {
			c.env.After = []any{k, v}
			c.env.Before = []any{k, nil}
		}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		off++
		return encoded(c)
	}
	month, days30, dayHours := schema.IntervalValue{Months: 1}, schema.IntervalValue{Days: 30}, schema.IntervalValue{Micros: 24 * 3_600_000_000}
	w.buf = []change{mk('c', month, "a"), mk('c', days30, "b"), mk('c', dayHours, "c")}
	w.next[0] = off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Lose the index: the rebuild reads the keys' text from the data file.
	w.close()
	w = upsertWriter(t, cat, 3, 1)
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{mk('u', month, "a2"), mk('u', days30, schema.Unchanged), mk('d', dayHours, nil)}
	w.next[0] = off
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	sc, err := cat.LoadTable(t.Context(), w.cfg.Ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := sc.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			got[rec.Column(0).ValueStr(i)] = rec.Column(1).ValueStr(i)
		}
	}
	if want := map[string]string{"P1M": "a2", "P30D": "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("table %v, want %v", got, want)
	}
	w.close()
}

// TestUpsertRefusesListKeysAndPartitions: an array cannot be a key or a
// partition source; both are refused naming the column.
func TestUpsertRefusesListKeysAndPartitions(t *testing.T) {
	tbl := &schema.Table{Namespace: "public", Name: "ak", Columns: []schema.Column{
		{Name: "k", Kind: schema.List, SourceType: "integer[]", Elem: &schema.Column{Kind: schema.Int32, Nullable: true}},
	}, Key: []int{0}}
	if _, err := upsertSchema(tbl); err == nil || !strings.Contains(err.Error(), `primary-key column "k" is an array`) {
		t.Errorf("list key: %v", err)
	}
	sc, err := upsertSchema(listsTable)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range []string{"identity", "bucket", "truncate"} {
		_, err := buildSpec(sc, []PartitionField{{Transform: tr, Param: 4, Column: "ints"}})
		if err == nil || !strings.Contains(err.Error(), "cannot be partitioned") {
			t.Errorf("partition by %s(ints): %v", tr, err)
		}
	}
	// An interval partitions by its text.
	spec, err := buildSpec(sc, []PartitionField{{Transform: "identity", Column: "iv"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPartitioner(sc, *spec)
	if err != nil {
		t.Fatal(err)
	}
	vals, _, err := p.partition([]any{int64(1), schema.IntervalValue{Days: 3}, nil, nil, nil, nil, nil})
	if err != nil || vals[1000] != "P3D" {
		t.Errorf("partition of an interval: %v %v", vals, err)
	}
}
