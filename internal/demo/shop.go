package demo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

const shopSchema = `
CREATE TABLE customers (
  id         bigserial PRIMARY KEY,
  name       text NOT NULL,
  email      text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE orders (
  id          bigserial PRIMARY KEY,
  customer_id bigint NOT NULL REFERENCES customers(id) ON DELETE CASCADE,
  amount      numeric(12,2) NOT NULL,
  status      text NOT NULL DEFAULT 'new',
  created_at  timestamptz NOT NULL DEFAULT now()
);
INSERT INTO customers (name, email) VALUES
  ('Ada Lovelace', 'ada@example.com'), ('Alan Turing', 'alan@example.com'),
  ('Grace Hopper', 'grace@example.com'), ('Edsger Dijkstra', 'edsger@example.com');
INSERT INTO orders (customer_id, amount, status) VALUES
  (1, 19.99, 'paid'), (1, 5.00, 'new'), (2, 120.50, 'shipped'), (3, 42.00, 'new');
`

func createShop(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, shopSchema); err != nil {
		return fmt.Errorf("demo: create shop schema: %w", err)
	}
	return nil
}

type workloadStats struct{ inserts, updates, deletes int }

var (
	firstNames = []string{"Barbara", "Donald", "Frances", "John", "Katherine", "Ken", "Margaret", "Niklaus", "Radia", "Tim"}
	statuses   = []string{"paid", "shipped", "delivered", "cancelled"}
)

// workload runs small transactions of inserts, updates and deletes, and
// returns an LSN inside the last one: once the source has flushed past it,
// every change of the workload is durable in the log.
func workload(ctx context.Context, conn *pgx.Conn) (workloadStats, uint64, error) {
	var st workloadStats
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return st, 0, err
		}
		name := firstNames[rng.IntN(len(firstNames))]
		var cust int64
		if err := tx.QueryRow(ctx, `INSERT INTO customers (name, email) VALUES ($1, $2) RETURNING id`,
			fmt.Sprintf("%s #%d", name, i), fmt.Sprintf("customer%d@example.com", i)).Scan(&cust); err != nil {
			return st, 0, err
		}
		st.inserts++
		for j := 0; j < 1+rng.IntN(3); j++ {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (customer_id, amount) VALUES ($1, $2)`,
				cust, fmt.Sprintf("%d.%02d", 1+rng.IntN(300), rng.IntN(100))); err != nil {
				return st, 0, err
			}
			st.inserts++
		}
		tag, err := tx.Exec(ctx, `UPDATE orders SET status = $1 WHERE id = (SELECT id FROM orders ORDER BY random() LIMIT 1)`,
			statuses[rng.IntN(len(statuses))])
		if err != nil {
			return st, 0, err
		}
		st.updates += int(tag.RowsAffected())
		if i%5 == 4 {
			tag, err := tx.Exec(ctx, `DELETE FROM orders WHERE id = (SELECT min(id) FROM orders WHERE status IN ('cancelled', 'new'))`)
			if err != nil {
				return st, 0, err
			}
			st.deletes += int(tag.RowsAffected())
		}
		if i%10 == 9 {
			tag, err := tx.Exec(ctx, `UPDATE customers SET email = lower(name) || '@example.org' WHERE id = $1`, 1+rng.Int64N(cust))
			if err != nil {
				return st, 0, err
			}
			st.updates += int(tag.RowsAffected())
		}
		if err := tx.Commit(ctx); err != nil {
			return st, 0, err
		}
		select { // pace it so the sink commits several snapshots
		case <-ctx.Done():
			return st, 0, ctx.Err()
		case <-time.After(40 * time.Millisecond):
		}
	}
	// A last transaction whose own LSN marks the end of the workload.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return st, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `UPDATE customers SET name = name || ' (VIP)' WHERE id = 1`); err != nil {
		return st, 0, err
	}
	st.updates++
	var lsn string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return st, 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return st, 0, err
	}
	marker, err := pglogrepl.ParseLSN(lsn)
	return st, uint64(marker), err
}
