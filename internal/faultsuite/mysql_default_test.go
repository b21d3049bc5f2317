package faultsuite

import (
	"fmt"
	"testing"
)

// TestAddedColumnDefaultMariaDB (issue 22): MariaDB's ADD COLUMN (instant,
// or a copy the binlog does not carry) gives every existing row the
// column's value with no row event for it. On format 3 a constant default
// — also a NOT NULL column's implicit one — becomes the Iceberg column's
// initial-default and nothing is read again; on format 2, or for a value
// that is not a constant (an expression of rand(), current_timestamp(), a generated
// column), the table's rows are read again. A column added without a
// default (rows hold NULL, which the mirror has) reads nothing again.
// Every case ends with the mirror equal to the source by iceberg-go's scan.
func TestAddedColumnDefaultMariaDB(t *testing.T) {
	t.Parallel()
	const constants = "ADD COLUMN c VARCHAR(10) DEFAULT 'it''s red', ADD COLUMN k BIGINT NOT NULL DEFAULT 7, ADD COLUMN n INT NOT NULL"
	for _, tc := range []struct {
		name     string
		format   int
		add      string
		insert   string // after INSERT INTO orders (id, g, v
		reread   bool
		defaults map[string]any // Iceberg initial-defaults
	}{
		{"constant/v3", 3, constants, ", n) VALUES (5000, 'a', 1, 3", false, map[string]any{"c": "it's red", "k": float64(7), "n": float64(0)}},
		{"constant/v2", 2, constants, ", n) VALUES (5000, 'a', 1, 3", true, nil},
		{"volatile/v3", 3, "ADD COLUMN r INT DEFAULT (floor(rand() * 1000000)), ADD COLUMN ts DATETIME(6) DEFAULT current_timestamp(6), " +
			"ADD COLUMN gen INT AS (id * 2) VIRTUAL", ") VALUES (5000, 'a', 1", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newMyPipeline(t, []string{"CREATE TABLE orders " + myOrdersDDL}, []string{"orders"}, "")
			p.format = tc.format
			p.writeMyConfig()
			p.myRows("orders", 3000)
			p.start()
			p.waitLoaded(p.name + ".orders")
			p.waitMirror("orders")

			p.sql("ALTER TABLE orders ADD COLUMN plain VARCHAR(10)")
			p.sql("UPDATE orders SET v = -1 WHERE id < 10")
			p.waitMirror("orders")
			if p.logContains("origin=added-default") {
				t.Fatal("a column added without a default made the rows be read again")
			}

			p.sql("ALTER TABLE orders "+tc.add,
				"UPDATE orders SET v = -2 WHERE id BETWEEN 100 AND 200",
				"INSERT INTO orders (id, g, v"+tc.insert+")")
			p.waitMirror("orders")
			if got := p.logContains("origin=added-default"); got != tc.reread {
				t.Errorf("the table's rows were read again: %t, want %t", got, tc.reread)
			}
			if tc.defaults != nil {
				cat := p.openCatalog()
				tbl := p.icebergTable(cat, p.name+".orders")
				closeCatalog(cat)
				for name, want := range tc.defaults {
					f, ok := tbl.Schema().FindFieldByName(name)
					if !ok || fmt.Sprint(f.InitialDefault) != fmt.Sprint(want) {
						t.Errorf("Iceberg column %s: initial-default %v (%T), want %v", name, f.InitialDefault, f.InitialDefault, want)
					}
				}
			}
		})
	}
}
