package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func pgConn(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustEvent(t *testing.T, aggType, aggID, typ string, payload any) Event {
	t.Helper()
	ev, err := NewEvent(aggType, aggID, typ, payload)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestNewEvent: ids are UUIDv7 (time ordered); payloads are JSON.
func TestNewEvent(t *testing.T) {
	a := mustEvent(t, "Order", "1", "Placed", map[string]int{"n": 1})
	time.Sleep(2 * time.Millisecond)
	b := mustEvent(t, "Order", "1", "Placed", json.RawMessage(`{"n":2}`))
	ua, ub := uuid.MustParse(a.ID), uuid.MustParse(b.ID)
	if ua.Version() != 7 || a.ID >= b.ID || ub.Version() != 7 {
		t.Errorf("ids %s (v%d), %s: want UUIDv7 in time order", a.ID, ua.Version(), b.ID)
	}
	if string(a.Payload) != `{"n":1}` || string(b.Payload) != `{"n":2}` {
		t.Errorf("payloads %s %s", a.Payload, b.Payload)
	}
	if _, err := NewEvent("Order", "1", "Placed", []byte(`{not json`)); err == nil {
		t.Error("a payload that is not JSON was taken")
	}
	if err := (Writer{}).Write(t.Context(), &sql.Tx{}, Event{ID: "x", AggregateType: "A", AggregateID: "1"}); err == nil || !strings.Contains(err.Error(), "without type") {
		t.Errorf("an event without a type: %v", err)
	}
	if err := Write(t.Context(), "not a tx", a); err == nil || !strings.Contains(err.Error(), "pgx.Tx or a *sql.Tx") {
		t.Errorf("Write with a string for a transaction: %v", err)
	}
}

// TestWritePostgres: Write inserts the events with the service's
// transaction, through pgx and through database/sql; Delete leaves the
// table empty; a rollback leaves nothing.
func TestWritePostgres(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := pgConn(t, dsn)
	w := Writer{Table: "public.outbox"}
	if _, err := conn.Exec(t.Context(), w.DDL()+`; ALTER TABLE outbox ADD tenant text`); err != nil {
		t.Fatal(err)
	}
	ev1 := mustEvent(t, "Order", "o-1", "Placed", map[string]any{"total": 3})
	ev2 := mustEvent(t, "Order", "o-1", "Paid", nil)
	ev2.Extra = map[string]any{"tenant": "acme"}
	if err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error { return Write(t.Context(), tx, ev1, ev2) }); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*conn.Config())
	defer db.Close()
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ev3 := mustEvent(t, "Customer", "c-9", "Joined", "hello")
	if err := w.Write(t.Context(), tx, ev3); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, _ = db.BeginTx(t.Context(), nil)
	if err := w.Write(t.Context(), tx, mustEvent(t, "Order", "o-2", "Placed", 1)); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	rows, err := conn.Query(t.Context(), `SELECT id::text, aggregatetype, aggregateid, type, payload::text, tenant FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var id, at, ai, typ string
		var payload, tenant *string
		if err := rows.Scan(&id, &at, &ai, &typ, &payload, &tenant); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{id, at, ai, typ, deref(payload), deref(tenant)}, "|"))
	}
	want := []string{ev1.ID + `|Order|o-1|Placed|{"total": 3}|`, ev2.ID + "|Order|o-1|Paid||acme", ev3.ID + `|Customer|c-9|Joined|"hello"|`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Delete: written and removed in the same transaction.
	w.Delete = true
	if err := pgx.BeginFunc(t.Context(), conn, func(tx pgx.Tx) error {
		return w.Write(t.Context(), tx, mustEvent(t, "Order", "o-3", "Placed", 1))
	}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows after a write with Delete, want the 3 from before (%v)", n, err)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestWriteMySQL: the MySQL dialect through database/sql on MariaDB.
func TestWriteMySQL(t *testing.T) {
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	db, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := Writer{Table: "outbox", Dialect: MySQL}
	if _, err := db.ExecContext(t.Context(), w.DDL()); err != nil {
		t.Fatalf("%s: %v", w.DDL(), err)
	}
	evs := []Event{mustEvent(t, "Order", "o-1", "Placed", map[string]int{"n": 1}), mustEvent(t, "Order", "o-1", "Paid", nil)}
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(t.Context(), tx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var id, payload string
	if err := db.QueryRowContext(t.Context(), "SELECT id, payload FROM outbox WHERE type = 'Placed'").Scan(&id, &payload); err != nil {
		t.Fatal(err)
	}
	if id != evs[0].ID || payload != `{"n":1}` {
		t.Errorf("row %s %s", id, payload)
	}
	if err := w.Write(t.Context(), tx, evs...); err == nil {
		t.Error("a write in a committed transaction succeeded")
	}
	if err := (Writer{MessagePrefix: "x", Dialect: MySQL}).Write(t.Context(), tx, evs...); err == nil {
		t.Error("logical messages on MySQL were accepted")
	}
}
