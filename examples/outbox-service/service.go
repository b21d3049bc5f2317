package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/outbox"
)

// service places and cancels orders, each with its event in the same
// transaction.
type service struct {
	db     *sql.DB
	w      outbox.Writer
	logger *slog.Logger
}

// Order is an order as the API answers it and as its events carry it.
type Order struct {
	ID         int64     `json:"id"`
	CustomerID int64     `json:"customer_id"`
	Status     string    `json:"status"`
	Total      string    `json:"total"`
	Note       *string   `json:"note,omitempty"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// placed is the answer to a placed or cancelled order: the order and the
// id of its event (the Idempotency-Key a webhook receiver sees).
type placed struct {
	Order   Order  `json:"order"`
	EventID string `json:"event_id"`
}

func (s *service) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.placeOrder)
	mux.HandleFunc("POST /orders/{id}/cancel", s.cancelOrder)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := s.db.PingContext(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	return mux
}

// placeOrder: {"customer_id": 1, "total": "12.50", "note": "..."}.
func (s *service) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req struct {
		CustomerID int64   `json:"customer_id"`
		Total      string  `json:"total"`
		Note       *string `json:"note"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil || req.CustomerID <= 0 || req.Total == "" {
		http.Error(w, `the body must be {"customer_id": N, "total": "12.50", "note": "..."}`, http.StatusBadRequest)
		return
	}
	s.inTx(w, r, http.StatusCreated, "OrderPlaced", func(ctx context.Context, tx *sql.Tx) (Order, error) {
		o := Order{CustomerID: req.CustomerID, Note: req.Note}
		err := tx.QueryRowContext(ctx, `INSERT INTO orders (customer_id, total, note) VALUES ($1, $2, $3)
			RETURNING id, status, total::text, updated_at`, req.CustomerID, req.Total, req.Note).Scan(&o.ID, &o.Status, &o.Total, &o.UpdatedAt)
		return o, err
	})
}

// cancelOrder cancels an order that is not cancelled yet.
func (s *service) cancelOrder(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "the order id must be a number", http.StatusBadRequest)
		return
	}
	s.inTx(w, r, http.StatusOK, "OrderCancelled", func(ctx context.Context, tx *sql.Tx) (Order, error) {
		o := Order{ID: id}
		err := tx.QueryRowContext(ctx, `UPDATE orders SET status = 'cancelled', updated_at = now()
			WHERE id = $1 AND status <> 'cancelled' RETURNING customer_id, status, total::text, note, updated_at`, id).
			Scan(&o.CustomerID, &o.Status, &o.Total, &o.Note, &o.UpdatedAt)
		return o, err
	})
}

// inTx runs change and writes its event of eventType in one transaction,
// then answers the order and the event's id with status.
func (s *service) inTx(w http.ResponseWriter, r *http.Request, status int, eventType string, change func(context.Context, *sql.Tx) (Order, error)) {
	ctx := r.Context()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	o, err := change(ctx, tx)
	if err != nil {
		s.fail(w, err)
		return
	}
	ev, err := outbox.NewEvent("Order", strconv.FormatInt(o.ID, 10), eventType, o)
	if err == nil {
		err = s.w.Write(ctx, tx, ev)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(placed{Order: o, EventID: ev.ID})
}

// fail answers err: what the caller got wrong as 4xx, the rest as 500.
func (s *service) fail(w http.ResponseWriter, err error) {
	var pe *pgconn.PgError
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.Error(w, "no such order, or it is cancelled already", http.StatusNotFound)
	case errors.As(err, &pe) && pe.Code == "23503":
		http.Error(w, "no such customer", http.StatusUnprocessableEntity)
	case errors.As(err, &pe) && (pe.Code == "22P02" || pe.Code == "22003"):
		http.Error(w, fmt.Sprintf("total: %s", pe.Message), http.StatusBadRequest)
	default:
		s.logger.Error("request failed", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
	}
}
