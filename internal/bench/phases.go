package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/dbproc"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// pollEvery is how often the throughput phases look at the catalog (a
// phase's end is known to within it: 200 ms until session 36, when a poll
// became cheap enough, watcher.poll); latencyPoll is the latency phase's
// (its resolution).
const (
	pollEvery   = 100 * time.Millisecond
	latencyPoll = 50 * time.Millisecond
)

// config is the daemon's config: the defaults but for the names, the
// commit interval and the admin listener (off).
func (b *run) config() string {
	data := filepath.Join(b.dir, "cdcd")
	return fmt.Sprintf(`# Written by cdcd bench.
pipeline: %s
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [%s]
    snapshot: initial
sink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: %s
    mode: upsert
    commit_interval: %s
admin:
  listen: "off"
`, pipeline, data, b.dsn, slot, publication, tableName, "sqlite://"+filepath.Join(data, "catalog.db"),
		"file://"+filepath.Join(data, "warehouse"), namespace, b.opts.CommitInterval)
}

// prepare fills the table, writes the config and opens the catalog watcher.
func (b *run) prepare(ctx context.Context) error {
	for _, s := range []string{slot, rawSlot} { // a previous run's, on a DSN
		if _, err := b.conn.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", s); err != nil {
			return fmt.Errorf("bench: drop old slot %s: %w", s, err)
		}
	}
	data := filepath.Join(b.dir, "cdcd")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	b.flushDB = b.checkpointPG
	b.printf("Filling public.bench with %d rows ...", b.opts.Rows)
	t0 := time.Now()
	if err := fillTable(ctx, b.conn, b.opts.Rows); err != nil {
		return err
	}
	b.printf("  filled in %v", time.Since(t0).Round(time.Millisecond))
	b.cfgPath = filepath.Join(b.dir, "cdcd.yaml")
	if err := os.WriteFile(b.cfgPath, []byte(b.config()), 0o644); err != nil {
		return err
	}
	w, err := openWatcher(ctx, iceberg.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(data, "catalog.db"), Name: "cdcd",
		Warehouse: "file://" + filepath.Join(data, "warehouse")}, table.Identifier{namespace, "bench"})
	if err != nil {
		return err
	}
	b.watch = w
	b.cleanup = append(b.cleanup, w.close)
	return nil
}

// pgCPU is PostgreSQL's CPU time so far, or -1 when it is not ours.
func (b *run) pgCPU() time.Duration {
	if b.pgPID == 0 {
		return -1
	}
	d, err := dbproc.TreeCPU(b.pgPID)
	if err != nil {
		return -1
	}
	return d
}

func pgDelta(from, to time.Duration) time.Duration {
	if from < 0 || to < 0 {
		return -1
	}
	return to - from
}

// measureRaw times fn in this process.
func (b *run) measureRaw(name string, items int64, fn func() (int64, error)) (Measure, error) {
	pg0, cpu0, t0 := b.pgCPU(), selfCPU(), time.Now()
	n, err := fn()
	if err != nil {
		return Measure{}, err
	}
	if n > 0 {
		items = n
	}
	return Measure{Name: name, Items: items, Wall: time.Since(t0), CPU: selfCPU() - cpu0, PGCPU: pgDelta(pg0, b.pgCPU())}, nil
}

// copyPhase measures COPY ... TO STDOUT (FORMAT binary).
func (b *run) copyPhase(ctx context.Context, _ streamPlan) error {
	if err := b.settle(ctx); err != nil {
		return err
	}
	for i := 0; i < b.opts.CopyRuns; i++ {
		m, err := b.measureRaw("COPY binary (raw limit)", int64(b.opts.Rows), func() (int64, error) {
			tag, err := b.conn.PgConn().CopyTo(ctx, io.Discard, "COPY bench TO STDOUT (FORMAT binary)")
			return tag.RowsAffected(), err
		})
		if err != nil {
			return fmt.Errorf("bench: COPY: %w", err)
		}
		b.printf("COPY binary run %d: %.0f rows/s", i+1, m.Rate())
		b.res.Copy = append(b.res.Copy, m)
	}
	return nil
}

