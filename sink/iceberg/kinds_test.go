package iceberg

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

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
