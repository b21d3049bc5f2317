package postgres

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// benchRelation is the benchmarks' table (id bigint PRIMARY KEY, a int,
// b bigint, c text, d numeric(12,2), e timestamptz, f bool, g float8) and
// one row of it as COPY binary fields.
func benchRelation(tb testing.TB) (*relation, [][]byte) {
	oids := []uint32{20, 23, 20, 25, 1700, 1184, 16, 701}
	mods := []int32{-1, -1, -1, -1, 12<<16 | 2 + 4, -1, -1, -1}
	t := &schema.Table{Namespace: "public", Name: "bench", Key: []int{0}}
	rel := &relation{table: t}
	for i, oid := range oids {
		typ, ok, err := pgdecode.Builtin(oid, mods[i], nil)
		if !ok || err != nil {
			tb.Fatal(oid, err)
		}
		c := typ.Col
		c.Name, c.Nullable = string(rune('a'+i)), i > 0
		t.Columns = append(t.Columns, c)
		rel.types = append(rel.types, typ)
	}
	be8 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	num := []byte{0, 2, 0, 0, 0, 0, 0, 2, 0x01, 0xC8, 0x1E, 0x78} // 456.78
	fields := [][]byte{be8(1234567), binary.BigEndian.AppendUint32(nil, 567), be8(8641969), []byte("row 1234567"), num,
		be8(7_000_000_000_000), {1}, be8(math.Float64bits(411522.333333))}
	return rel, fields
}

// TestTranscoderBenchRow: the benchmarks' row transcodes to what the
// values' encoding writes, and a NULL in a NOT NULL column (the key) or a
// NaN in the numeric(12,2) is refused with dst as it was.
func TestTranscoderBenchRow(t *testing.T) {
	rel, fields := benchRelation(t)
	row := make([]any, len(fields))
	if err := decodeFieldsInto(rel, fields, row, nil); err != nil {
		t.Fatal(err)
	}
	want, err := schema.AppendKey(nil, rel.table, row)
	if err != nil {
		t.Fatal(err)
	}
	mid := len(want)
	if want, _, err = schema.AppendEnvelopeHead(want, rel.table, &schema.Envelope{After: row}); err != nil {
		t.Fatal(err)
	}
	x := rel.transcoder()
	got, gotMid, ok := x.appendRow([]byte("x"), fields, row)
	if !ok || gotMid != mid || !bytes.Equal(got[1:], want) {
		t.Fatalf("transcoded %v %d %x, want %d %x", ok, gotMid, got, mid, want)
	}
	nullKey := append([][]byte{nil}, fields[1:]...)
	nan := append([][]byte{}, fields...)
	nan[4] = []byte{0, 0, 0, 0, 0xC0, 0, 0, 0}
	for _, f := range [][][]byte{nullKey, nan} {
		if got, _, ok := x.appendRow([]byte("x"), f, row); ok || string(got) != "x" {
			t.Fatalf("refused row written: %v %q", ok, got)
		}
	}
}

// BenchmarkRowEncode: a loaded row of the benchmarks' table decoded and
// encoded from its values (Prepare's AppendKey and AppendEnvelopeHead),
// against decoded and transcoded from its COPY fields, then copied (what
// Prepare does with Change.Avro).
func BenchmarkRowEncode(b *testing.B) {
	rel, fields := benchRelation(b)
	row := make([]any, len(fields))
	slab := pgdecode.NewReusableSlab()
	var dst, arena []byte
	b.Run("values", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if i%10000 == 0 {
				slab.Reset()
			}
			_ = decodeFieldsInto(rel, fields, row, slab)
			dst, _ = schema.AppendKey(dst[:0], rel.table, row)
			dst, _, _ = schema.AppendEnvelopeHead(dst, rel.table, &schema.Envelope{After: row})
		}
	})
	x := rel.transcoder()
	b.Run("transcoded", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if i%10000 == 0 {
				slab.Reset()
			}
			_ = decodeFieldsInto(rel, fields, row, slab)
			arena, _, _ = x.appendRow(arena[:0], fields, row)
			dst = append(dst[:0], arena...)
		}
	})
	b.Run("transcode-only", func(b *testing.B) {
		for b.Loop() {
			arena, _, _ = x.appendRow(arena[:0], fields, row)
		}
	})
	b.Run("encode-only", func(b *testing.B) {
		_ = decodeFieldsInto(rel, fields, row, slab)
		for b.Loop() {
			dst, _ = schema.AppendKey(dst[:0], rel.table, row)
			dst, _, _ = schema.AppendEnvelopeHead(dst, rel.table, &schema.Envelope{After: row})
		}
	})
}
