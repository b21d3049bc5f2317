package mysql

import (
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// TestColumnDefaults: what the information schema of a real MariaDB gives
// as the value rows hold in columns added to a table with rows: constants
// of every form MariaDB prints (quoted and escaped text, numbers, bits,
// dates), implicit defaults of NOT NULL columns, and the columns whose
// value is not a constant (expressions, generated, AUTO_INCREMENT,
// TIMESTAMP), which must make the rows be read again. Each constant is
// also compared with what the server gives an existing row.
func TestColumnDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "CREATE TABLE p (id INT PRIMARY KEY)", "INSERT INTO p VALUES (1), (2)",
		`ALTER TABLE p ADD COLUMN s VARCHAR(20) DEFAULT 'it''s \\ "x"\n', ADD COLUMN n INT NOT NULL DEFAULT -7,
		ADD COLUMN d DECIMAL(8,2) DEFAULT 1.5, ADD COLUMN f DOUBLE DEFAULT 1e20, ADD COLUMN f2 FLOAT DEFAULT 0.1,
		ADD COLUMN dt DATETIME DEFAULT current_timestamp(), ADD COLUMN dd DATE DEFAULT '2020-01-02',
		ADD COLUMN ts TIMESTAMP NULL DEFAULT '2020-01-02 03:04:05', ADD COLUMN b BIT(1) DEFAULT b'1',
		ADD COLUMN e ENUM('a','b') NOT NULL, ADD COLUMN e2 ENUM('a','b') DEFAULT 'b', ADD COLUMN nn INT NOT NULL,
		ADD COLUMN sn VARCHAR(5) NOT NULL, ADD COLUMN ex INT DEFAULT (1 + 2), ADD COLUMN nul INT DEFAULT NULL,
		ADD COLUMN plain INT, ADD COLUMN l1 VARCHAR(5) CHARACTER SET latin1 DEFAULT 'é', ADD COLUMN dn DATE NOT NULL,
		ADD COLUMN y YEAR DEFAULT 2020, ADD COLUMN r DOUBLE DEFAULT rand(), ADD COLUMN em VARCHAR(5) DEFAULT '',
		ADD COLUMN tt TINYINT NOT NULL DEFAULT '5', ADD COLUMN g INT AS (id * 2) VIRTUAL,
		ADD COLUMN bin VARBINARY(4) DEFAULT 'ab', ADD COLUMN dz DATE DEFAULT '0000-00-00'`)
	desc, err := describeTable(t.Context(), e.db, FlavorMariaDB, e.name, "p")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		col  string
		has  bool
		want any // nil: no constant
	}{
		{"s", true, "it's \\ \"x\"\n"}, {"n", true, int64(-7)}, {"d", true, "1.50"}, {"f", true, 1e20},
		{"f2", true, float32(0.1)}, {"dt", true, nil}, {"dd", true, int32(18263)}, {"ts", true, nil},
		{"b", true, true}, {"e", true, "a"}, {"e2", true, "b"}, {"nn", true, int64(0)}, {"sn", true, ""},
		{"ex", true, nil}, {"nul", false, nil}, {"plain", false, nil}, {"l1", true, "é"}, {"dn", false, nil},
		{"y", true, int64(2020)}, {"r", true, nil}, {"em", true, ""}, {"tt", true, int64(5)}, {"g", true, nil},
		{"bin", true, nil}, {"dz", false, nil},
	} {
		i := desc.table.ColumnIndex(tc.col)
		if i < 0 {
			t.Fatalf("no column %s", tc.col)
		}
		c, col := desc.cols[i], desc.table.Columns[i]
		if c.HasDefault != tc.has || col.Default != tc.want {
			t.Errorf("column %s: HasDefault %t, Default %#v; want %t, %#v", tc.col, c.HasDefault, col.Default, tc.has, tc.want)
		}
		if tc.want == nil {
			continue
		}
		// The constant is what the server gives the rows already there.
		var raw sql.RawBytes
		row, err := e.db.Query(fmt.Sprintf("SELECT %s FROM p WHERE id = 1", selectExpr(&c, quoteIdent(tc.col))))
		if err != nil {
			t.Fatal(err)
		}
		row.Next()
		if err := row.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		got, err := fromText(&c, raw)
		row.Close()
		if err != nil || got != tc.want {
			t.Errorf("column %s: the row holds %#v (%v), the default is %#v", tc.col, got, err, tc.want)
		}
	}
}

