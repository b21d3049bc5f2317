package schema

import "testing"

// TestDefaultRoundTrip: a column's Default travels through the value
// schema (the sink learns it from the schema alone) and takes part in a
// version's equality, so an added column's default is never lost to an
// older interned version.
func TestDefaultRoundTrip(t *testing.T) {
	u := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	cols := []Column{
		{Name: "id", Kind: Int64},
		{Name: "b", Kind: Bool, Nullable: true, Default: true},
		{Name: "i", Kind: Int32, Default: int64(-7)},
		{Name: "l", Kind: Int64, Nullable: true, Default: int64(1) << 60},
		{Name: "f", Kind: Float32, Nullable: true, Default: float32(0.1)},
		{Name: "d", Kind: Float64, Nullable: true, Default: 2.5e-300},
		{Name: "n", Kind: Decimal, Precision: 10, Scale: 2, Nullable: true, Default: "12.30"},
		{Name: "s", Kind: String, Nullable: true, Default: "red, \"quoted\""},
		{Name: "j", Kind: JSON, Nullable: true, Default: `{"a": 1}`},
		{Name: "u", Kind: UUID, Nullable: true, Default: u},
		{Name: "dt", Kind: Date, Nullable: true, Default: int32(-3)},
		{Name: "ts", Kind: TimestampTZ, Nullable: true, Default: int64(1700000000123456)},
		{Name: "none", Kind: String, Nullable: true},
	}
	tbl := &Table{Namespace: "public", Name: "t", Columns: cols, Key: []int{0}}
	vs, err := ValueSchema(tbl, "p.public.t")
	if err != nil {
		t.Fatal(err)
	}
	back, err := TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range back.Columns {
		if c.Default != cols[i].Default {
			t.Errorf("column %s: default %#v (%T), want %#v (%T)", c.Name, c.Default, c.Default, cols[i].Default, cols[i].Default)
		}
	}
	if !back.Equal(tbl) {
		t.Errorf("rebuilt table differs: %s", back)
	}
	other := *tbl
	other.Columns = append([]Column(nil), cols...)
	other.Columns[2].Default = int64(8)
	if other.Equal(tbl) {
		t.Error("tables whose column defaults differ are equal")
	}
	if _, err := DefaultText(Column{Name: "x", Kind: Int64}, "7"); err == nil {
		t.Error("a string default for an int64 column was rendered")
	}
}

// TestDroppedRoundTrip: the columns a version's source dropped travel
// through the value schema and make a version of their own, so a sink can
// tell rows written after a drop (NULL there) from rows written before the
// column was added (its initial default); a version without drops keeps
// its schema text.
func TestDroppedRoundTrip(t *testing.T) {
	tbl := &Table{Namespace: "public", Name: "t", Key: []int{0},
		Columns: []Column{{Name: "id", Kind: Int64}, {Name: "v", Kind: String, Nullable: true}}}
	plain, err := ValueSchema(tbl, "p.public.t")
	if err != nil {
		t.Fatal(err)
	}
	dropped := *tbl
	dropped.Dropped = []string{"colour", "size"}
	vs, err := ValueSchema(&dropped, "p.public.t")
	if err != nil {
		t.Fatal(err)
	}
	if vs == plain {
		t.Fatal("a version with dropped columns has the schema text of one without")
	}
	back, err := TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	if !back.WasDropped("colour") || !back.WasDropped("size") || back.WasDropped("v") || !back.Equal(&dropped) {
		t.Errorf("rebuilt dropped columns %q, want %q", back.Dropped, dropped.Dropped)
	}
	if dropped.Equal(tbl) {
		t.Error("versions that differ in dropped columns are equal")
	}
	if back, err = TableFromValueSchema(plain); err != nil || back.Dropped != nil {
		t.Errorf("a version without drops rebuilt with dropped %q (%v)", back.Dropped, err)
	}
}
