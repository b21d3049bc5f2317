package iceberg

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// codecTable has a column of every kind the codec takes, nullable and not.
var codecTable = &schema.Table{Namespace: "public", Name: "codec", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64},
	{Name: "b", Kind: schema.Bool, Nullable: true},
	{Name: "i16", Kind: schema.Int16},
	{Name: "i32", Kind: schema.Int32, Nullable: true},
	{Name: "f32", Kind: schema.Float32, Nullable: true},
	{Name: "f64", Kind: schema.Float64},
	{Name: "d", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true},
	{Name: "d9", Kind: schema.Decimal, Precision: 9, Scale: 3},
	{Name: "num", Kind: schema.Decimal, Nullable: true}, // unconstrained: text
	{Name: "s", Kind: schema.String, Nullable: true},
	{Name: "j", Kind: schema.JSON, Nullable: true},
	{Name: "bin", Kind: schema.Bytes, Nullable: true},
	{Name: "day", Kind: schema.Date, Nullable: true},
	{Name: "t", Kind: schema.Time, Nullable: true},
	{Name: "ts", Kind: schema.Timestamp, Nullable: true},
	{Name: "tz", Kind: schema.TimestampTZ},
}, Key: []int{0}}

func randomCodecRow(rng *rand.Rand, id int64) []any {
	null := func(v any) any {
		if rng.IntN(5) == 0 {
			return nil
		}
		return v
	}
	dec := func(digits, scale int) string {
		n := rng.Int64N(int64(math.Pow10(digits)))
		s := fmt.Sprintf("%0*d", scale+1, n)
		s = s[:len(s)-scale] + "." + s[len(s)-scale:]
		if rng.IntN(2) == 0 {
			s = "-" + s
		}
		return s
	}
	return []any{
		id,
		null(rng.IntN(2) == 0),
		int64(rng.IntN(1<<16) - 1<<15),
		null(int64(rng.Int32()) - int64(rng.Int32())),
		null(float32(rng.NormFloat64())),
		rng.NormFloat64() * 1e6,
		null(dec(12, 2)),
		dec(9, 3),
		null([]string{"NaN", "1e-7", "123456789012345678901234567890.5", "-0.001"}[rng.IntN(4)]),
		null(strings.Repeat("x", rng.IntN(50))),
		null(`{"a":` + fmt.Sprint(rng.IntN(100)) + `}`),
		null([]byte{byte(rng.IntN(256)), 0, 0xff}),
		null(int32(rng.IntN(40000) - 20000)),
		null(rng.Int64N(86400e6)),
		null(rng.Int64() - rng.Int64()),
		rng.Int64() - rng.Int64(),
	}
}

// genericValues is what the generic path gives a row: the envelope
// decoded, the values by field, converted column by column in leaf order.
func genericValues(t *testing.T, fs *fileSchema, tt *schema.Table, body []byte, defaults []any) []parquet.Value {
	t.Helper()
	env, err := schema.DecodeEnvelope(tt, body)
	if err != nil {
		t.Fatal(err)
	}
	fields := fs.ice.Fields()
	vals := make([]any, len(fields))
	for fi, f := range fields {
		if ci := tt.ColumnIndex(f.Name); ci >= 0 {
			vals[fi] = env.After[ci]
		} else {
			vals[fi] = defaults[fi]
		}
	}
	var out []parquet.Value
	for _, i := range fs.order {
		if out, err = fs.cols[i].appendTo(out, vals[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func sameValues(t *testing.T, what string, got, want []parquet.Value) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if !parquet.Equal(g, w) || g.Kind() != w.Kind() || g.IsNull() != w.IsNull() ||
			g.RepetitionLevel() != w.RepetitionLevel() || g.DefinitionLevel() != w.DefinitionLevel() || g.Column() != w.Column() {
			t.Fatalf("%s: leaf %d: codec gives %v (r%d d%d c%d), the generic path %v (r%d d%d c%d)", what, i,
				g, g.RepetitionLevel(), g.DefinitionLevel(), g.Column(), w, w.RepetitionLevel(), w.DefinitionLevel(), w.Column())
		}
	}
}

// codecEvolvedSchema is a later schema of codecTable's table: a column
// the version lacks, with and without a default; int and float widened; a
// decimal's precision widened across the int32/int64 line; a column the
// file lacks ("s"), read past.
func codecEvolvedSchema() *iceberg.Schema {
	return iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "b", Type: iceberg.PrimitiveTypes.Bool},
		iceberg.NestedField{ID: 3, Name: "i16", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 4, Name: "i32", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 5, Name: "f32", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 6, Name: "f64", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 7, Name: "d", Type: iceberg.DecimalTypeOf(18, 2)},
		iceberg.NestedField{ID: 8, Name: "d9", Type: iceberg.DecimalTypeOf(14, 3)},
		iceberg.NestedField{ID: 9, Name: "num", Type: iceberg.PrimitiveTypes.String},
		// "s" is not in the file: read past.
		iceberg.NestedField{ID: 11, Name: "j", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 12, Name: "bin", Type: iceberg.PrimitiveTypes.Binary},
		iceberg.NestedField{ID: 13, Name: "day", Type: iceberg.PrimitiveTypes.Date},
		iceberg.NestedField{ID: 14, Name: "t", Type: iceberg.PrimitiveTypes.Time},
		iceberg.NestedField{ID: 15, Name: "ts", Type: iceberg.PrimitiveTypes.Timestamp},
		iceberg.NestedField{ID: 16, Name: "tz", Type: iceberg.PrimitiveTypes.TimestampTz},
		iceberg.NestedField{ID: 17, Name: "later", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 18, Name: "later_def", Type: iceberg.PrimitiveTypes.Int32},
	)
}