// TestColumnDefaultForms: MariaDB's and MySQL's forms of COLUMN_DEFAULT.
func TestColumnDefaultForms(t *testing.T) {
	t.Parallel()
	str := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	for _, tc := range []struct {
		name string
		c    infoColumn
		has  bool
		want any
	}{
		{"mariadb quoted", infoColumn{DataType: "varchar", ColumnType: "varchar(9)", Charset: "utf8mb4", Default: str(`'a''b\\c\tq'`), QuotedDefault: true, Nullable: true}, true, "a'b\\c\tq"},
		{"mariadb NULL", infoColumn{DataType: "int", ColumnType: "int(11)", Default: str("NULL"), QuotedDefault: true, Nullable: true}, false, nil},
		{"mariadb expression", infoColumn{DataType: "int", ColumnType: "int(11)", Default: str("(1 + 2)"), QuotedDefault: true}, true, nil},
		{"mariadb bare word", infoColumn{DataType: "varchar", ColumnType: "varchar(9)", Charset: "utf8mb4", Default: str("uuid()"), QuotedDefault: true}, true, nil},
		{"mysql literal", infoColumn{DataType: "varchar", ColumnType: "varchar(9)", Charset: "utf8mb4", Default: str("'red'"), Nullable: true}, true, "'red'"},
		{"mysql NULL", infoColumn{DataType: "int", ColumnType: "int", Nullable: true}, false, nil},
		{"mysql number", infoColumn{DataType: "bigint", ColumnType: "bigint", Default: str("-9007199254740993")}, true, int64(-9007199254740993)},
		{"mysql expression", infoColumn{DataType: "double", ColumnType: "double", Default: str("rand()"), Extra: "DEFAULT_GENERATED"}, true, nil},
		{"mysql current_timestamp", infoColumn{DataType: "datetime", ColumnType: "datetime", Default: str("CURRENT_TIMESTAMP")}, true, nil},
		{"mysql bit", infoColumn{DataType: "bit", ColumnType: "bit(1)", Precision: 1, Default: str("b'0'")}, true, false},
		{"mysql decimal not null", infoColumn{DataType: "decimal", ColumnType: "decimal(5,3)", Precision: 5, Scale: 3}, true, "0.000"},
		{"auto_increment", infoColumn{DataType: "int", ColumnType: "int", Extra: "auto_increment"}, true, nil},
		{"mysql stored generated", infoColumn{DataType: "int", ColumnType: "int", Extra: "STORED GENERATED", Nullable: true}, true, nil},
	} {
		c := tc.c
		c.Name = "c"
		ct, err := fromInfo(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		col, err := ct.column()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if ct.HasDefault != tc.has || col.Default != tc.want {
			t.Errorf("%s: HasDefault %t, Default %#v; want %t, %#v", tc.name, ct.HasDefault, col.Default, tc.has, tc.want)
		}
	}
}

// TestAddedDefaultTypeChangedLater: a reader behind two ALTERs (its
// emitter holds it until both are done) — a column added with a default the sink keeps, then
// its type changed — sees at the first one the information schema as it
// is after the second, and takes the default for carried; the binlog's
// rows between the two have the old type, so their column carries no
// default, and the table's rows are read again (snapshot rows with the
// default). A column whose type did not change reads nothing again.
func TestAddedDefaultTypeChangedLater(t *testing.T) {
	t.Parallel()
	for _, changed := range []bool{true, false} {
		e := newEnv(t)
		wt := e.grantWatermarks(t)
		e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2), (3)")
		d := newDedupe(1)
		r, _ := e.reader(t, newMemState(), d, "t", func(c *Config) {
			c.WatermarkTable = wt
			c.KeepsDefault = func(schema.Column) bool { return true }
		})
		e.exec(t, "INSERT INTO t VALUES (10)")
		// The reader waits in Emit (its insert's or a heartbeat's) until
		// both ALTERs are done. A slow Emit instead lost the race under
		// load: the reader read the second ALTER's type at the first.
		release := d.holdEmits(t)
		e.exec(t, "ALTER TABLE t ADD COLUMN c INT DEFAULT 5", "INSERT INTO t VALUES (4, 6)")
		if changed {
			e.exec(t, "ALTER TABLE t MODIFY c BIGINT DEFAULT 5")
		}
		e.exec(t, "INSERT INTO t VALUES (5, 7)")
		release()
		got := d.waitFor(t, "the inserts", func(cs []source.Change) bool {
			n := 0
			for _, c := range cs {
				if c.Op == source.OpCreate {
					n++
				}
			}
			return n >= 3
		})
		if !changed {
			// A re-read is queued (snapshot.Engine.Restart) in the stream
			// before the insert after the ALTER is emitted: none is now.
			for _, p := range r.inc.Progress() {
				t.Errorf("type not changed: the table is read again (origin %s, %d rows), want no re-read", p.Origin, p.Rows)
			}
		} else {
			got = d.waitFor(t, "snapshot rows", func(cs []source.Change) bool {
				n := 0
				for _, c := range cs {
					if c.Snapshot {
						n++
					}
				}
				return n >= 6
			})
		}
		read := 0
		for _, c := range got {
			if c.Snapshot {
				read++
				if id := c.After[0]; id.(int64) <= 3 && fmt.Sprint(c.After[1]) != "5" {
					t.Errorf("type changed %t: snapshot row %v, want c = 5", changed, c.After)
				}
			}
		}
		if (read > 0) != changed {
			t.Errorf("type changed %t: %d rows read again; re-reads %+v", changed, read, r.inc.Progress())
		}
	}
}