// daemonPhase runs a daemon from its start until done holds for the
// table, and measures it.
func (b *run) daemonPhase(ctx context.Context, name string, items int64, timeout time.Duration,
	done func(tableState) bool) (Measure, tableState, error) {
	if err := b.settle(ctx); err != nil {
		return Measure{}, tableState{}, err
	}
	pg0 := b.pgCPU()
	c, err := b.startChild(name)
	if err != nil {
		return Measure{}, tableState{}, err
	}
	defer c.stop()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	self0 := selfCPU()
	st, err := b.watch.waitFor(wctx, pollEvery, c, done, nil)
	if err != nil {
		return Measure{}, st, fmt.Errorf("bench: %s: %w (table holds %d rows)", name, err, st.rows)
	}
	// The benchmark's polls run on the cores the daemon runs on.
	b.printf("  the benchmark's own CPU while the daemon ran: %v (its polls of the catalog)", (selfCPU() - self0).Round(time.Millisecond))
	wall := time.Since(c.started)
	cpu, rss, err := c.usage()
	if err != nil {
		return Measure{}, st, err
	}
	m := Measure{Name: name, Items: items, Wall: wall, CPU: cpu, PGCPU: pgDelta(pg0, b.pgCPU()), PeakRSS: rss}
	if err := c.stop(); err != nil {
		return m, st, err
	}
	return m, st, nil
}

// phaseTimeout bounds a throughput phase: generous, at 2,000 rows/s.
func phaseTimeout(items int) time.Duration {
	return time.Minute + time.Duration(items/2000)*time.Second
}

// loadPhase runs the initial load into Iceberg.
func (b *run) loadPhase(ctx context.Context, _ streamPlan) error {
	b.printf("Initial load: cdcd from its start until the Iceberg table holds %d rows ...", b.opts.Rows)
	rows := int64(b.opts.Rows)
	// The load begins the table with a reset marker in every partition
	// (source/postgres loadReset): records, not rows.
	m, st, err := b.daemonPhase(ctx, "load", rows, phaseTimeout(b.opts.Rows), func(st tableState) bool {
		return len(st.offsets) > 0 && st.consumed >= rows+int64(len(st.offsets))
	})
	if err != nil {
		return err
	}
	if st.rows != rows {
		return fmt.Errorf("bench: after the load the table holds %d rows, want %d", st.rows, rows)
	}
	b.loaded = st.consumed
	m.Name = "initial load -> Iceberg"
	b.res.Load = m
	b.printf("  %.0f rows/s in %v", m.Rate(), m.Wall.Round(time.Millisecond))
	return nil
}

// streamPhase writes the workload, reads it with the raw decode loop,
// then lets a daemon catch up on it.
func (b *run) streamPhase(ctx context.Context, plan streamPlan) error {
	if _, err := b.conn.Exec(ctx, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", rawSlot)); err != nil {
		return fmt.Errorf("bench: create slot %s: %w", rawSlot, err)
	}
	stmts := plan.statements()
	b.printf("Streaming: writing %d transactions (%d inserts, %d updates, %d deletes) with cdcd stopped ...",
		len(stmts), plan.insertTx*plan.txRows, plan.updateTx*plan.txRows, plan.deleteTx*plan.txRows)
	t0 := time.Now()
	var last txResult
	for i, sql := range stmts {
		res, err := runTx(ctx, b.conn, sql)
		if err != nil {
			return err
		}
		if res.rows != int64(plan.txRows) {
			return fmt.Errorf("bench: workload transaction %d changed %d rows, want %d", i, res.rows, plan.txRows)
		}
		last = res
	}
	events := int64(plan.events())
	b.printf("  written in %v (%.0f events/s)", time.Since(t0).Round(time.Millisecond), float64(events)/time.Since(t0).Seconds())

	if err := b.settle(ctx); err != nil {
		return err
	}
	raw, err := b.measureRaw("pgoutput decode loop (raw limit)", events, func() (int64, error) {
		st, err := postgres.DecodeLoop(ctx, b.dsn, rawSlot, publication, last.inner)
		return st.Events(), err
	})
	if err != nil {
		return fmt.Errorf("bench: decode loop: %w", err)
	}
	if raw.Items != events {
		return fmt.Errorf("bench: the decode loop saw %d events, want %d", raw.Items, events)
	}
	if err := b.dropSlot(ctx, rawSlot); err != nil {
		return err
	}
	b.res.Decode = raw
	b.printf("  decode loop: %.0f events/s", raw.Rate())

	b.printf("Streaming: cdcd from its start until a snapshot holds the last transaction ...")
	// Every record of the log in the table: a snapshot's source position
	// alone is no watermark (a commit may hold part of a transaction: the
	// partitions are read one after another).
	total := b.loaded + plan.records()
	m, st, err := b.daemonPhase(ctx, "stream", events, phaseTimeout(int(events)), func(st tableState) bool { return st.consumed >= total })
	if err != nil {
		return err
	}
	if want := int64(plan.finalRows()); st.rows != want || st.consumed != total || st.lsn < last.inner {
		return fmt.Errorf("bench: after streaming the table holds %d rows, want %d (consumed %d records of %d, source position %X, last transaction at %X)",
			st.rows, want, st.consumed, total, st.lsn, last.inner)
	}
	m.Name = "streaming -> Iceberg"
	b.res.Stream = m
	b.printf("  %.0f events/s in %v", m.Rate(), m.Wall.Round(time.Millisecond))
	return nil
}

