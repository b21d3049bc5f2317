package schema

import (
	"fmt"
	"testing"
)

// benchTable is the benchmark row shape: bigint, int, text (40 chars),
// numeric(12,2), timestamptz, bool, small jsonb, float8.
func benchTable() *Table {
	return &Table{Namespace: "public", Name: "bench", Columns: []Column{
		{Name: "id", Kind: Int64, SourceType: "int8"},
		{Name: "n", Kind: Int32, Nullable: true, SourceType: "int4"},
		{Name: "label", Kind: String, Nullable: true, SourceType: "text"},
		{Name: "amount", Kind: Decimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
		{Name: "at", Kind: TimestampTZ, Nullable: true, SourceType: "timestamptz"},
		{Name: "ok", Kind: Bool, Nullable: true, SourceType: "bool"},
		{Name: "doc", Kind: JSON, Nullable: true, SourceType: "jsonb"},
		{Name: "score", Kind: Float64, Nullable: true, SourceType: "float8"},
	}, Key: []int{0}}
}

func benchEnvelope(i int) Envelope {
	return Envelope{
		After: []any{int64(1_000_000 + i), int64(i % 1000), fmt.Sprintf("%040d", i), fmt.Sprintf("%d.%02d", 1234567+i, i%100),
			int64(1_700_000_000_000_000 + i), i%2 == 0, `{"k": 1, "tags": ["a", "b"]}`, float64(i) / 7},
		Op: 'c', TsMs: 1_700_000_000_123,
		Source: SourceInfo{Version: "0.1.0", Connector: "postgresql", Name: "shop", TsMs: 1_700_000_000_000, Snapshot: "false",
			DB: "shop", Schema: "public", Table: "bench", TxID: 7_777, LSN: 0x16B3748 + uint64(i),
			Position: []byte{0, 0, 0, 0, 1, 0x6B, 0x37, 0x48, 0, 0, 0, 1}},
	}
}

// BenchmarkEnvelope measures one record per operation in each direction;
// the goal is at most 1 µs. The raw-copy sub-benchmark is the floor on the
// same machine: copying the encoded bytes once.
func BenchmarkEnvelope(b *testing.B) {
	tbl := benchTable()
	env := benchEnvelope(42)
	enc, err := AppendEnvelope(nil, tbl, &env)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		buf := make([]byte, 0, 512)
		for b.Loop() {
			buf, err = AppendEnvelope(buf[:0], tbl, &env)
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeEnvelope(tbl, enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scan", func(b *testing.B) { // the sink's fetcher: where the after-image is, the op, the position
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ScanEnvelope(tbl, enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-copy", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		dst := make([]byte, len(enc))
		for b.Loop() {
			copy(dst, enc)
		}
	})
}

func BenchmarkKey(b *testing.B) {
	tbl := benchTable()
	env := benchEnvelope(42)
	enc, _ := AppendKey(nil, tbl, env.After)
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf, _ = AppendKey(buf[:0], tbl, env.After)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodeKey(tbl, enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
