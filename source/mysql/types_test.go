package mysql

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// typesDDL has a column of every type family, in both character sets cdcd
// converts, with generated and invisible columns.
const typesDDL = `CREATE TABLE types (
	id INT PRIMARY KEY,
	ti TINYINT, tiu TINYINT UNSIGNED, si SMALLINT, siu SMALLINT UNSIGNED, mi MEDIUMINT, miu MEDIUMINT UNSIGNED,
	i INT, iu INT UNSIGNED, bi BIGINT, biu BIGINT UNSIGNED, bo BOOLEAN,
	d DECIMAL(10,2), dbig DECIMAL(65,30), d0 DECIMAL(5,0), du DECIMAL(6,3) UNSIGNED,
	f FLOAT, db DOUBLE,
	b1 BIT(1), b9 BIT(9), b64 BIT(64),
	y YEAR, dt DATE, tm TIME, tm6 TIME(6), dtm DATETIME, dtm3 DATETIME(3), dtm6 DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL,
	c CHAR(5), vc VARCHAR(50), tx TEXT, ltx LONGTEXT, cl CHAR(5) CHARACTER SET latin1, vcl VARCHAR(50) CHARACTER SET latin1,
	txl TEXT CHARACTER SET latin1,
	bn BINARY(4), vb VARBINARY(10), bl BLOB,
	e ENUM('a','b','c d'), st SET('x','y','z'),
	j JSON, g GEOMETRY, p POINT,
	gen INT AS (i * 2) VIRTUAL, gens INT AS (i + 1) STORED,
	inv INT INVISIBLE
)`

var typesRows = []string{
	`INSERT INTO types (id, inv) VALUES (1, NULL)`,
	`INSERT INTO types (id, ti, tiu, si, siu, mi, miu, i, iu, bi, biu, bo, d, dbig, d0, du, f, db, b1, b9, b64, y, dt, tm, tm6,
		dtm, dtm3, dtm6, ts, c, vc, tx, ltx, cl, vcl, txl, bn, vb, bl, e, st, j, g, p, inv) VALUES
		(2, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808, 18446744073709551615, 1,
		-12345678.90, -12345678901234567890123456789012345.123456789012345678901234567890, 99999, 999.999,
		1.1, 0.1, b'1', b'100000001', b'1111111111111111111111111111111111111111111111111111111111111111',
		1901, '1000-01-01', '-838:59:59', '838:59:58.999999',
		'1000-01-01 00:00:00', '2024-02-29 23:59:59.123', '9999-12-31 23:59:59.999999', '1970-01-01 00:00:01.000001',
		'ab', 'héllo wörld 🎉', 'text', REPEAT('x', 70000), 'é€', 'café ÿ ‰', 'Œuvre',
		'ab', x'00ff00', x'deadbeef00', 'c d', 'x,z', '{"b": [1, 2.5, "s"], "a": null, "longer": {"k": true}}',
		ST_GeomFromText('LINESTRING(0 0, 1 1)'), ST_GeomFromText('POINT(1.5 -2)'), 7)`,
	`INSERT INTO types (id, ti, tiu, i, biu, d, dbig, f, db, b9, y, dt, tm, tm6, dtm, dtm6, ts, c, vc, bn, e, st, j) VALUES
		(3, 127, 0, 2147483647, 9223372036854775808, 0.05, 0.000000000000000000000000000001, -3.4028235e38, -1.7976931348623157e308,
		b'000000000', 2155, '9999-12-31', '00:00:00', '-00:00:00.5', '2038-01-19 03:14:08', '1000-01-01 00:00:00.000001',
		'2038-01-19 03:14:07.999999', '', '', x'', '', '', '[]')`,
	`INSERT INTO types (id, y, dt, dtm, ts, tm, d, f, db) VALUES (4, 0, '0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '25:00:00', -0.00, 0, -0)`,
	`INSERT INTO types (id, dt, dtm) VALUES (5, '2024-00-10', '2024-02-00 10:00:00')`,
}