// dropSlot drops a slot, waiting up to 10 s for its walsender to let go
// (it exits a moment after its client closed the connection).
func (b *run) dropSlot(ctx context.Context, name string) error {
	var err error
	for i := 0; i < 100; i++ {
		if _, err = b.conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", name); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("bench: drop slot %s: %w", name, err)
}

// waitSlotActive waits until the daemon streams from its slot.
func (b *run) waitSlotActive(ctx context.Context, c *child) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var active bool
		err := b.conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		if err == nil && active {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the daemon did not start streaming within a minute; see %s", c.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.proc.Done():
			return fmt.Errorf("bench: cdcd exited early; see %s", c.logPath)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// countMirror reads the Iceberg table's row count from its snapshot summary
// and, unless NoScan, by iceberg-go's scan into res; true when both equal
// res.PGRows, the source's count.
func (b *run) countMirror(ctx context.Context) (bool, error) {
	st, err := b.watch.poll(ctx)
	if err != nil {
		return false, err
	}
	b.res.SummaryRows, b.res.ScanRows = st.rows, -1
	if !b.opts.NoScan {
		b.printf("Verifying: scanning the Iceberg table ...")
		if b.res.ScanRows, err = b.watch.scanCount(ctx, "id"); err != nil {
			return false, fmt.Errorf("bench: scan: %w", err)
		}
	}
	return b.res.SummaryRows == b.res.PGRows && (b.res.ScanRows < 0 || b.res.ScanRows == b.res.PGRows), nil
}

// verify compares the table's final row count with PostgreSQL's.
func (b *run) verify(ctx context.Context, _ streamPlan) error {
	if err := b.conn.QueryRow(ctx, "SELECT count(*) FROM bench").Scan(&b.res.PGRows); err != nil {
		return err
	}
	if equal, err := b.countMirror(ctx); err != nil || equal {
		return err
	}
	return fmt.Errorf("bench: PostgreSQL holds %d rows but the Iceberg table %d (summary), %d (scan)%s",
		b.res.PGRows, b.res.SummaryRows, b.res.ScanRows, b.differences(ctx))
}

// differences names some ids that PostgreSQL and Iceberg disagree on.
func (b *run) differences(ctx context.Context) string {
	ice, err := b.watch.scanIDs(ctx)
	if err != nil {
		return fmt.Sprintf("; no id comparison: %v", err)
	}
	rows, err := b.conn.Query(ctx, "SELECT id FROM bench")
	if err != nil {
		return fmt.Sprintf("; no id comparison: %v", err)
	}
	var missing, twice []int64
	seen := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			break
		}
		seen[id] = true
		switch n := ice[id]; {
		case n == 0 && len(missing) < 20:
			missing = append(missing, id)
		case n > 1 && len(twice) < 20:
			twice = append(twice, id)
		}
	}
	rows.Close()
	var extra []int64
	for id := range ice {
		if !seen[id] && len(extra) < 20 {
			extra = append(extra, id)
		}
	}
	return fmt.Sprintf("; ids missing in Iceberg (first 20): %v; more than once: %v; not in PostgreSQL: %v", missing, twice, extra)
}
