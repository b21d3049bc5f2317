package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The benchmark table: bigint PK, int, 40-char text, numeric(12,2),
// timestamptz, bool, small jsonb, float8.
const (
	tableName = "public.bench"
	tableDDL  = `CREATE TABLE bench (id bigint PRIMARY KEY, qty int, label text, amount numeric(12,2),
	at timestamptz, flag bool, doc jsonb, score float8)`
	// insertSQL fills ids lo..hi; label is 40 characters.
	insertSQL = `INSERT INTO bench SELECT g, (g %% 100000)::int, md5(g::text) || lpad(to_hex(g %% 4294967296), 8, '0'),
	((g %% 10000000) / 100.0)::numeric(12,2), '2024-01-01'::timestamptz + g * interval '1 second', g %% 2 = 0,
	jsonb_build_object('k', g %% 100, 'tag', 't' || (g %% 10)), g / 3.0 FROM generate_series(%d, %d) g`
	// updateSQL changes the rows whose ids are r + i*stride, i in 0..n-1.
	updateSQL = `UPDATE bench SET qty = qty + 1, amount = amount + 1, at = now(), doc = jsonb_set(doc, '{k}', to_jsonb(%d))
	WHERE id = ANY (SELECT %d + i * %d FROM generate_series(0, %d) i)`
	// deleteSQL deletes the rows whose ids are r + i*stride, i in 0..n-1.
	deleteSQL = `DELETE FROM bench WHERE id = ANY (SELECT %d + i * %d FROM generate_series(0, %d) i)`
	walLSNSQL = `SELECT pg_current_wal_insert_lsn()::text`
)

// fillTable creates the table and fills it with ids 1..rows, in
// transactions of a million rows, then vacuums and analyzes it so that
// reading it later writes no hint bits.
func fillTable(ctx context.Context, conn *pgx.Conn, rows int) error {
	if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS bench; "+tableDDL); err != nil {
		return fmt.Errorf("bench: create table: %w", err)
	}
	const chunk = 1_000_000
	for lo := 1; lo <= rows; lo += chunk {
		if _, err := conn.Exec(ctx, fmt.Sprintf(insertSQL, lo, min(lo+chunk-1, rows))); err != nil {
			return fmt.Errorf("bench: fill table: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM (FREEZE, ANALYZE) bench"); err != nil {
		return fmt.Errorf("bench: vacuum: %w", err)
	}
	return nil
}

// streamPlan is the streaming workload over a table of rows ids 1..rows:
// inserts of new ids, updates and deletes of existing ones, in
// transactions of txRows, interleaved in proportion. The updated and the
// deleted ids are disjoint and spread over the whole table (every
// transaction touches ids stride apart), so updates and deletes land in
// every data file of the load.
type streamPlan struct {
	rows, txRows                 int
	insertTx, updateTx, deleteTx int
	stride                       int
}

// newStreamPlan sizes the workload: scale 1 is 2M inserts, 500k updates,
// 200k deletes.
func newStreamPlan(rows, txRows int, scale float64) (streamPlan, error) {
	txs := func(n float64) int { return max(1, int(n*scale+float64(txRows)/2)/txRows) }
	p := streamPlan{rows: rows, txRows: txRows, insertTx: txs(2_000_000), updateTx: txs(500_000), deleteTx: txs(200_000)}
	p.stride = rows / txRows
	if p.stride < p.updateTx+p.deleteTx {
		return p, fmt.Errorf("bench: %d updates and %d deletes need a table of at least %d rows (have %d): lower -scale or raise -rows",
			p.updateTx*txRows, p.deleteTx*txRows, (p.updateTx+p.deleteTx)*txRows, rows)
	}
	return p, nil
}

func (p streamPlan) events() int { return (p.insertTx + p.updateTx + p.deleteTx) * p.txRows }

// records is what the workload adds to the log: its events and a tombstone
// after each delete (log.tombstones, on by default).
func (p streamPlan) records() int64 { return int64(p.events() + p.deleteTx*p.txRows) }

// finalRows is the table's row count after the workload.
func (p streamPlan) finalRows() int { return p.rows + (p.insertTx-p.deleteTx)*p.txRows }

// statements returns the workload's transactions in order: each kind
// spread evenly over the sequence.
func (p streamPlan) statements() []string { return p.statementsFrom(insertSQL, updateSQL, deleteSQL) }

// statementsFrom is statements with other SQL templates taking the same
// arguments (MariaDB's).
func (p streamPlan) statementsFrom(insertSQL, updateSQL, deleteSQL string) []string {
	type tx struct {
		at  float64
		sql string
	}
	var all []tx
	add := func(n int, sql func(j int) string) {
		for j := 0; j < n; j++ {
			all = append(all, tx{(float64(j) + 0.5) / float64(n), sql(j)})
		}
	}
	add(p.insertTx, func(j int) string {
		lo := p.rows + 1 + j*p.txRows
		return fmt.Sprintf(insertSQL, lo, lo+p.txRows-1)
	})
	add(p.updateTx, func(j int) string { return fmt.Sprintf(updateSQL, j, 1+j, p.stride, p.txRows-1) })
	add(p.deleteTx, func(j int) string { return fmt.Sprintf(deleteSQL, 1+p.updateTx+j, p.stride, p.txRows-1) })
	// A stable merge by position keeps each kind's own order.
	out := make([]string, 0, len(all))
	idx := []int{0, p.insertTx, p.insertTx + p.updateTx, len(all)}
	next := []int{idx[0], idx[1], idx[2]}
	for len(out) < len(all) {
		best := -1
		for k := 0; k < 3; k++ {
			if next[k] < idx[k+1] && (best < 0 || all[next[k]].at < all[next[best]].at) {
				best = k
			}
		}
		out = append(out, all[next[best]].sql)
		next[best]++
	}
	return out
}

// txResult is one committed workload transaction.
type txResult struct {
	// inner is pg_current_wal_insert_lsn() taken inside the transaction,
	// after its change: at or below the LSN of its commit record (where
	// the next record goes) and above every earlier transaction's, so a
	// snapshot whose source position (a commit LSN) is at or past it holds
	// this transaction (one writer).
	inner uint64
	// committed is when COMMIT returned to the client.
	committed time.Time
	rows      int64
}

// runTx runs sql in a transaction with the LSN probe, in one round trip.
func runTx(ctx context.Context, conn *pgx.Conn, sql string) (txResult, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sql)
	b.Queue(walLSNSQL)
	b.Queue("COMMIT")
	br := conn.SendBatch(ctx, b)
	var res txResult
	_, err := br.Exec()
	if err == nil {
		var tag interface{ RowsAffected() int64 }
		tag, err = br.Exec()
		if err == nil {
			res.rows = tag.RowsAffected()
		}
	}
	var lsn string
	if err == nil {
		err = br.QueryRow().Scan(&lsn)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("bench: workload transaction: %w", err)
	}
	res.committed = time.Now()
	res.inner, err = parseLSN(lsn)
	return res, err
}

// parseLSN reads PostgreSQL's X/Y form.
func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("bench: bad LSN %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}
