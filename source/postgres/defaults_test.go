package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestAddedColumnDefaults: the value rows that predate a column added
// with a default hold (attmissingval) becomes the column's Default, decoded
// like a row's value whatever the type's wire format; a volatile default
// rewrites the table (no missing value: the rows are read again), a
// column added without one and a column of the CREATE TABLE have none.
func TestAddedColumnDefaults(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, v text DEFAULT 'created');
		INSERT INTO t VALUES (1, 'a');
		ALTER TABLE t ADD COLUMN s text DEFAULT 'red, "x"', ADD COLUMN k bigint NOT NULL DEFAULT 7,
			ADD COLUMN n numeric(8,2) DEFAULT 12.3, ADD COLUMN u uuid DEFAULT '0102030405060708090a0b0c0d0e0f10',
			ADD COLUMN b boolean DEFAULT true, ADD COLUMN ts timestamptz DEFAULT '2020-01-01 00:00:00+00',
			ADD COLUMN m money DEFAULT 5, ADD COLUMN plain text, ADD COLUMN z int DEFAULT NULL;
		CREATE TABLE t2 (id int PRIMARY KEY); INSERT INTO t2 VALUES (1);
		ALTER TABLE t2 ADD COLUMN r float8 DEFAULT random()`)
	if err != nil {
		t.Fatal(err)
	}
	var relid uint32
	if err := conn.QueryRow(ctx, `SELECT 't'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	ct, err := describeTable(ctx, conn, relid)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := catalogRelation(ctx, newTypeResolver(conn), ct)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"id": nil, "v": nil, "s": `red, "x"`, "k": int64(7), "n": "12.30",
		"u": [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, "b": true, "ts": int64(1577836800000000),
		"plain": nil, "z": nil}
	for _, c := range rel.table.Columns {
		w, ok := want[c.Name]
		if !ok {
			if c.Name == "m" && c.Default == nil {
				t.Errorf("column m (money): no default")
			}
			continue
		}
		if c.Default != w {
			t.Errorf("column %s (%s): default %#v, want %#v", c.Name, c.SourceType, c.Default, w)
		}
	}
	if err := conn.QueryRow(ctx, `SELECT 't2'::regclass::oid`).Scan(&relid); err != nil {
		t.Fatal(err)
	}
	ct2, err := describeTable(ctx, conn, relid)
	if err != nil {
		t.Fatal(err)
	}
	if cc := ct2.column("r"); !cc.hasDefault || cc.hasMissing {
		t.Errorf("column r (volatile default): hasDefault %t hasMissing %t, want true false", cc.hasDefault, cc.hasMissing)
	}
	if vs, err := schema.ValueSchema(rel.table, "p.public.t"); err != nil {
		t.Error(err)
	} else if back, err := schema.TableFromValueSchema(vs); err != nil || !back.Equal(rel.table) {
		t.Errorf("the table's defaults do not survive its value schema: %v", err)
	}
}
