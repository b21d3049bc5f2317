package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/source"
)

// faults returns the changes of c that carry a fault, once there are n.
func waitFaults(t *testing.T, c *collector, n int) []source.Change {
	t.Helper()
	var out []source.Change
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		out = out[:0]
		for _, ch := range c.changes {
			if ch.Fault != nil {
				out = append(out, ch)
			}
		}
		c.mu.Unlock()
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d faulty changes, want %d", len(out), n)
		}
	}
}

// wantFault checks a faulty change: its column, value as PostgreSQL prints
// it, the rest of its row, and a reason and fix that name them.
func wantFault(t *testing.T, c source.Change, op source.Op, column, value string, row []any) {
	t.Helper()
	f := c.Fault
	if c.Op != op || f.Column != column || f.Value != value {
		t.Errorf("fault %s column %q value %q, want %s %q %q (%s)", c.Op, f.Column, f.Value, op, column, value, f.Reason)
	}
	if got := rowText(c.After); got != rowText(row) {
		t.Errorf("faulty change's row %s, want %s", got, rowText(row))
	}
	for _, want := range []string{column, value, c.Table.QualifiedName()} {
		if !strings.Contains(f.Reason, want) {
			t.Errorf("reason %q does not say %q", f.Reason, want)
		}
	}
	for _, want := range []string{"cdcd table skip -c FILE " + c.Table.QualifiedName(), "cdcd snapshot -c FILE --replace " + c.Table.QualifiedName()} {
		if !strings.Contains(f.Fix, want) {
			t.Errorf("fix %q does not say %q", f.Fix, want)
		}
	}
}

func rowText(row []any) string { return fmt.Sprint(row) }

// TestValueFaults: a timestamp past year 294247 and a 2-D value in a 1-D
// array column, in the initial load and in the stream (insert, update,
// delete under REPLICA IDENTITY FULL), come as changes with a fault naming
// the column and the value as PostgreSQL prints it, the rest of the row
// decoded; the reader keeps going, and the other rows are plain.
func TestValueFaults(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE vf (id int PRIMARY KEY, at timestamptz, ids int[]);
		ALTER TABLE vf REPLICA IDENTITY FULL;
		INSERT INTO vf VALUES (1, '2024-01-01 00:00:00+00', '{1}'), (2, '294248-01-01 00:00:00+00', '{2}'), (3, NULL, '{{1,2},{3,4}}')`)
	c := newCollector()
	e.start(t, []string{"vf"}, true, c)
	got := waitFaults(t, c, 2)
	wantFault(t, got[0], source.OpRead, "at", "294248-01-01 00:00:00+00", []any{int64(2), nil, []any{int64(2)}})
	wantFault(t, got[1], source.OpRead, "ids", "{{1,2},{3,4}}", []any{int64(3), nil, nil})

	e.exec(t, `INSERT INTO vf VALUES (4, '294249-06-01 12:00:00+00', '{4}')`)
	e.exec(t, `INSERT INTO vf VALUES (5, NULL, '{5}')`)
	e.exec(t, `UPDATE vf SET ids = '{{7}}' WHERE id = 5`)
	got = waitFaults(t, c, 4)
	wantFault(t, got[2], source.OpCreate, "at", "294249-06-01 12:00:00+00", []any{int64(4), nil, []any{int64(4)}})
	wantFault(t, got[3], source.OpUpdate, "ids", "{{7}}", []any{int64(5), nil, nil})
	e.exec(t, `DELETE FROM vf WHERE id = 2`) // the old row (FULL) holds the bad timestamp
	got = waitFaults(t, c, 5)
	if got[4].Op != source.OpDelete || got[4].Fault.Column != "at" || got[4].Before == nil || got[4].Before[0] != int64(2) {
		t.Errorf("delete of the faulty row: %s %+v before %v", got[4].Op, got[4].Fault, got[4].Before)
	}
	all := c.wait(t, 7)
	plain := 0
	for _, ch := range all {
		if ch.Fault == nil {
			plain++
		}
	}
	if plain != 2 || len(all) != 7 { // row 1 loaded, row 5 inserted, nothing else
		t.Errorf("%d plain changes of %d, want 2 of 7:%s", plain, len(all), describe(all))
	}
}

// TestInvalidUTF8 (issue 24 item 9): in a SQL_ASCII database, text that is
// not UTF-8 comes as a fault naming the column and the bytes (\xNN), in
// the load and in the stream; UTF-8 text is plain.
func TestInvalidUTF8(t *testing.T) {
	t.Parallel()
	srv := pgtest.Server(t)
	name := pgtest.UniqueName(t, "ascii")
	admin, err := srv.Connect(t.Context(), "postgres")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(t.Context(), `CREATE DATABASE `+name+` ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Error(err)
		}
	})
	dsn := srv.DSN(name)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	e := &env{dsn: dsn, conn: conn, names: pgtest.Names(t), state: &memState{}}
	e.exec(t, `CREATE TABLE u (id int PRIMARY KEY, s text, tags text[]);
		INSERT INTO u VALUES (1, 'plain', NULL), (2, E'caf\xe9', NULL), (3, 'ok', ARRAY['a', E'\xff'])`)
	c := newCollector()
	e.start(t, []string{"u"}, true, c)
	got := waitFaults(t, c, 2)
	wantFault(t, got[0], source.OpRead, "s", `caf\xe9`, []any{int64(2), nil, nil})
	if got[1].Fault.Column != "tags" || !strings.Contains(got[1].Fault.Value, `\xff`) {
		t.Errorf("array fault: %+v", got[1].Fault)
	}
	e.exec(t, `INSERT INTO u VALUES (4, E'na\xefve', NULL), (5, 'fine', NULL)`)
	got = waitFaults(t, c, 3)
	wantFault(t, got[2], source.OpCreate, "s", `na\xefve`, []any{int64(4), nil, nil})
	for _, ch := range c.wait(t, 5) {
		if ch.Fault == nil && ch.After[1] != nil && !strings.Contains("plain fine", ch.After[1].(string)) {
			t.Errorf("plain change with text %q", ch.After[1])
		}
	}
}

// TestAsValueErrorNil: the stream asks every row's decode error whether it
// is a *ValueError; a nil error costs no allocation (errors.As's target
// escaped: two or three allocations a change), and a wrapped one is found.
func TestAsValueErrorNil(t *testing.T) {
	if testing.CoverMode() == "" {
		if n := testing.AllocsPerRun(100, func() { _ = asValueError(nil) }); n != 0 {
			t.Errorf("asValueError(nil) allocated %.0f times", n)
		}
	}
	ve := &ValueError{Column: "c"}
	if got := asValueError(fmt.Errorf("wrapped: %w", ve)); got != ve {
		t.Errorf("asValueError of a wrapped ValueError: %v", got)
	}
}