// TestAddedColumnsReaderBehind: a reader behind two ALTERs of one table,
// each adding a column with a default the sink keeps, describes the table
// at the first with both columns (the information schema is ahead of it);
// the second ADD is then no recreation of a column the mirror had, and
// nothing is read again. A column dropped and added again while the reader
// is behind still is: the mirror holds its old values.
func TestAddedColumnsReaderBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wt := e.grantWatermarks(t)
	e.exec(t, "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2), (3)")
	d := newDedupe(1)
	r, _ := e.reader(t, newMemState(), d, "t", func(c *Config) {
		c.WatermarkTable = wt
		c.KeepsDefault = func(schema.Column) bool { return true }
	})
	qn := e.name + ".t"
	inserted := func(id int64) func([]source.Change) bool {
		return func(cs []source.Change) bool {
			for _, c := range cs {
				if c.Op == source.OpCreate && c.After[0] == any(id) {
					return true
				}
			}
			return false
		}
	}
	runs := func() []string {
		var out []string
		for _, p := range r.inc.Progress() {
			if p.Table == qn {
				out = append(out, p.Origin)
			}
		}
		return out
	}
	// runIDs are the table's runs by id: a restart replaces the table's
	// runs (finished ones too) with a new one, so only a new id shows it.
	runIDs := func() map[string]string {
		out := map[string]string{}
		for _, p := range r.inc.Progress() {
			if p.Table == qn {
				out[p.ID] = p.Origin
			}
		}
		return out
	}

	// The reader waits in Emit (its insert's or a heartbeat's) until the
	// ALTERs are done.
	e.exec(t, "INSERT INTO t VALUES (10)")
	release := d.holdEmits(t)
	e.exec(t, "ALTER TABLE t ADD COLUMN a INT DEFAULT 1", "ALTER TABLE t ADD COLUMN c INT DEFAULT 5", "INSERT INTO t VALUES (4, 2, 6)")
	release()
	// Restart is called in the stream before the insert after the ALTERs
	// is emitted: once it is kept, a re-read would be queued.
	d.waitFor(t, "the insert after the ALTERs", inserted(4))
	if got := runs(); len(got) > 0 {
		t.Errorf("columns added while the reader was behind: the table is read again (origins %v), want no re-read", got)
	}

	e.exec(t, "INSERT INTO t VALUES (11, 2, 6)")
	release = d.holdEmits(t)
	e.exec(t, "ALTER TABLE t DROP COLUMN c", "ALTER TABLE t ADD COLUMN c INT DEFAULT 9", "INSERT INTO t VALUES (5, 2, 7)")
	release()
	d.waitFor(t, "the insert after the column was added again", inserted(5))
	if got := runs(); !slices.Contains(got, "recreated-column") {
		t.Errorf("a column dropped and added again while the reader was behind: re-reads %v, want one of origin recreated-column", got)
	}

	// The reader sees c dropped, then describes the table at another
	// table's ALTER after c was added again (in lower case: refresh picks
	// the tables whose bare name a statement holds, case-sensitively): c
	// is no column ahead, its ADD is a re-added one.
	e.exec(t, "CREATE TABLE u (id INT PRIMARY KEY)", "ALTER TABLE t DROP COLUMN c", "INSERT INTO t VALUES (12, 2)")
	d.waitFor(t, "the insert after the DROP", inserted(12))
	before := runIDs()
	e.exec(t, "INSERT INTO t VALUES (13, 2)")
	release = d.holdEmits(t)
	e.exec(t, "alter table u add column z int", "ALTER TABLE t ADD COLUMN c INT DEFAULT 8", "INSERT INTO t VALUES (14, 2, 8)")
	release()
	d.waitFor(t, "the insert after the column was added again", inserted(14))
	again := false
	for id, origin := range runIDs() {
		if _, ok := before[id]; !ok && origin == "recreated-column" {
			again = true
		}
	}
	if !again {
		t.Errorf("a column dropped, then added again while the reader was behind: re-reads %v (before: %v), want a new one of origin recreated-column", runIDs(), before)
	}
}

