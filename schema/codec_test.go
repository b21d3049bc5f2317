package schema

import (
	"bytes"
	"context"
	"math"
	"math/big"
	"reflect"
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
		Before: before, After: after, Op: 'u', TsMs: 1700000000000,
		Source: SourceInfo{Version: "0.1", Connector: "postgresql", Name: "shop", TsMs: 1699999999000,
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
	if a["id"] != int64(-42) || a["s"] != nil || a["Weird_Name_1"] != "x" || a["k2"] != "key two" {
		t.Fatalf("hamba after = %v", a)
	}
	if r := a["amount"].(*big.Rat); r.FloatString(2) != "-1234567890.12" {
		t.Fatalf("hamba decimal = %v", r.FloatString(2))
	}
	if generic["op"] != "u" || !reflect.DeepEqual(generic["unchanged"], []any{"s"}) {
		t.Fatalf("hamba op/unchanged = %v %v", generic["op"], generic["unchanged"])
	}
	if src := generic["source"].(map[string]any); src["lsn"] != int64(0x16B3748) || src["file"] != nil {
		t.Fatalf("hamba source = %v", src)
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
	after := fullRow()
	after[8] = Unchanged
	for _, env := range []Envelope{
		{After: fullRow(), Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "x", LSN: 77, TxID: 5, TsMs: 123, Position: []byte{9, 8}}},
		{Before: fullRow(), After: after, Op: 'u', Source: SourceInfo{Connector: "postgresql", Table: "x", Snapshot: "true", Schema: "s", Position: []byte{1}}},
		{Before: fullRow(), Op: 'd', Source: SourceInfo{Connector: "mysql", Table: "x", File: "bin.1", Pos: 4, GTID: "g"}},
		{Op: 't', Source: SourceInfo{Table: "x"}},
	} {
		buf, err := AppendEnvelope(nil, tbl, &env)
		if err != nil {
			t.Fatal(err)
		}
		info, err := ScanEnvelope(tbl, buf)
		if err != nil {
			t.Fatal(err)
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
