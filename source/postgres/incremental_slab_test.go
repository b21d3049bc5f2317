package postgres

import (
	"testing"

	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestOwnValuesOutliveSlab: a range chunk's values point into a slab that
// the next chunk is read into once the stream gave the chunk back; the
// values kept beyond that (the row the stream's batch keeps, the run's
// last key) are snapshot.OwnValues copies, which the next chunk's values
// do not overwrite. The slab's own values do change (what the copies are
// for).
func TestOwnValuesOutliveSlab(t *testing.T) {
	s := pgdecode.NewReusableSlab()
	vals := []any{s.Int64(1000), s.Text([]byte("a text")), s.Float64(1.5), s.Int32(70000), nil}
	kept := snapshot.OwnValues(vals)
	s.Reset()
	next := []any{s.Int64(2000), s.Text([]byte("b other")), s.Float64(2.5), s.Int32(80000)}
	if vals[0] != next[0] || vals[1] != next[1] {
		t.Fatalf("the slab did not write the next chunk's values over the first's (%v, %v): the test checks nothing", vals, next)
	}
	want := []any{int64(1000), "a text", 1.5, int32(70000), nil}
	for i := range want {
		if kept[i] != want[i] {
			t.Errorf("kept value %d is %#v after the slab was read into again, want %#v", i, kept[i], want[i])
		}
	}
}