// TestRowCodecAgreesWithGenericPath: the Parquet values the codec decodes
// from an after-image are those the generic path (decode the envelope,
// convert each value) gives, value, kind and levels, for random rows of
// every kind it takes: into the table's own schema, and into an evolved
// one (a column the version lacks, with and without a default; int and
// float widened; a decimal's precision widened across the int32/int64
// line; a column the file lacks, read past).
func TestRowCodecAgreesWithGenericPath(t *testing.T) {
	own, err := upsertSchema(codecTable)
	if err != nil {
		t.Fatal(err)
	}
	evolved := codecEvolvedSchema()
	rng := rand.New(rand.NewPCG(7, 8))
	for _, sc := range []*iceberg.Schema{own, evolved} {
		fs, err := newFileSchema(sc)
		if err != nil {
			t.Fatal(err)
		}
		defaults := make([]any, len(sc.Fields()))
		defaults[len(defaults)-1] = int32(42)
		c := newRowCodec(codecTable, fs, defaults)
		if c == nil {
			t.Fatalf("schema %d: no codec for a table of the kinds it takes", sc.ID)
		}
		for i := range 3000 {
			env := &schema.Envelope{Op: 'c', After: randomCodecRow(rng, int64(i))}
			if i%3 == 0 {
				env.Op, env.Before = 'u', randomCodecRow(rng, int64(i))
			}
			env.Source.Position = []byte("pos")
			body, err := schema.AppendEnvelope(nil, codecTable, env)
			if err != nil {
				t.Fatal(err)
			}
			info, err := schema.ScanEnvelope(codecTable, body)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.decode(info.After, nil)
			if err != nil {
				t.Fatalf("schema %d row %d: %v", sc.ID, i, err)
			}
			sameValues(t, fmt.Sprintf("schema %d row %d", sc.ID, i), got, genericValues(t, fs, codecTable, body, defaults))
		}
	}
}

// TestRowCodecRefuses: the kinds and conversions only the generic path
// knows give no codec; a required column's NULL and a cut row are errors
// (the row then takes the generic path, which names the problem).
func TestRowCodecRefuses(t *testing.T) {
	for _, col := range []schema.Column{
		{Name: "x", Kind: schema.Interval},
		{Name: "x", Kind: schema.UUID},
		{Name: "x", Kind: schema.Decimal, Precision: 20, Scale: 2},
		{Name: "x", Kind: schema.List, Elem: &schema.Column{Kind: schema.Int32}},
	} {
		tt := &schema.Table{Namespace: "public", Name: "r", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}, col}, Key: []int{0}}
		sc, err := upsertSchema(tt)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := newFileSchema(sc)
		if err != nil {
			t.Fatal(err)
		}
		if newRowCodec(tt, fs, nil) != nil {
			t.Errorf("%s column: a codec, want the generic path", col.Kind)
		}
	}
	// A narrower column than the source's: not a conversion the codec makes.
	narrow := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int32, Required: true})
	fs, err := newFileSchema(narrow)
	if err != nil {
		t.Fatal(err)
	}
	tt := &schema.Table{Namespace: "public", Name: "n", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	if newRowCodec(tt, fs, nil) != nil {
		t.Error("bigint into an int column: a codec, want the generic path")
	}

	// NULL into a required column.
	tt = &schema.Table{Namespace: "public", Name: "q", Columns: []schema.Column{{Name: "id", Kind: schema.Int64, Nullable: true}}, Key: []int{0}}
	sc, err := upsertSchema(tt)
	if err != nil {
		t.Fatal(err)
	}
	if fs, err = newFileSchema(sc); err != nil {
		t.Fatal(err)
	}
	c := newRowCodec(tt, fs, nil)
	body, err := schema.AppendEnvelope(nil, tt, &schema.Envelope{Op: 'c', After: []any{nil}, Source: schema.SourceInfo{Position: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := schema.ScanEnvelope(tt, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.decode(info.After, nil); err == nil || !strings.Contains(err.Error(), "required") {
		t.Errorf("NULL into a required column: %v, want an error naming it", err)
	}
	// Every cut of a row fails; none panics.
	body, err = schema.AppendEnvelope(nil, codecTable, &schema.Envelope{Op: 'c', After: randomCodecRow(rand.New(rand.NewPCG(1, 2)), 1),
		Source: schema.SourceInfo{Position: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	if info, err = schema.ScanEnvelope(codecTable, body); err != nil {
		t.Fatal(err)
	}
	own, err := upsertSchema(codecTable)
	if err != nil {
		t.Fatal(err)
	}
	if fs, err = newFileSchema(own); err != nil {
		t.Fatal(err)
	}
	c = newRowCodec(codecTable, fs, nil)
	for n := range len(info.After) {
		if _, err := c.decode(info.After[:n], nil); err == nil {
			t.Fatalf("a row cut to %d of %d bytes decoded", n, len(info.After))
		}
	}
}
