package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Creating a logical slot waits until every transaction that holds an xid
// when creation begins has ended (the snapshot builder waits on their
// transaction locks), so a long transaction left open keeps the pipeline in
// "starting" for as long as it runs. watchSlotCreation says what it waits
// for: which backends, since when, running what — in the log, repeated,
// and in Stats.Waiting for /status.

// watchSlotCreation watches the walsender (backend pid) creating the slot
// over conn, which the caller must not use until stop returns. The first
// report comes after firstWaitReport, then every WaitReportInterval; stop
// clears Stats.Waiting.
func (r *Reader) watchSlotCreation(ctx context.Context, conn *pgx.Conn, walsender uint32) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		began := time.Now()
		t := time.NewTimer(min(firstWaitReport, r.cfg.WaitReportInterval))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.reportSlotWait(ctx, conn, walsender, began)
			t.Reset(r.cfg.WaitReportInterval)
		}
	})
	return func() {
		cancel()
		wg.Wait()
		r.stats.Waiting.Store(nil)
	}
}

// firstWaitReport is how long slot creation goes before the first report:
// an idle server creates a slot in well under a second.
const firstWaitReport = time.Second

// reportSlotWait logs and publishes what the slot's creation waits for.
func (r *Reader) reportSlotWait(ctx context.Context, conn *pgx.Conn, walsender uint32, began time.Time) {
	blockers, err := slotBlockers(ctx, conn, walsender)
	if ctx.Err() != nil {
		return
	}
	waited := time.Since(began).Round(time.Second)
	if err != nil {
		r.logger.Warn("creating the replication slot takes long; cannot tell what it waits for", "waited", waited, "err", err)
		return
	}
	var what string
	if len(blockers) == 0 {
		what = fmt.Sprintf("creating the replication slot (%s so far): waiting for the server to log its running transactions", waited)
		r.logger.Info(what)
	} else {
		what = fmt.Sprintf("creating the replication slot waits for %d transaction(s) that were running when it began to end (%s so far): %s",
			len(blockers), waited, strings.Join(blockers, "; "))
		r.logger.Warn("creating the replication slot waits for transactions that were running when it began", "waited", waited,
			"transactions", strings.Join(blockers, "; "),
			"what_to_do", "let them finish, commit or roll them back, or end them with SELECT pg_terminate_backend(pid); "+
				"a prepared transaction with COMMIT PREPARED or ROLLBACK PREPARED 'gid'. The pipeline starts once they are gone")
	}
	r.stats.Waiting.Store(&what)
}

// slotBlockers describes the transactions the walsender waits for: each
// backend from pg_blocking_pids with its xid, how long its transaction has
// been open, its state, who runs it and its query; prepared transactions
// (pid 0) by their gid.
func slotBlockers(ctx context.Context, conn *pgx.Conn, walsender uint32) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT b.pid, coalesce(a.backend_xid::text, ''), a.xact_start, coalesce(a.state, ''),
		coalesce(a.application_name, ''), coalesce(a.usename::text, ''), coalesce(a.client_addr::text, 'local socket'),
		left(regexp_replace(coalesce(a.query, ''), '\s+', ' ', 'g'), 200)
		FROM unnest(pg_blocking_pids($1)) AS b(pid) LEFT JOIN pg_stat_activity a ON a.pid = b.pid
		ORDER BY a.xact_start NULLS FIRST`, int32(walsender))
	if err != nil {
		return nil, err
	}
	var out []string
	prepared := false
	for rows.Next() {
		var pid int32
		var xid, state, app, user, client, query string
		var since *time.Time
		if err := rows.Scan(&pid, &xid, &since, &state, &app, &user, &client, &query); err != nil {
			rows.Close()
			return nil, err
		}
		if pid == 0 {
			prepared = true
			continue
		}
		s := fmt.Sprintf("pid %d", pid)
		if xid != "" {
			s += " xid " + xid
		}
		if since != nil {
			s += fmt.Sprintf(", transaction open since %s (%s)", since.UTC().Format(time.RFC3339), time.Since(*since).Round(time.Second))
		}
		s += fmt.Sprintf(", %s, application_name %q, user %q, client %s, query: %s", state, app, user, client, query)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if prepared {
		p, err := preparedXacts(ctx, conn)
		if err != nil {
			return nil, err
		}
		out = append(out, p...)
	}
	return out, nil
}

// preparedXacts describes the prepared transactions.
func preparedXacts(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT gid, transaction::text, prepared, owner::text FROM pg_prepared_xacts ORDER BY prepared`)
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		var gid, xid, owner string
		var at time.Time
		if err := rows.Scan(&gid, &xid, &at, &owner); err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, fmt.Sprintf("prepared transaction %q (xid %s, owner %q, prepared at %s)", gid, xid, owner, at.UTC().Format(time.RFC3339)))
	}
	return out, rows.Err()
}
