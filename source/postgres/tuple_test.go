package postgres

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// randTuple encodes a TupleData of random columns.
func randTuple(rng *rand.Rand) []byte {
	n := 1 + rng.IntN(12) // pglogrepl refuses a message shorter than one column
	b := binary.BigEndian.AppendUint16(nil, uint16(n))
	for range n {
		switch k := []byte{'n', 'u', 't', 'b'}[rng.IntN(4)]; k {
		case 'n', 'u':
			b = append(b, k)
		default:
			v := make([]byte, rng.IntN(40))
			for i := range v {
				v[i] = byte(rng.Uint32())
			}
			b = append(b, k)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// randRowMessage encodes a random Insert, Update or Delete.
func randRowMessage(rng *rand.Rand, streamed bool) []byte {
	op := []byte{'I', 'U', 'D'}[rng.IntN(3)]
	b := []byte{op}
	if streamed {
		b = binary.BigEndian.AppendUint32(b, rng.Uint32())
	}
	b = binary.BigEndian.AppendUint32(b, rng.Uint32())
	switch op {
	case 'I':
		b = append(append(b, 'N'), randTuple(rng)...)
	case 'U':
		if rng.IntN(2) == 0 {
			b = append(append(b, []byte{'K', 'O'}[rng.IntN(2)]), randTuple(rng)...)
		}
		b = append(append(b, 'N'), randTuple(rng)...)
	case 'D':
		b = append(append(b, []byte{'K', 'O'}[rng.IntN(2)]), randTuple(rng)...)
	}
	return b
}

// sameTuple compares a parsed tuple with pglogrepl's.
func sameTuple(t *testing.T, what string, got []tupleColumn, present bool, want *pglogrepl.TupleData) {
	t.Helper()
	if present != (want != nil) {
		t.Fatalf("%s: present %v, pglogrepl %v", what, present, want != nil)
	}
	if want == nil {
		return
	}
	if len(got) != len(want.Columns) {
		t.Fatalf("%s: %d columns, pglogrepl %d", what, len(got), len(want.Columns))
	}
	for i, c := range want.Columns {
		if got[i].kind != c.DataType || !bytes.Equal(got[i].data, c.Data) {
			t.Fatalf("%s column %d: %q %x, pglogrepl %q %x", what, i, got[i].kind, got[i].data, c.DataType, c.Data)
		}
	}
}

// TestParseRowMessageAgreesWithPglogrepl holds parseRowMessage to
// pglogrepl's parser on random messages, in and out of stream blocks, with
// one rowMessage reused throughout. (The columns alias the message; that
// the decoded values do not is TestDecodersOwnTheirValues'.)
func TestParseRowMessageAgreesWithPglogrepl(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var m rowMessage
	for i := range 3000 {
		streamed := i%2 == 1
		data := randRowMessage(rng, streamed)
		if err := parseRowMessage(data, streamed, &m); err != nil {
			t.Fatalf("message %d %x: %v", i, data, err)
		}
		want, err := pglogrepl.ParseV2(data, streamed)
		if err != nil {
			t.Fatalf("pglogrepl: %v", err)
		}
		var xid, rel uint32
		var oldKind byte
		var old, new *pglogrepl.TupleData
		switch w := want.(type) {
		case *pglogrepl.InsertMessageV2:
			xid, rel, new = w.Xid, w.RelationID, w.Tuple
		case *pglogrepl.UpdateMessageV2:
			xid, rel, oldKind, old, new = w.Xid, w.RelationID, w.OldTupleType, w.OldTuple, w.NewTuple
		case *pglogrepl.DeleteMessageV2:
			xid, rel, oldKind, old = w.Xid, w.RelationID, w.OldTupleType, w.OldTuple
		}
		if m.op != data[0] || m.rel != rel || (streamed && m.xid != xid) || m.oldKind != oldKind {
			t.Fatalf("message %d: op %q rel %d xid %d old %q; pglogrepl rel %d xid %d old %q", i, m.op, m.rel, m.xid, m.oldKind, rel, xid, oldKind)
		}
		sameTuple(t, "old", m.old, m.hasOld, old)
		sameTuple(t, "new", m.new, m.hasNew, new)
	}
}

// TestParseRowMessageRefusesBadInput: every truncation of a valid message,
// and bad tags, are errors, never a panic or a silently short row.
func TestParseRowMessageRefusesBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var m rowMessage
	for range 200 {
		data := randRowMessage(rng, false)
		for n := range len(data) {
			if err := parseRowMessage(data[:n], false, &m); err == nil {
				t.Fatalf("%x cut to %d bytes: no error", data, n)
			}
		}
		if err := parseRowMessage(append(data, 0), false, &m); err == nil {
			t.Fatalf("%x with a trailing byte: no error", data)
		}
	}
	for _, bad := range [][]byte{
		{'I', 0, 0, 0, 1, 'K', 0, 0},                     // an insert has no old tuple
		{'D', 0, 0, 0, 1, 'N', 0, 0},                     // a delete has no new tuple
		{'U', 0, 0, 0, 1, 'K', 0, 0, 'X', 0, 0},          // no 'N' after the old tuple
		{'I', 0, 0, 0, 1, 'N', 0, 1, 'z'},                // unknown column kind
		{'I', 0, 0, 0, 1, 'N', 0, 1, 'b', 0, 0, 0, 9, 1}, // value past the end
	} {
		if err := parseRowMessage(bad, false, &m); err == nil {
			t.Errorf("%x: no error", bad)
		}
	}
}

func BenchmarkParseRowMessage(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	msgs := make([][]byte, 256)
	for i := range msgs {
		msgs[i] = randRowMessage(rng, false)
	}
	b.Run("cdcd", func(b *testing.B) {
		var m rowMessage
		for i := 0; b.Loop(); i++ {
			if err := parseRowMessage(msgs[i%len(msgs)], false, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pglogrepl", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, err := pglogrepl.ParseV2(msgs[i%len(msgs)], false); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestStreamRowsKeepTheirValues: rows decoded through one rowAlloc (rows
// cut from shared chunks, numbers and texts from its slab) keep their
// values while thousands more are decoded, and a row's capacity ends at
// its own columns (an append to one never writes into the next).
func TestStreamRowsKeepTheirValues(t *testing.T) {
	var types []*pgdecode.Type
	for _, oid := range []uint32{20, 25, 701, 1700} { // int8, text, float8, numeric
		typ, ok, err := pgdecode.Builtin(oid, -1, nil)
		if !ok || err != nil {
			t.Fatalf("builtin %d: %v %v", oid, ok, err)
		}
		types = append(types, typ)
	}
	rel := &relation{table: &schema.Table{Namespace: "public", Name: "t"}, types: types}
	for i := range types {
		rel.table.Columns = append(rel.table.Columns, schema.Column{Name: fmt.Sprint("c", i)})
	}
	numeric42 := []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 42} // 1 digit, weight 0, scale 0: 42
	var a rowAlloc
	var rows [][]any
	for i := range 20000 {
		cols := []tupleColumn{
			{kind: 'b', data: binary.BigEndian.AppendUint64(nil, uint64(i))},
			{kind: 'b', data: []byte(fmt.Sprint("text ", i, strings.Repeat("x", i%300)))},
			{kind: 'b', data: binary.BigEndian.AppendUint64(nil, math.Float64bits(float64(i)/2))},
			{kind: 'b', data: numeric42},
		}
		if i%7 == 0 {
			cols[1] = tupleColumn{kind: 'n'}
		}
		row, err := decodeTuple(rel, cols, true, &a)
		if err != nil {
			t.Fatal(err)
		}
		if cap(row) != len(types) {
			t.Fatalf("row %d: capacity %d, want %d", i, cap(row), len(types))
		}
		rows = append(rows, row)
	}
	for i, row := range rows {
		var text any = fmt.Sprint("text ", i, strings.Repeat("x", i%300))
		if i%7 == 0 {
			text = nil
		}
		want := []any{int64(i), text, float64(i) / 2, "42"}
		for c := range want {
			if row[c] != want[c] {
				t.Fatalf("row %d column %d: %#v, want %#v", i, c, row[c], want[c])
			}
		}
	}
}

// TestStreamPositionsFromChunks: the stream's positions, cut from its
// rowAlloc's chunks across transactions (txState is made anew for each),
// are what pgpos.New makes, stay as they are while thousands more are cut,
// and end at their own bytes (an append to one never writes into the next);
// a key-only before image is a row of its own.
func TestStreamPositionsFromChunks(t *testing.T) {
	var a rowAlloc
	tbl := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id"}, {Name: "v"}}, Key: []int{0}}
	rel := &relation{table: tbl}
	var got []source.Change
	for x := range 40 {
		tx := txState{xid: uint32(x), commitLSN: uint64(1000 + x), alloc: &a}
		for range 100 {
			after := a.row(2)
			after[0], after[1] = int64(len(got)), "v"
			out, err := tx.updateChanges(rel, &rowMessage{}, nil, after, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out...)
		}
	}
	for i, c := range got {
		want := pgpos.New(uint64(1000+i/100), uint32(i%100))
		if !bytes.Equal(c.Pos, want) || cap(c.Pos) != pgpos.Len {
			t.Fatalf("change %d: position %x (capacity %d), want %x", i, []byte(c.Pos), cap(c.Pos), []byte(want))
		}
		_ = append(c.Pos, 0xff)
		if cap(c.Before) != 2 || c.Before[0] != int64(i) || c.Before[1] != nil {
			t.Fatalf("change %d: before image %v (capacity %d)", i, c.Before, cap(c.Before))
		}
		c.Before = append(c.Before, "x")
	}
	for i, c := range got {
		if want := pgpos.New(uint64(1000+i/100), uint32(i%100)); !bytes.Equal(c.Pos, want) || c.Before[0] != int64(i) {
			t.Fatalf("change %d: position %x, before %v after appends to the others", i, []byte(c.Pos), c.Before)
		}
	}
}
