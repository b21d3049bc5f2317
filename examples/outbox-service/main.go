// Command cdcd-outbox-service is a small order service showing the
// transactional outbox: POST /orders writes an order and its OrderPlaced
// event in one transaction (outbox.Write), POST /orders/{id}/cancel the
// cancellation and its OrderCancelled event. cdcd relays the events (its
// config's outbox: block) to the topic outbox.Order, keyed by the order id,
// in order per order; nothing is published unless the order committed.
//
//	cdcd-outbox-service [--dsn URL] [--listen ADDR] [--keep-rows]
//
// The DSN defaults to $DATABASE_URL; the tables are the compose demo's
// (examples/compose/schema.sql). The outbox rows are deleted again in the
// same transaction (the relay reads the insert from the WAL), unless
// --keep-rows. It creates the outbox table if it is missing.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/cdcd-dev/cdcd/outbox"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL of the shop")
	listen := flag.String("listen", ":8091", "HTTP address")
	keep := flag.Bool("keep-rows", false, "leave the events in the outbox table (default: deleted in the same transaction)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "cdcd-outbox-service: --dsn (or DATABASE_URL) is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dsn, *listen, *keep, logger); err != nil && ctx.Err() == nil {
		logger.Error("outbox service failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn, listen string, keep bool, logger *slog.Logger) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	s := &service{db: db, w: outbox.Writer{Delete: !keep}, logger: logger}
	if err := s.prepare(ctx); err != nil {
		return err
	}
	srv := &http.Server{Addr: listen, Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	logger.Info("outbox service listening", "addr", listen, "keep_rows", keep)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// prepare waits for the database and creates the outbox table if missing.
func (s *service) prepare(ctx context.Context) error {
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		_, err := s.db.ExecContext(ctx, s.w.DDL())
		if err == nil {
			return nil
		}
		s.logger.Info("waiting for the database", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}
