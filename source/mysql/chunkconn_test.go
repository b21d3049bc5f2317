package mysql

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// loadPath is one way the load reads chunks.
type loadPath struct {
	name string
	d    *myDatabase
}

// chunkDatabases are the two ways the load reads chunks: through
// database/sql (read-only snapshots) and through go-mysql's client
// (chunkconn.go), as the reader's user.
func (e *env) chunkDatabases(t *testing.T) []loadPath {
	t.Helper()
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	fast := &myDatabase{db: e.db, flavor: FlavorMariaDB, ci: &ci}
	t.Cleanup(fast.closeConns)
	return []loadPath{{"database/sql", &myDatabase{db: e.db, flavor: FlavorMariaDB}}, {"go-mysql", fast}}
}

// TestInterpolate: arguments become literals in order, escaped; a ? in
// quotes stays; a count that does not match is an error.
func TestInterpolate(t *testing.T) {
	got, err := interpolate("SELECT `a?` FROM t WHERE (x > ? AND y = 'it''s ?' AND z = \"\\\"?\") OR k <= ? OR b = ? OR f = ? OR u = ? OR n = ?",
		[]any{int64(-7), "O'Reilly\\\n\x00\x1a\"", []byte{0, 'a', '\''}, 1.5e-7, uint64(18446744073709551615), []byte(nil)})
	if err != nil {
		t.Fatal(err)
	}
	want := "SELECT `a?` FROM t WHERE (x > -7 AND y = 'it''s ?' AND z = \"\\\"?\") OR k <= 'O\\'Reilly\\\\\\n\\0\\Z\\\"' OR " +
		"b = _binary'\\0a\\'' OR f = 1.5e-07 OR u = 18446744073709551615 OR n = NULL"
	if got != want {
		t.Errorf("interpolate:\n got %s\nwant %s", got, want)
	}
	if _, err := interpolate("SELECT ? + ?", []any{int64(1)}); err == nil {
		t.Error("two placeholders, one argument: no error")
	}
	if _, err := interpolate("SELECT '?'", []any{int64(1)}); err == nil {
		t.Error("no placeholder, one argument: no error")
	}
	if _, err := interpolate("SELECT ?", []any{struct{}{}}); err == nil {
		t.Error("an argument of an unknown type: no error")
	}
}

// TestChunkEmptyValues: empty texts, binaries, enums and sets in a chunk's
// first rows are empty values, not NULL, on both load paths (go-mysql's
// client leaves a column's buffer nil until a value is not empty), and
// NULLs stay NULL.
func TestChunkEmptyValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE ev (id INT PRIMARY KEY, c CHAR(3), vc VARCHAR(5), tx TEXT, vb VARBINARY(4), bl BLOB, en ENUM('', 'a'), st SET('a','b'))",
		"INSERT INTO ev VALUES (1, '', '', '', '', '', '', ''), (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (3, 'x', 'y', 'z', x'01', x'02', 'a', 'a,b')")
	want := [][]any{
		{int64(1), "", "", "", []byte{}, []byte{}, "", ""},
		{int64(2), nil, nil, nil, nil, nil, nil, nil},
		{int64(3), "x", "y", "z", []byte{1}, []byte{2}, "a", "a,b"},
	}
	for _, load := range e.chunkDatabases(t) {
		ch, err := load.d.ReadChunk(context.Background(), e.name+".ev", nil, snapshot.ChunkQuery{Upper: snapshot.Key{"10"}, Limit: 10})
		if err != nil {
			t.Fatalf("%s: %v", load.name, err)
		}
		if len(ch.Rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d", load.name, len(ch.Rows), len(want))
		}
		for i, c := range ch.Rows {
			if !reflect.DeepEqual(c.After, want[i]) {
				t.Errorf("%s: row %d: %#v, want %#v", load.name, i+1, c.After, want[i])
			}
		}
	}
}

