package main

import (
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/outbox"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// newService is the service on a fresh database with the compose demo's
// schema, keeping the outbox rows so the test can read them.
func newService(t *testing.T) (*httptest.Server, *sql.DB) {
	t.Helper()
	schema, err := os.ReadFile("../compose/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), string(schema)); err != nil {
		t.Fatal(err)
	}
	s := &service{db: db, w: outbox.Writer{}, logger: slog.New(slog.DiscardHandler)}
	if err := s.prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.routes())
	t.Cleanup(srv.Close)
	return srv, db
}

func post(t *testing.T, url, body string) (int, placed) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p placed
	if resp.StatusCode < 300 {
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, p
}

// outboxRows are the outbox table's rows: id -> "aggregateid type".
func outboxRows(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT id::text, aggregatetype, aggregateid, type, payload->>'status' FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var id, at, aid, typ, status string
		if err := rows.Scan(&id, &at, &aid, &typ, &status); err != nil {
			t.Fatal(err)
		}
		got[id] = at + " " + aid + " " + typ + " " + status
	}
	return got
}

// TestPlaceAndCancel: an order and its event commit together; a request
// that fails leaves neither.
func TestPlaceAndCancel(t *testing.T) {
	srv, db := newService(t)
	code, p := post(t, srv.URL+"/orders", `{"customer_id": 7, "total": "12.50", "note": "gift"}`)
	if code != http.StatusCreated || p.Order.ID == 0 || p.Order.Total != "12.50" || p.EventID == "" {
		t.Fatalf("place: %d %+v", code, p)
	}
	id := p.Order.ID
	code, c := post(t, srv.URL+"/orders/"+itoa(id)+"/cancel", ``)
	if code != http.StatusOK || c.Order.Status != "cancelled" || c.EventID == p.EventID {
		t.Fatalf("cancel: %d %+v", code, c)
	}
	want := map[string]string{p.EventID: "Order " + itoa(id) + " OrderPlaced new", c.EventID: "Order " + itoa(id) + " OrderCancelled cancelled"}
	if got := outboxRows(t, db); len(got) != 2 || got[p.EventID] != want[p.EventID] || got[c.EventID] != want[c.EventID] {
		t.Fatalf("outbox rows %v, want %v", got, want)
	}
	// Failures: no order, no event.
	var orders int
	_ = db.QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&orders)
	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/orders", `{"customer_id": 999999, "total": "1.00"}`, http.StatusUnprocessableEntity},
		{"/orders", `{"customer_id": 1, "total": "lots"}`, http.StatusBadRequest},
		{"/orders", `{"total": "1.00"}`, http.StatusBadRequest},
		{"/orders/" + itoa(id) + "/cancel", ``, http.StatusNotFound},
	} {
		if code, _ := post(t, srv.URL+tc.path, tc.body); code != tc.code {
			t.Errorf("POST %s %s: %d, want %d", tc.path, tc.body, code, tc.code)
		}
	}
	var after int
	_ = db.QueryRowContext(t.Context(), `SELECT count(*) FROM orders`).Scan(&after)
	if n := len(outboxRows(t, db)); n != 2 || after != orders {
		t.Errorf("after failed requests: %d outbox rows (want 2), %d orders (want %d)", n, after, orders)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
