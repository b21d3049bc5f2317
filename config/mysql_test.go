package config

import (
	"errors"
	"strings"
	"testing"
)

func TestMySQLSource(t *testing.T) {
	c, err := Parse([]byte("pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://cdc:pw@db:3306/shop', tables: [shop.orders], snapshot: never}\n"),
		"cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := Parse([]byte("pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], server_id: 4242, snapshot: never}\n"),
		"cdcd.yaml", testEnv); err != nil || c2.Source.MySQL.ServerID != 4242 {
		t.Errorf("server_id: %v", err)
	}
	m := c.Source.MySQL
	if m.ServerID != defaultServerID("shop") || m.ServerID < 1_000_000 || m.Snapshot != "never" {
		t.Errorf("defaults: %+v", m)
	}
	if got := c.Source.TableNames(); len(got) != 1 || got[0] != "shop.orders" {
		t.Errorf("TableNames = %v", got)
	}
	if ns, tbl := c.Sink.Iceberg.TableIdent("shop.orders"); ns != "cdc" || tbl != "shop_orders" {
		t.Errorf("lands as %s.%s, want cdc.shop_orders", ns, tbl)
	}
	if strings.Contains(c.String(), "pw") {
		t.Error("the password is printed")
	}
	for doc, want := range map[string]string{
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], snapshot: sometimes}\n":                                       "must be initial or never",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], watermark_table: wm}\n":                                       "source.mysql.watermark_table: \"wm\" is not a table name",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b, a.wm], watermark_table: a.wm}\n":                               "is the watermark table",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], incremental: {chunk_rows: -1}}\n":                             "source.mysql.incremental.chunk_rows",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'postgres://x', tables: [a.b], snapshot: never}\n":                                        "must be a URL starting with mysql://",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [ab], snapshot: never}\n":                                            "write database.table",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], flavor: x, snapshot: never}\n":                                "must be mysql or mariadb",
		"pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], snapshot: never}\n  postgres: {dsn: 'host=h', tables: [t]}\n": "exactly one source",
	} {
		_, err := Parse([]byte(doc), "cdcd.yaml", testEnv)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
	// The initial load is the default, incremental (lock-free); the
	// watermark table defaults into the dsn's database, else the first
	// table's.
	for doc, want := range map[string]string{
		"mysql: {dsn: 'mysql://x@h/shop', tables: [a.b]}":                            "shop.cdcd_watermark",
		"mysql: {dsn: 'mysql://x@h', tables: [a.b], snapshot: incremental}":          "a.cdcd_watermark",
		"mysql: {dsn: 'mysql://x@h', tables: [a.b], watermark_table: ops.marks}":     "ops.marks",
		"mysql: {dsn: 'mysql://x@h', tables: [a.b], incremental: {chunk_rows: 500}}": "a.cdcd_watermark",
	} {
		c, err := Parse([]byte("pipeline: shop\nsource:\n  "+doc+"\n"), "cdcd.yaml", testEnv)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if m := c.Source.MySQL; m.Snapshot != "initial" || m.WatermarkTable != want || m.Incremental.ChunkRows < 500 {
			t.Errorf("%s: snapshot %s, watermark table %s, chunk rows %d; want initial, %s", doc, m.Snapshot, m.WatermarkTable, m.Incremental.ChunkRows, want)
		}
	}
	if c, err := Parse([]byte("pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x@h/s', tables: [a.b], read_only: true}\n"), "cdcd.yaml", testEnv); err != nil || !c.Source.MySQL.ReadOnly {
		t.Errorf("read_only: %v", err)
	}
	if c, err := Parse([]byte("pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', tables: [a.b], incremental: {signal_table: a.s}}\n"), "cdcd.yaml", testEnv); err != nil || c.Source.MySQL.Incremental.SignalTable != "a.s" {
		t.Errorf("a signal table for MySQL: %v", err)
	}
	for _, bad := range []string{"tables: [a.b], incremental: {signal_table: s}", "tables: [a.b, a.s], incremental: {signal_table: a.s}",
		"tables: [a.b], watermark_table: a.w, incremental: {signal_table: a.w}"} {
		_, err = Parse([]byte("pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://x', "+bad+"}\n"), "cdcd.yaml", testEnv)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "signal_table") && !strings.Contains(err.Error(), "signal table") {
			t.Errorf("%s: %v, want ErrInvalid naming the signal table", bad, err)
		}
	}
}