// TestTextRow: a text-protocol row packet converts column by column, NULL
// (0xfb) as nil, integers and doubles parsed, an unsigned BIGINT as its
// decimal text without ZEROFILL's zeros, everything else as slabText makes
// it; a packet cut short, with bytes left over, or with a value a column
// refuses is an error naming the column; texts are copies (the packet is
// read into again).
func TestTextRow(t *testing.T) {
	cols := []colType{{Base: "bigint"}, {Base: "int", Unsigned: true}, {Base: "bigint", Unsigned: true}, {Base: "double"},
		{Base: "float"}, {Base: "varchar"}, {Base: "decimal", Precision: 12, Scale: 2}, {Base: "timestamp", FSP: 6}, {Base: "blob"}, {Base: "year"}}
	vals := []string{"-42", "4294967295", "00018446744073709551615", "2.5e-3", "1.100000023841858", "héllo", "-12.50",
		"2023-11-14 22:13:20.123456", "\x00\x01", "2024"}
	packet := func(vals []string, nullAt int) []byte {
		var p []byte
		for i, v := range vals {
			if i == nullAt {
				p = append(p, 0xfb)
				continue
			}
			p = append(p, gomysql.PutLengthEncodedString([]byte(v))...)
		}
		return p
	}
	slabs := takeSlabs(nil, len(cols), true)
	data := packet(vals, -1)
	row := make([]any, len(cols))
	if err := textRow(cols, data, slabs, row); err != nil {
		t.Fatal(err)
	}
	want := []any{int64(-42), int64(4294967295), "18446744073709551615", 2.5e-3, float32(1.1), "héllo"}
	for c := len(want); c < len(cols); c++ {
		v, err := slabText(&cols[c], []byte(vals[c]), &pgdecode.Slab{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, v)
	}
	clear(data) // the next packet is read into the same buffer
	if !reflect.DeepEqual(row, want) {
		t.Errorf("textRow:\n got %#v\nwant %#v", row, want)
	}
	for null := range cols {
		if err := textRow(cols, packet(vals, null), slabs, row); err != nil || row[null] != nil {
			t.Errorf("NULL in column %d: %v, %#v", null+1, err, row[null])
		}
	}
	whole := packet(vals, -1)
	for _, bad := range [][]byte{whole[:len(whole)-1], append(whole, 0), whole[:3], {}} {
		if err := textRow(cols, bad, slabs, row); err != gomysql.ErrMalformPacket {
			t.Errorf("a packet of %d bytes of %d: %v, want a malformed packet", len(bad), len(whole), err)
		}
	}
	for c, v := range map[int]string{0: "4x", 1: "", 3: "nan?", 7: "2023-13-01 00:00:00"} {
		bad := append([]string(nil), vals...)
		bad[c] = v
		var ce *columnError
		if err := textRow(cols, packet(bad, -1), slabs, row); !errors.As(err, &ce) || ce.col != c || !errors.Is(ce.err, errBadValue) {
			t.Errorf("%q in column %d: %v, want a bad value of that column", v, c+1, err)
		}
	}
}

// TestChunkLargeRow: a row larger than a packet (16 MB: the server sends
// it in several, go-mysql's packet layer joins them) reads whole between
// small rows, and the chunk connection does not keep its buffer.
func TestChunkLargeRow(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, mariadbtest.NewServer(t, mariadbserver.Options{Args: []string{"--max-allowed-packet=64M"}}))
	e.exec(t, "CREATE TABLE big (id INT PRIMARY KEY, b LONGBLOB, s VARCHAR(10))",
		"INSERT INTO big VALUES (1, x'01', 'a'), (2, REPEAT('x', 17 << 20), 'b'), (3, NULL, 'c')")
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	d := &myDatabase{db: e.db, flavor: FlavorMariaDB, ci: &ci}
	defer d.closeConns()
	for range 2 { // the second on the same connection
		ch, err := d.ReadChunk(context.Background(), e.name+".big", nil, snapshot.ChunkQuery{Upper: snapshot.Key{"10"}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Rows) != 3 {
			t.Fatalf("%d rows, want 3", len(ch.Rows))
		}
		if r := ch.Rows[0].After; !reflect.DeepEqual(r, []any{int64(1), []byte{1}, "a"}) {
			t.Errorf("row 1: %#v", r)
		}
		if r := ch.Rows[1].After; r[0] != int64(2) || !bytes.Equal(r[1].([]byte), bytes.Repeat([]byte{'x'}, 17<<20)) || r[2] != "b" {
			t.Errorf("row 2: id %v, %d bytes, %v", r[0], len(r[1].([]byte)), r[2])
		}
		if r := ch.Rows[2].After; !reflect.DeepEqual(r, []any{int64(3), nil, "c"}) {
			t.Errorf("row 3: %#v", r)
		}
		if d.own == nil || d.own.broken || d.own.pkt.Cap() > maxKeptPacket {
			t.Fatalf("the chunk connection after the read: %+v", d.own)
		}
	}
}

// TestAtoi: atoi agrees with strconv.ParseInt wherever it answers, and
// answers for every integer of up to 18 digits.
func TestAtoi(t *testing.T) {
	for _, s := range []string{"0", "-0", "7", "-7", "123456789012345678", "-123456789012345678", "999999999999999999",
		"1234567890123456789", "-9223372036854775808", "", "-", "+5", "1_000", "12a", " 1", "٣"} {
		n, ok := atoi([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		digits := len(strings.TrimPrefix(s, "-"))
		switch {
		case ok && (err != nil || n != want):
			t.Errorf("atoi(%q) = %d; strconv: %d, %v", s, n, want, err)
		case !ok && err == nil && digits <= 18 && !strings.HasPrefix(s, "+"):
			t.Errorf("atoi(%q): no answer; strconv: %d", s, want)
		}
	}
}
