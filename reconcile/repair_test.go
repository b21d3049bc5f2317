package reconcile

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestKeyCondition: the condition a repair hands cdcd snapshot --where
// selects exactly its keys, whatever quotes and backslashes a text key
// holds, with standard_conforming_strings on and off.
func TestKeyCondition(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	keys := []string{`it's`, `back\slash`, `\x00'`, `E'x'`, `plain`, ``, `''`}
	if _, err := conn.Exec(ctx, `CREATE TABLE k (s text, n integer, PRIMARY KEY (s, n))`); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		for n := range 3 {
			if _, err := conn.Exec(ctx, `INSERT INTO k VALUES ($1, $2)`, k, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	tbl := &Table{Name: "public.k", Columns: []*Column{{Name: "s", Type: "text"}, {Name: "n", Type: "integer"}}, Key: []int{0, 1}}
	var lits []Key
	for _, k := range keys {
		lits = append(lits, Key{k, "1"})
	}
	cond := (*Postgres)(nil).KeyCondition(tbl, lits)
	for _, scs := range []string{"on", "off"} {
		if _, err := conn.Exec(ctx, "SET standard_conforming_strings = "+scs); err != nil {
			t.Fatal(err)
		}
		rows, err := conn.Query(ctx, "SELECT s FROM k WHERE "+cond+" AND n = 1 ORDER BY s")
		if err != nil {
			t.Fatalf("standard_conforming_strings %s: %v\n%s", scs, err, cond)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM k WHERE "+cond).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(keys) || n != len(keys) {
			t.Errorf("standard_conforming_strings %s: %q (%d rows in all), want each of %q once\n%s", scs, got, n, keys, cond)
		}
	}
}
