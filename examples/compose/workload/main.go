// Command cdcd-workload changes the compose demo's shop (examples/compose/
// schema.sql) at a steady rate: new customers and orders, order updates,
// phone changes and deletes, so cdcd has something to capture.
//
//	cdcd-workload [--dsn URL] [--rate N] [--duration D]
//
// The DSN defaults to $DATABASE_URL. It retries the connection until the
// database is up and stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL URL of the shop")
	rate := flag.Float64("rate", 20, "changes per second")
	duration := flag.Duration("duration", 0, "stop after this long (0: until signalled)")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *dsn == "" || *rate <= 0 {
		fmt.Fprintln(os.Stderr, "cdcd-workload: --dsn (or DATABASE_URL) and a positive --rate are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *dsn, *rate, logger); err != nil && ctx.Err() == nil {
		logger.Error("workload failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dsn string, rate float64, logger *slog.Logger) error {
	conn, err := connect(ctx, dsn, logger)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	var n int64
	report := time.Now()
	for {
		select {
		case <-ctx.Done():
			logger.Info("workload stopped", "changes", n)
			return nil
		case <-tick.C:
		}
		if err := change(ctx, conn); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		n++
		if time.Since(report) >= 30*time.Second {
			logger.Info("workload running", "changes", n)
			report = time.Now()
		}
	}
}

// connect retries until the database accepts connections.
func connect(ctx context.Context, dsn string, logger *slog.Logger) (*pgx.Conn, error) {
	for wait := time.Second; ; wait = min(2*wait, 10*time.Second) {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			return conn, nil
		}
		logger.Info("waiting for the database", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

var statuses = []string{"paid", "packed", "shipped", "delivered", "cancelled"}

// change makes one random change.
func change(ctx context.Context, conn *pgx.Conn) error {
	var err error
	switch r := rand.IntN(100); {
	case r < 10:
		id := rand.Int64N(1_000_000)
		_, err = conn.Exec(ctx, `INSERT INTO customers (name, email, phone) VALUES ($1, $2, $3)`,
			fmt.Sprintf("customer %d", id), fmt.Sprintf("c%d@example.com", id), fmt.Sprintf("+1-555-%04d", id%10000))
	case r < 50:
		_, err = conn.Exec(ctx, `INSERT INTO orders (customer_id, total, note)
SELECT id, round((random() * 500)::numeric, 2), 'order' FROM customers ORDER BY random() LIMIT 1`)
	case r < 85:
		_, err = conn.Exec(ctx, `UPDATE orders SET status = $1, total = total + 1, updated_at = now()
WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)`, statuses[rand.IntN(len(statuses))])
	case r < 95:
		_, err = conn.Exec(ctx, `UPDATE customers SET phone = $1 WHERE id = (SELECT id FROM customers ORDER BY random() LIMIT 1)`,
			fmt.Sprintf("+1-555-%04d", rand.IntN(10000)))
	default:
		_, err = conn.Exec(ctx, `DELETE FROM orders WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)`)
	}
	return err
}