// TestTypeMatrix: every row read from the binlog equals the same row
// selected by the load (myDatabase.ReadChunk, through database/sql and
// through go-mysql's client), and some values are checked exactly.
func TestTypeMatrix(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.exec(t, "SET SESSION sql_mode = ''", typesDDL)
	// sql_mode = '' lets the zero dates in; the pool may use other
	// connections, so each insert sets it again.
	d := newDedupe(1)
	e.reader(t, newMemState(), d, "types")
	e.session(t, append([]string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'"}, typesRows...)...)
	ctx := context.Background()
	streamed := d.waitFor(t, "the rows", func(cs []source.Change) bool { return len(cs) >= len(typesRows) })
	desc, err := describeTable(ctx, e.db, FlavorMariaDB, e.name, "types")
	if err != nil {
		t.Fatal(err)
	}
	tab := streamed[0].Table
	if !tab.Equal(desc.table) {
		t.Errorf("the stream's shape\n%s\ndiffers from the load's\n%s", tab, desc.table)
	}
	for _, load := range e.chunkDatabases(t) { // database/sql and go-mysql's client
		sdb := load.d
		plan, err := sdb.Plan(ctx, e.name+".types", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		chunk, err := sdb.ReadChunk(ctx, e.name+".types", nil, snapshot.ChunkQuery{Upper: plan.Upper, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk.Rows) != len(typesRows) {
			t.Fatalf("%s: selected %d rows, want %d", load.name, len(chunk.Rows), len(typesRows))
		}
		for i, c := range streamed {
			sel := chunk.Rows[i].After
			for j, col := range tab.Columns {
				if !reflect.DeepEqual(c.After[j], sel[j]) {
					t.Errorf("%s: row %v column %s (%s): streamed %#v, selected %#v", load.name, c.After[0], col.Name, col.SourceType, c.After[j], sel[j])
				}
			}
		}
	}
	row := func(id int64) map[string]any {
		for _, c := range streamed {
			if c.After[0] == id {
				m := map[string]any{}
				for j, col := range tab.Columns {
					m[col.Name] = c.After[j]
				}
				return m
			}
		}
		t.Fatalf("row %d not streamed", id)
		return nil
	}
	r2, r3, r4, r5 := row(2), row(3), row(4), row(5)
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"biu max", r2["biu"], "18446744073709551615"},
		{"biu 2^63", r3["biu"], "9223372036854775808"},
		{"dbig", r2["dbig"], "-12345678901234567890123456789012345.123456789012345678901234567890"},
		{"tiny decimal", r3["dbig"], "0.000000000000000000000000000001"},
		{"negative zero decimal", r4["d"], "0.00"},
		{"float", r2["f"], float32(1.1)},
		{"double", r2["db"], 0.1},
		{"float min", r3["f"], float32(-math.MaxFloat32)},
		{"bit(1)", r2["b1"], true},
		{"bit(9)", r2["b9"], []byte{0x01, 0x01}},
		{"bit(64)", r2["b64"], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"time min", r2["tm"], schema.IntervalValue{Micros: -(838*3600 + 59*60 + 59) * 1_000_000}},
		{"time(6)", r2["tm6"], schema.IntervalValue{Micros: (838*3600+59*60+58)*1_000_000 + 999_999}},
		{"time -0.5", r3["tm6"], schema.IntervalValue{Micros: -500_000}},
		{"time 25h", r4["tm"], schema.IntervalValue{Micros: 25 * 3600 * 1_000_000}},
		{"date", r2["dt"], int32(-354285)},
		{"datetime(6)", r2["dtm6"], int64(253402300799999999)},
		{"timestamp", r2["ts"], int64(1_000_001)},
		{"zero date", r4["dt"], nil},
		{"zero datetime", r4["dtm"], nil},
		{"zero timestamp", r4["ts"], nil},
		{"zero month", r5["dt"], nil},
		{"zero day", r5["dtm"], nil},
		{"year 0", r4["y"], int64(0)},
		{"utf8mb4", r2["vc"], "héllo wörld 🎉"},
		{"latin1", r2["cl"], "é€"},
		{"latin1 varchar", r2["vcl"], "café ÿ ‰"},
		{"binary padded", r2["bn"], []byte{'a', 'b', 0, 0}},
		{"binary empty", r3["bn"], []byte{0, 0, 0, 0}},
		{"varbinary trailing zero", r2["bl"], []byte{0xde, 0xad, 0xbe, 0xef, 0x00}},
		{"enum", r2["e"], "c d"},
		{"set", r2["st"], "x,z"},
		{"generated (clipped)", r2["gen"], int64(-2147483648)},
		{"invisible", r2["inv"], int64(7)},
		{"point WKB", fmt.Sprintf("%x", r2["p"]), "0101000000000000000000f83f00000000000000c0"},
	} {
		if !reflect.DeepEqual(chk.got, chk.want) {
			t.Errorf("%s: %#v, want %#v", chk.name, chk.got, chk.want)
		}
	}
	kinds := map[string]schema.Kind{"tiu": schema.Int16, "siu": schema.Int32, "iu": schema.Int64, "biu": schema.Decimal,
		"j": schema.JSON, "tm": schema.Interval, "ts": schema.TimestampTZ, "dtm": schema.Timestamp, "b1": schema.Bool}
	for name, k := range kinds {
		if got := tab.Columns[tab.ColumnIndex(name)].Kind; got != k {
			t.Errorf("column %s: kind %s, want %s", name, got, k)
		}
	}
}
