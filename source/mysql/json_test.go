package mysql

import (
	"strings"
	"testing"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

func TestMySQLJSONText(t *testing.T) {
	for in, want := range map[string]string{
		// go-mysql's rendering (Go's encoder) → MySQL's.
		`{"b":[1,2.5,"s\u003c\u0026"],"a":null,"longer":{"k":true}}`: `{"a": null, "b": [1, 2.5, "s<&"], "longer": {"k": true}}`,
		`{"bb":1,"a":2,"ccc":3,"ab":4}`:                              `{"a": 2, "ab": 4, "bb": 1, "ccc": 3}`,
		`[3.0,1e+300,1.5e-7,-0.0,18446744073709551615]`:              `[3.0, 1e300, 1.5e-7, -0.0, 18446744073709551615]`,
		`"line\nbreak \"q\" \\ /\u0001é"`:                            `"line\nbreak \"q\" \\ /\u0001é"`,
		`[]`:                                                         `[]`, `{}`: `{}`, `true`: `true`,
	} {
		got, err := mysqlJSONText([]byte(in))
		if err != nil || got != want {
			t.Errorf("mysqlJSONText(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{`{"a":`, `[1] 2`, ``} {
		if _, err := mysqlJSONText([]byte(bad)); err == nil {
			t.Errorf("mysqlJSONText(%q) accepted", bad)
		}
	}
}

func FuzzMySQLJSONText(f *testing.F) {
	f.Add([]byte(`{"b":[1,2.5,"s"],"a":null}`))
	f.Add([]byte(`[1e300,-0.0]`))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := mysqlJSONText(in)
		if err != nil {
			return
		}
		// MySQL's rendering is a fixed point: rendering it again changes nothing.
		again, err := mysqlJSONText([]byte(out))
		if err != nil || again != out {
			t.Fatalf("%q → %q → %q, %v", in, out, again, err)
		}
	})
}

// TestMySQLTableMapJSON: a MySQL table map with a JSON column (as a MySQL
// 8 server writes it with binlog_row_metadata=FULL) maps to a JSON column
// whose values are re-rendered as MySQL prints them.
func TestMySQLTableMapJSON(t *testing.T) {
	tm := &replication.TableMapEvent{
		TableID: 7, Schema: []byte("shop"), Table: []byte("docs"), ColumnCount: 3,
		ColumnType: []byte{gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_JSON, gomysql.MYSQL_TYPE_LONGLONG},
		ColumnMeta: []uint16{0, 4, 0}, NullBitmap: []byte{0b110},
		SignednessBitmap: []byte{0b01000000}, // id signed, n unsigned
		ColumnName:       [][]byte{[]byte("id"), []byte("j"), []byte("n")},
		PrimaryKey:       []uint64{0},
	}
	desc := &tableDesc{db: "shop", name: "docs"}
	v, err := buildVersion(desc, tm, collations{})
	if err != nil {
		t.Fatal(err)
	}
	if got := v.table.String(); got != "shop.docs(id int32 key, j json null, n decimal(20,0) null)" {
		t.Errorf("shape %s", got)
	}
	row, f, err := v.decodeRow([]any{int32(1), `{"b":1,"a":[2.0]}`, uint64(1 << 63)}, nil)
	if err != nil || f != nil {
		t.Fatal(err, f)
	}
	if row[1] != `{"a": [2.0], "b": 1}` || row[2] != "9223372036854775808" {
		t.Errorf("row %#v", row)
	}
	// Without FULL metadata (no column names) the table is refused with the fix.
	bare := &replication.TableMapEvent{TableID: 7, Schema: tm.Schema, Table: tm.Table, ColumnCount: 3,
		ColumnType: tm.ColumnType, ColumnMeta: tm.ColumnMeta, NullBitmap: tm.NullBitmap}
	if _, err := buildVersion(desc, bare, collations{}); err == nil || !strings.Contains(err.Error(), "binlog_row_metadata = FULL") {
		t.Errorf("a table map without names: %v", err)
	}
}
