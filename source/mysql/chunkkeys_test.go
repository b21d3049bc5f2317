package mysql

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestChunkKeyTypes: tables keyed by ENUM, SET, BIT, FLOAT and DOUBLE
// columns (alone and before an INT) are read in chunks of three rows, each
// chunk going on from the last key of the one before: every row is read
// once, in the server's key order, as one read of the whole table reads
// them. ENUM and SET sort by index and mask but compare with a label as
// text, so bounds sent as labels would skip and repeat rows.
func TestChunkKeyTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rows := func(f func(i int) string, n int) string {
		s := ""
		for i := range n {
			if i > 0 {
				s += ", "
			}
			s += f(i)
		}
		return s
	}
	enums := []string{"z", "a", "m", "b"}
	sets := []string{"", "z", "a", "z,a", "m", "z,m", "a,m", "z,a,m"}
	for _, tc := range []struct{ name, ddl, values string }{
		{"enum", "e ENUM('z','a','m','b') NOT NULL, n INT NOT NULL, PRIMARY KEY (e, n)",
			rows(func(i int) string { return fmt.Sprintf("('%s', %d)", enums[i%4], i/4) }, 20)},
		{"set", "s SET('z','a','m') NOT NULL, n INT NOT NULL, PRIMARY KEY (s, n)",
			rows(func(i int) string { return fmt.Sprintf("('%s', %d)", sets[i%8], i/8) }, 24)},
		{"bit", "b BIT(10) NOT NULL PRIMARY KEY", rows(func(i int) string { return fmt.Sprintf("(%d)", (i*389)%1024) }, 30)},
		{"bit1", "b BIT(1) NOT NULL, n INT NOT NULL, PRIMARY KEY (b, n)",
			rows(func(i int) string { return fmt.Sprintf("(%d, %d)", i%2, i/2) }, 14)},
		{"float", "f FLOAT NOT NULL PRIMARY KEY",
			rows(func(i int) string { return fmt.Sprintf("(%g)", float64(i-15)/3*[]float64{1, 1e-20, 1e20}[i%3]) }, 30)},
		{"double", "d DOUBLE NOT NULL, n INT NOT NULL, PRIMARY KEY (d, n)",
			rows(func(i int) string { return fmt.Sprintf("(%g, %d)", float64(i%7-3)/7, i) }, 30)},
	} {
		e.exec(t, "CREATE TABLE k_"+tc.name+" ("+tc.ddl+")", "INSERT INTO k_"+tc.name+" VALUES "+tc.values)
		var n int
		if err := e.db.QueryRow("SELECT COUNT(*) FROM k_" + tc.name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		qn := e.name + ".k_" + tc.name
		for _, load := range e.chunkDatabases(t) {
			testChunkKeys(t, load.name+": "+tc.name, load.d, qn, n)
		}
	}
}

// testChunkKeys reads table qn (n rows) whole and in chunks of three.
func testChunkKeys(t *testing.T, name string, d *myDatabase, qn string, n int) {
	t.Helper()
	ctx := context.Background()
	p, err := d.Plan(ctx, qn, nil, "")
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	whole, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{Upper: p.Upper, Limit: 1 << 20})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var want, got []string
	for _, c := range whole.Rows {
		want = append(want, fmt.Sprint(c.After))
	}
	var after snapshot.Key
	for chunks := 0; chunks <= n; chunks++ {
		ch, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{After: after, Upper: p.Upper, Limit: 3})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, c := range ch.Rows {
			got = append(got, fmt.Sprint(c.After))
		}
		if len(ch.Rows) < 3 {
			break
		}
		after = ch.Last
	}
	if len(want) != n || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: %d rows; the whole read %d rows, in chunks %d:\n whole %v\nchunks %v", name, n, len(want), len(got), want, got)
	}
}
