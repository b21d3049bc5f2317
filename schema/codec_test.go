package schema

import (
	"bytes"
	"context"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

func allKindsTable() *Table {
	return &Table{
		Namespace: "public",
		Name:      "every kind",
		Columns: []Column{
			{Name: "id", Kind: Int64, SourceType: "int8"},
			{Name: "b", Kind: Bool, Nullable: true},
			{Name: "i2", Kind: Int16, Nullable: true},
			{Name: "i4", Kind: Int32, Nullable: true},
			{Name: "f4", Kind: Float32, Nullable: true},
			{Name: "f8", Kind: Float64, Nullable: true},
			{Name: "amount", Kind: Decimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
			{Name: "free", Kind: Decimal, Nullable: true, SourceType: "numeric"},
			{Name: "s", Kind: String, Nullable: true},
			{Name: "raw", Kind: Bytes, Nullable: true},
			{Name: "doc", Kind: JSON, Nullable: true},
			{Name: "u", Kind: UUID, Nullable: true},
			{Name: "d", Kind: Date, Nullable: true},
			{Name: "t", Kind: Time, Nullable: true},
			{Name: "ts", Kind: Timestamp, Nullable: true},
			{Name: "tstz", Kind: TimestampTZ, Nullable: true},
			{Name: "Weird Name-1", Kind: String, Nullable: true},
			{Name: "k2", Kind: String, SourceType: "text"},
		},
		Key: []int{0, 17},
	}
}

func fullRow() []any {
	return []any{
		int64(-42), true, int64(-32768), int64(2147483647), float32(1.5), math.Inf(-1),
		"-1234567890.12", "NaN", "héllo", []byte{0, 1, 2, 255}, `{"a": [1, 2]}`,
		[16]byte{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
		int32(-719162), int64(86399999999), int64(-62135596800000000), int64(1700000000123456),
		"x", "key two",
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	tbl := allKindsTable()
	vs, err := ValueSchema(tbl, "shop.public.every kind")
	if err != nil {
		t.Fatal(err)
	}
	after := fullRow()
	after[8] = Unchanged
	before := make([]any, len(after))
	before[0], before[17] = int64(-42), "key two"
	env := Envelope{
		Before: before, After: after, Op: 'u', TsMs: 1700000000000, TsUs: 1700000000000123, TsNs: 1700000000000123456,
		Transaction: &TxBlock{ID: "777:23803720", TotalOrder: 3, CollectionOrder: 2},
		Source: SourceInfo{Version: "0.1", Connector: "postgresql", Name: "shop", TsMs: 1699999999000,
			TsUs: 1699999999000001, TsNs: 1699999999000001000, Snapshot: SnapshotFalse, Sequence: `["23803720","23803600"]`,
			DB: "shop", Schema: "public", Table: "every kind", TxID: 777, LSN: 0x16B3748, Position: []byte{1, 2, 3}},
	}
	buf, err := AppendEnvelope(nil, tbl, &env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeEnvelope(tbl, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, env) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", got, env)
	}

	// The same bytes decoded by an independent Avro implementation.
	s, err := avro.Parse(vs)
	if err != nil {
		t.Fatalf("hamba rejects our schema: %v\n%s", err, vs)
	}
	// hamba's generic decoder has no Go type for this (valid) logical type
	// inside unions; tell it one.
	avro.Register("long.local-timestamp-micros", int64(0))
	var generic map[string]any
	if err := avro.Unmarshal(s, buf, &generic); err != nil {
		t.Fatalf("hamba cannot decode our bytes: %v", err)
	}
	a := generic["after"].(map[string]any)["shop.public.every_kind.Value"].(map[string]any)
	if a["id"] != int64(-42) || a["s"] != UnavailableValue || a["Weird_Name_1"] != "x" || a["k2"] != "key two" {
		t.Fatalf("hamba after = %v", a)
	}
	if r := a["amount"].(*big.Rat); r.FloatString(2) != "-1234567890.12" {
		t.Fatalf("hamba decimal = %v", r.FloatString(2))
	}
	if generic["op"] != "u" || !reflect.DeepEqual(generic["unchanged"], []any{"s"}) {
		t.Fatalf("hamba op/unchanged = %v %v", generic["op"], generic["unchanged"])
	}
	if src := generic["source"].(map[string]any); src["lsn"] != int64(0x16B3748) || src["snapshot"] != "false" {
		t.Fatalf("hamba source = %v", src)
	}
	if tx := generic["transaction"].(map[string]any)["event.block"].(map[string]any); tx["total_order"] != int64(3) {
		t.Fatalf("hamba transaction = %v", tx)
	}
}

func TestKeyRoundTrip(t *testing.T) {
	tbl := allKindsTable()
	ks, err := KeySchema(tbl, "shop.public.every kind")
	if err != nil {
		t.Fatal(err)
	}
	buf, err := AppendKey(nil, tbl, fullRow())
	if err != nil {
		t.Fatal(err)
	}
	key, err := DecodeKey(tbl, buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(key, []any{int64(-42), "key two"}) {
		t.Fatalf("key = %v", key)
	}
	var generic map[string]any
	if err := avro.Unmarshal(avro.MustParse(ks), buf, &generic); err != nil {
		t.Fatal(err)
	}
	if generic["id"] != int64(-42) || generic["k2"] != "key two" {
		t.Fatalf("hamba key = %v", generic)
	}
}

func TestTableFromValueSchema(t *testing.T) {
	tbl := allKindsTable()
	vs, err := ValueSchema(tbl, "shop.public.every kind")
	if err != nil {
		t.Fatal(err)
	}
	got, err := TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(tbl) {
		t.Fatalf("rebuilt table\n got %s\nwant %s", got, tbl)
	}
}

func TestDecimalEncoding(t *testing.T) {
	for _, tc := range []struct {
		in    string
		scale int
		want  string
	}{
		{"0", 2, "0.00"}, {"-0.01", 2, "-0.01"}, {"128", 0, "128"}, {"-128", 0, "-128"},
		{"-129", 0, "-129"}, {"255.5", 1, "255.5"}, {"99999999999999999999999999.123456789012", 12, "99999999999999999999999999.123456789012"},
		{"1.10", 1, "1.1"}, {"+7", 3, "7.000"},
	} {
		u, err := unscaled(tc.in, tc.scale)
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		b := twosComplement(u)
		back := formatDecimal(fromTwosComplement(b), tc.scale)
		if back != tc.want {
			t.Errorf("%s scale %d: got %s want %s (bytes %x)", tc.in, tc.scale, back, tc.want, b)
		}
	}
	if _, err := unscaled("1.234", 2); err == nil {
		t.Error("rounding must be refused")
	}
	if _, err := unscaled("12a", 0); err == nil {
		t.Error("garbage accepted")
	}
}

func TestDecodeRejectsTruncation(t *testing.T) {
	tbl := allKindsTable()
	env := Envelope{After: fullRow(), Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "x"}}
	buf, err := AppendEnvelope(nil, tbl, &env)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(buf); n++ {
		if _, err := DecodeEnvelope(tbl, buf[:n]); err == nil {
			t.Fatalf("decode of %d/%d bytes succeeded", n, len(buf))
		}
	}
}

func TestFrame(t *testing.T) {
	b := AppendFrame(nil, 0x01020304)
	b = append(b, 'x')
	id, body, err := ParseFrame(b)
	if err != nil || id != 0x01020304 || !bytes.Equal(body, []byte("x")) {
		t.Fatalf("%d %q %v", id, body, err)
	}
	if _, _, err := ParseFrame([]byte{1, 0, 0, 0, 1}); err == nil {
		t.Fatal("bad magic accepted")
	}
	if _, _, err := ParseFrame([]byte{0, 0}); err == nil {
		t.Fatal("short frame accepted")
	}
}

type memStore struct{ keys, values [][]byte }

func (m *memStore) Load(_ context.Context, fn func(k, v []byte) error) error {
	for i := range m.keys {
		if err := fn(m.keys[i], m.values[i]); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) Append(_ context.Context, k, v []byte) error {
	m.keys, m.values = append(m.keys, k), append(m.values, v)
	return nil
}

func TestRegistryIdsSurviveReload(t *testing.T) {
	ctx := context.Background()
	st := &memStore{}
	r, err := OpenRegistry(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	a1, _ := r.Register(ctx, "t-value", `"string"`)
	a2, _ := r.Register(ctx, "t-value", `"string"`)
	b1, _ := r.Register(ctx, "t-value", `"bytes"`) // string -> bytes: BACKWARD compatible
	c1, _ := r.Register(ctx, "u-value", `"string"`)
	if a1 != 1 || a2 != 1 || b1 != 2 || c1 != 1 {
		t.Fatalf("ids %d %d %d %d", a1, a2, b1, c1)
	}
	if len(st.keys) != 3 {
		t.Fatalf("%d records stored, want 3", len(st.keys))
	}
	r2, err := OpenRegistry(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := r2.SchemaByID(2); err != nil || s != `"bytes"` {
		t.Fatalf("%q %v", s, err)
	}
	vs, _ := r2.Versions("t-value")
	if len(vs) != 2 || vs[1].Version != 2 || vs[1].ID != 2 {
		t.Fatalf("versions %+v", vs)
	}
	if id, _ := r2.Register(ctx, "v-value", `"int"`); id != 3 {
		t.Fatalf("next id after reload = %d, want 3", id)
	}
}

func TestScanEnvelopeMatchesDecode(t *testing.T) {
	tbl := allKindsTable()
	vs, err := ValueSchemaFor(tbl, "shop.x", ConnectorMySQL)
	if err != nil {
		t.Fatal(err)
	}
	mysqlTbl, err := TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	after := fullRow()
	after[8] = Unchanged
	for _, env := range []Envelope{
		{After: fullRow(), Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "x", LSN: 77, TxID: 5, TsMs: 123, Position: []byte{9, 8}}},
		{Before: fullRow(), After: after, Op: 'u', Source: SourceInfo{Connector: "postgresql", Table: "x", Snapshot: "true", Schema: "s", Position: []byte{1}}},
		{Before: fullRow(), Op: 'd', Source: SourceInfo{Connector: "mysql", Table: "x", File: "bin.1", Pos: 4, GTID: "g"}},
		{Op: 't', Source: SourceInfo{Table: "x"}},
	} {
		tbl := tbl
		if env.Source.Connector == ConnectorMySQL {
			tbl = mysqlTbl
		}
		buf, err := AppendEnvelope(nil, tbl, &env)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ScanEnvelope(tbl, buf)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := DecodeEnvelope(tbl, buf); err != nil || got.Source.File != env.Source.File || got.Source.GTID != env.Source.GTID {
			t.Errorf("decode %c: %+v, %v", env.Op, got.Source, err)
		}
		if info.Op != env.Op || info.HasBefore != (env.Before != nil) || info.HasAfter != (env.After != nil) ||
			info.LSN != env.Source.LSN || info.TxID != env.Source.TxID || info.TsMs != env.Source.TsMs ||
			!bytes.Equal(info.Position, env.Source.Position) {
			t.Errorf("scan %+v for %c", info, env.Op)
		}
		if (info.Unchanged > 0) != (env.Op == 'u') {
			t.Errorf("unchanged count %d", info.Unchanged)
		}
		for n := 0; n < len(buf); n++ {
			if _, err := ScanEnvelope(tbl, buf[:n]); err == nil {
				t.Fatalf("scan of %d/%d bytes succeeded", n, len(buf))
			}
		}
	}
	buf, _ := AppendEnvelope(nil, tbl, &Envelope{Before: fullRow(), After: fullRow(), Op: 'u'})
	if n := testing.AllocsPerRun(100, func() { _, _ = ScanEnvelope(tbl, buf) }); n != 0 {
		t.Errorf("ScanEnvelope allocates %v times", n)
	}
}

// newKindsTable has the kinds added for PostgreSQL's full type range:
// intervals (twice, so the named record is referenced), lists (nullable
// elements, decimals, nested lists, lists of intervals) and a constrained
// decimal key.
func newKindsTable() *Table {
	return &Table{
		Namespace: "public",
		Name:      "new_kinds",
		Columns: []Column{
			{Name: "id", Kind: Int64},
			{Name: "iv", Kind: Interval, Nullable: true},
			{Name: "iv2", Kind: Interval, Nullable: true},
			{Name: "ints", Kind: List, Nullable: true, Elem: &Column{Kind: Int32, Nullable: true}},
			{Name: "decs", Kind: List, Nullable: true, Elem: &Column{Kind: Decimal, Precision: 10, Scale: 2, Nullable: true}},
			{Name: "grid", Kind: List, Nullable: true, Elem: &Column{Kind: List, Elem: &Column{Kind: String, Nullable: true}}},
			{Name: "ivs", Kind: List, Nullable: true, Elem: &Column{Kind: Interval, Nullable: true}},
			{Name: "nan", Kind: Decimal, Precision: 12, Scale: 3, Nullable: true},
			{Name: "kd", Kind: Decimal, Precision: 5, Scale: 0},
		},
		Key: []int{0, 8},
	}
}

func newKindsRow() []any {
	return []any{
		int64(7),
		IntervalValue{Months: -14, Days: 3, Micros: -3_600_000_001},
		IntervalValue{},
		[]any{int64(1), nil, int64(-3)},
		[]any{"1.50", nil, "99999999.99", "-0.01"},
		[]any{[]any{"a", nil}, []any{"", "d"}},
		[]any{IntervalValue{Months: 1}, nil},
		"-1.250",
		"12345",
	}
}

func TestNewKindsRoundTrip(t *testing.T) {
	tbl := newKindsTable()
	topic := "shop.public.new_kinds"
	vs, err := ValueSchema(tbl, topic)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := KeySchema(tbl, topic)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]any{newKindsRow(), {int64(8), nil, nil, []any{}, nil, []any{}, []any{}, "12.500", "-99999"}}
	for _, row := range rows {
		env := Envelope{After: row, Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "new_kinds", Position: []byte{1}}}
		buf, err := AppendEnvelope(nil, tbl, &env)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeEnvelope(tbl, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.After, row) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got.After, row)
		}
		for n := 0; n < len(buf); n++ {
			if _, err := DecodeEnvelope(tbl, buf[:n]); err == nil {
				t.Fatalf("decode of %d/%d bytes succeeded", n, len(buf))
			}
		}
		// hamba reads the same bytes with our schema.
		var generic map[string]any
		if err := avro.Unmarshal(avro.MustParse(vs), buf, &generic); err != nil {
			t.Fatalf("hamba cannot decode our bytes: %v\n%s", err, vs)
		}
		a := generic["after"].(map[string]any)["shop.public.new_kinds.Value"].(map[string]any)
		if a["id"] != row[0] {
			t.Fatalf("hamba id = %v", a["id"])
		}
		key, err := AppendKey(nil, tbl, row)
		if err != nil {
			t.Fatal(err)
		}
		var gk map[string]any
		if err := avro.Unmarshal(avro.MustParse(ks), key, &gk); err != nil {
			t.Fatalf("hamba cannot decode our key: %v\n%s", err, ks)
		}
		if dk, err := DecodeKey(tbl, key); err != nil || !reflect.DeepEqual(dk, []any{row[0], row[8]}) {
			t.Fatalf("key %v %v", dk, err)
		}
	}

	// The first row as hamba sees it.
	env := Envelope{After: rows[0], Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "new_kinds", Position: []byte{1}}}
	buf, _ := AppendEnvelope(nil, tbl, &env)
	var generic map[string]any
	if err := avro.Unmarshal(avro.MustParse(vs), buf, &generic); err != nil {
		t.Fatal(err)
	}
	a := generic["after"].(map[string]any)["shop.public.new_kinds.Value"].(map[string]any)
	iv := a["iv"].(map[string]any)["cdcd.Interval"].(map[string]any)
	if iv["months"] != -14 || iv["days"] != 3 || iv["micros"] != int64(-3_600_000_001) {
		t.Errorf("hamba interval = %v", iv)
	}
	ints := a["ints"].(map[string]any)["array"].([]any)
	if len(ints) != 3 || ints[0] != 1 || ints[1] != nil {
		t.Errorf("hamba ints = %v", ints)
	}
	decs := a["decs"].(map[string]any)["array"].([]any)
	if r, ok := decs[0].(*big.Rat); !ok || r.FloatString(2) != "1.50" {
		t.Errorf("hamba decimal element = %v", decs[0])
	}
	if r, ok := a["nan"].(*big.Rat); !ok || r.FloatString(3) != "-1.250" {
		t.Errorf("hamba decimal = %#v", a["nan"])
	}
	// NaN has no decimal form: refused with the fix, never written as 0.
	bad := newKindsRow()
	bad[7] = "NaN"
	_, err = AppendEnvelope(nil, tbl, &Envelope{After: bad, Op: 'c'})
	if err == nil || !strings.Contains(err.Error(), `"nan"`) || !strings.Contains(err.Error(), "unconstrained numeric") {
		t.Errorf("NaN in numeric(12,3): %v", err)
	}
	grid := a["grid"].(map[string]any)["array"].([]any)
	if len(grid) != 2 || grid[0].([]any)[0] != "a" || grid[1].([]any)[1] != "d" {
		t.Errorf("hamba grid = %v", grid)
	}

	// The model survives the schema.
	back, err := TableFromValueSchema(vs)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Equal(tbl) {
		t.Fatalf("rebuilt table\n got %s\nwant %s", back, tbl)
	}
}

func TestIntervalISO(t *testing.T) {
	for _, tc := range []struct {
		iv   IntervalValue
		want string
	}{
		{IntervalValue{}, "PT0S"},
		{IntervalValue{Months: 14, Days: 3, Micros: 4*3_600_000_000 + 5*60_000_000 + 6_789_000}, "P1Y2M3DT4H5M6.789S"},
		{IntervalValue{Months: -1, Days: 2, Micros: -3 * 3_600_000_000}, "P-1M2DT-3H"},
		{IntervalValue{Micros: -1}, "PT-0.000001S"},
		{IntervalValue{Micros: -61_500_000}, "PT-1M-1.5S"},
		{IntervalValue{Months: -12}, "P-1Y"},
	} {
		if got := tc.iv.String(); got != tc.want {
			t.Errorf("%+v: got %s want %s", tc.iv, got, tc.want)
		}
	}
}

// TestDecimalFastPath: the int64 path writes exactly the bytes the big.Int
// path does, and leaves what it can't hold to it.
func TestDecimalFastPath(t *testing.T) {
	for _, tc := range []struct {
		s     string
		scale int
	}{
		{"0", 2}, {"-0.01", 2}, {"128", 0}, {"-128", 0}, {"-129", 0}, {"127", 0}, {"255.5", 1}, {"32767", 0}, {"-32768", 0},
		{"999999999999999999", 0}, {"-99999999999999.9999", 4}, {"1.10", 1}, {"+7", 3}, {"0.5", 0}, {"12a", 0},
		{"1234567890123456789", 0}, {"", 0}, {"-", 0}, {".", 2}, {"1.2.3", 2},
	} {
		v, ok := unscaledInt64(tc.s, tc.scale)
		u, err := unscaled(tc.s, tc.scale)
		if !ok {
			continue // the big.Int path decides
		}
		if err != nil {
			t.Fatalf("%q: fast path accepted what the exact path refuses: %v", tc.s, err)
		}
		if got, want := appendInt64Decimal(nil, v), appendBytes(nil, twosComplement(u)); !bytes.Equal(got, want) {
			t.Errorf("%q scale %d: fast %x, exact %x", tc.s, tc.scale, got, want)
		}
	}
}

// TestScanEnvelopeNewKinds: the scanner skips intervals, lists and
// decimals exactly as the decoder reads them.
func TestScanEnvelopeNewKinds(t *testing.T) {
	tbl := newKindsTable()
	for _, row := range [][]any{newKindsRow(), {int64(8), nil, nil, []any{}, nil, []any{}, []any{}, "12.500", "-99999"}} {
		env := Envelope{Before: row, After: row, Op: 'u', Source: SourceInfo{Connector: "postgresql", Table: "new_kinds", LSN: 9, Position: []byte{1}}}
		buf, err := AppendEnvelope(nil, tbl, &env)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ScanEnvelope(tbl, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !info.HasBefore || !info.HasAfter || info.LSN != 9 || info.Op != 'u' {
			t.Fatalf("scan %+v", info)
		}
		for n := 0; n < len(buf); n++ {
			if _, err := ScanEnvelope(tbl, buf[:n]); err == nil {
				t.Fatalf("scan of %d/%d bytes succeeded", n, len(buf))
			}
		}
	}
}
