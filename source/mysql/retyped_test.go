package mysql

import (
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestKeepsValues: the type changes that cannot change a stored value,
// and those that can (under a non-strict sql_mode: '?' for a character
// the charset lacks, strings cut, numbers clamped, NULL made zero).
func TestKeepsValues(t *testing.T) {
	ct := func(typ, cs string) columnType { return columnType{Type: typ, Charset: cs, Null: true} }
	for _, tc := range []struct {
		was, now columnType
		keeps    bool
	}{
		{ct("varchar(20)", "utf8mb4"), ct("varchar(20)", "utf8mb4"), true},
		{ct("varchar(20)", "utf8mb4"), ct("varchar(40)", "utf8mb4"), true},
		{ct("varchar(20)", "utf8mb4"), ct("text", "utf8mb4"), true},
		{ct("varchar(20)", "utf8mb4"), ct("varchar(4)", "utf8mb4"), false},
		{ct("varchar(20)", "utf8mb4"), ct("varchar(20)", "ascii"), false},
		{ct("varchar(20)", "latin1"), ct("varchar(20)", "utf8mb4"), true},
		{ct("varchar(20)", "ascii"), ct("varchar(20)", "latin1"), true},
		{ct("varchar(20)", "utf8mb4"), ct("varchar(20)", "utf8mb3"), false},
		{ct("varchar(20)", "utf8"), ct("varchar(20)", "utf8mb3"), true}, // a server upgrade's new name
		{ct("varchar(20)", "utf8mb3"), ct("varchar(20)", "utf8mb4"), true},
		{ct("varchar(20)", "latin1"), ct("varchar(20)", "utf8"), true},
		{ct("char(5)", "utf8mb4"), ct("varchar(5)", "utf8mb4"), true},
		{ct("varchar(5)", "utf8mb4"), ct("char(5)", "utf8mb4"), false},  // trailing spaces go
		{ct("text", "utf8mb4"), ct("varchar(16383)", "utf8mb4"), false}, // 65,535 one-byte characters
		{ct("text", "utf8mb4"), ct("mediumtext", "utf8mb4"), true},
		{ct("mediumtext", "utf8mb4"), ct("text", "utf8mb4"), false},
		{ct("int(11)", ""), ct("bigint(20)", ""), true},
		{ct("int", ""), ct("bigint", ""), true},
		{ct("bigint(20)", ""), ct("int(11)", ""), false},
		{ct("int(10) unsigned", ""), ct("int(11)", ""), false},
		{ct("int(10) unsigned", ""), ct("bigint(20)", ""), true},
		{ct("int(11)", ""), ct("bigint(20) unsigned", ""), false},
		{ct("tinyint(1)", ""), ct("smallint(6)", ""), true},
		{ct("decimal(10,2)", ""), ct("decimal(12,2)", ""), true},
		{ct("decimal(10,2)", ""), ct("decimal(12,1)", ""), false},
		{ct("decimal(10,2)", ""), ct("decimal(8,2)", ""), false},
		{ct("float", ""), ct("double", ""), true},
		{ct("double", ""), ct("float", ""), false},
		{ct("int(11)", ""), ct("varchar(20)", "utf8mb4"), false},
		{ct("datetime", ""), ct("datetime(3)", ""), true},
		{ct("datetime(6)", ""), ct("datetime(3)", ""), false},
		{ct("datetime", ""), ct("timestamp", ""), false},
		{ct("date", ""), ct("datetime", ""), false},
		{ct("enum('a','b')", "utf8mb4"), ct("enum('a','b','c')", "utf8mb4"), true},
		{ct("enum('a','b')", "utf8mb4"), ct("enum('c','a','b')", "utf8mb4"), true},
		{ct("enum('a','b')", "utf8mb4"), ct("enum('a','x')", "utf8mb4"), false},
		{ct("enum('it''s','b,c')", "utf8mb4"), ct("enum('it''s','b,c','d')", "utf8mb4"), true},
		{ct("enum('a)','b')", "utf8mb4"), ct("enum('a)')", "utf8mb4"), false},
		{ct("set('a','b')", "utf8mb4"), ct("set('a','b','c')", "utf8mb4"), true},
		{ct("varbinary(10)", ""), ct("varbinary(20)", ""), true},
		{ct("varbinary(10)", ""), ct("blob", ""), true},
		{ct("binary(10)", ""), ct("varbinary(10)", ""), true},
		{ct("varbinary(10)", ""), ct("binary(10)", ""), false}, // zero padding
		{ct("binary(10)", ""), ct("binary(12)", ""), false},
		{ct("bit(4)", ""), ct("bit(8)", ""), true},
		{columnType{Type: "int(11)", Null: true}, columnType{Type: "int(11)"}, false}, // NULL becomes 0
		{columnType{Type: "int(11)"}, columnType{Type: "int(11)", Null: true}, true},
		{columnType{Type: "int(11)", Null: true}, columnType{Type: "bigint(20)"}, false},
	} {
		if got := keepsValues(tc.was, tc.now); got != tc.keeps {
			t.Errorf("keepsValues(%s -> %s) = %v, want %v", tc.was, tc.now, got, tc.keeps)
		}
	}
}

func TestParseColumnType(t *testing.T) {
	p := parseColumnType("enum('a,b','it''s',')')")
	if p.base != "enum" || len(p.args) != 3 || p.args[0] != "'a,b'" || p.args[1] != "'it''s'" || p.args[2] != "')'" {
		t.Errorf("enum: %+v", p)
	}
	if p := parseColumnType("decimal(10,2) unsigned zerofill"); p.base != "decimal" || !p.unsigned || p.arg(0, 0) != 10 || p.arg(1, 0) != 2 {
		t.Errorf("decimal: %+v", p)
	}
	if p := parseColumnType("bigint unsigned"); p.base != "bigint" || !p.unsigned {
		t.Errorf("bigint: %+v", p)
	}
}

// TestRetypedWhileStreaming: a MODIFY that keeps every value (a wider
// VARCHAR) reads nothing; one that cuts values under a non-strict
// sql_mode (a shorter VARCHAR), with only the DDL in the binlog, has the
// table read again at the statement, so the rows hold the cut values.
func TestRetypedWhileStreaming(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), s VARCHAR(20))",
		"INSERT INTO t VALUES (1, 'a', 'long1'), (2, 'b', 'long2'), (3, 'c', 'long3')")
	wt := e.grantWatermarks(t)
	d := newDedupe(1)
	r, _ := e.reader(t, newMemState(), d, "t", func(c *Config) { c.WatermarkTable = wt })
	qt := e.name + ".t"

	e.exec(t, "ALTER TABLE t MODIFY v VARCHAR(40)", "INSERT INTO t VALUES (10, 'after', 'x')")
	d.waitFor(t, "the row after the wider VARCHAR", func(cs []source.Change) bool { return len(fold(cs, qt)) == 1 })
	if p := r.Snapshots().Progress(); len(p) != 0 {
		t.Fatalf("a wider VARCHAR started snapshots: %+v", p)
	}

	e.session(t, "SET SESSION sql_mode = ''", "ALTER TABLE t MODIFY s VARCHAR(4)")
	d.waitFor(t, "the rows read again with s cut", func(cs []source.Change) bool {
		m := fold(cs, qt)
		return len(m) == 4 && m["[1]"] == "[1 a long]" && m["[3]"] == "[3 c long]" && m["[10]"] == "[10 after x]"
	})
	p := r.Snapshots().Progress()
	if len(p) != 1 || p[0].Origin != "column-type-changed" {
		t.Errorf("snapshots %+v, want one, origin column-type-changed", p)
	}
}