// TestAheadColumns: which columns of a description read at a DDL
// statement the stream has not yet seen added.
func TestAheadColumns(t *testing.T) {
	t.Parallel()
	desc := func(ahead []string, cols ...string) *tableDesc {
		d := &tableDesc{db: "db", name: "t", table: &schema.Table{}, ahead: ahead}
		for _, c := range cols {
			d.table.Columns = append(d.table.Columns, schema.Column{Name: c})
		}
		return d
	}
	for _, tc := range []struct {
		name, stmt, db string
		old, nd        *tableDesc
		dropped        []string
		want           []string
	}{
		{"this table's first ADD", "ALTER TABLE t ADD COLUMN a INT", "db", desc(nil, "id"), desc(nil, "id", "a", "c"), nil, []string{"c"}},
		{"the ADD of one ahead", "ALTER TABLE t ADD COLUMN C INT", "db", desc([]string{"c"}, "id", "a", "c"), desc(nil, "id", "a", "c"), nil, nil},
		{"a DROP of one ahead", "ALTER TABLE db.t DROP c", "other", desc([]string{"c"}, "id", "c"), desc(nil, "id", "c"), nil, nil},
		{"a rename to it", "ALTER TABLE t CHANGE x c INT", "db", desc(nil, "id"), desc(nil, "id", "c"), nil, nil},
		{"another table's ALTER", "ALTER TABLE u ADD c INT", "db", desc([]string{"a"}, "id", "a"), desc(nil, "id", "a", "c"), nil, []string{"a", "c"}},
		{"a CREATE in another database", "CREATE TABLE t (id INT)", "other", desc(nil, "id"), desc(nil, "id", "c"), nil, []string{"c"}},
		{"a CREATE that may name it", "CREATE OR REPLACE TABLE t (id INT, c INT)", "db", desc([]string{"a"}, "id", "a"), desc(nil, "id", "a", "c"), nil, nil},
		{"a RENAME naming its database", "RENAME TABLE db.t TO db.u, db.v TO db.t", "other", desc(nil, "id"), desc(nil, "id", "c"), nil, nil},
		{"a dropped column", "ALTER TABLE u ADD c INT", "db", desc([]string{"a"}, "id", "a"), desc(nil, "id"), nil, nil},
		{"one the mirror saw dropped", "ALTER TABLE u ADD x INT", "db", desc(nil, "id"), desc(nil, "id", "c"), []string{"C"}, nil},
	} {
		if got := aheadColumns(tc.old, tc.nd, tc.stmt, tc.db, tc.dropped); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q at %s: ahead %q, want %q", tc.name, tc.stmt, tc.db, got, tc.want)
		}
	}
}
