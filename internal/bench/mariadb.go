package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
	"github.com/cdcd-dev/cdcd/source/mysql"
)

// SourceMariaDB is Options.Source for `cdcd bench --source mariadb`: the
// same table and workload in a throwaway MariaDB 10.11, with these raw
// limits measured in the same run:
//
//   - the load against a plain `SELECT * FROM bench` read by a Go client
//     (database/sql, every column scanned as raw bytes), CopyRuns times;
//   - streaming against a plain BinlogSyncer read-and-decode loop over
//     the same binlog (mysql.DecodeLoop).
//
// There is no latency phase. The daemon registers as replica
// mariaServerID, the decode loop as mariaServerID+1.
const SourceMariaDB = "mariadb"

const (
	mariaDB       = "bench"
	mariaServerID = 4242
	// mariaTable is where the MySQL table bench.bench lands:
	// <namespace>.<db>_<table>.
	mariaTable = "bench_bench"
)

// MariaDB's bench table and workload: the columns of the PostgreSQL
// table's kinds (DECIMAL, TIMESTAMP(6), JSON), filled from MariaDB's
// sequence engine. The workload's statements take the arguments of
// insertSQL, updateSQL and deleteSQL (streamPlan.statementsFrom).
const (
	mariaDDL = `CREATE TABLE bench (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(40), amount DECIMAL(12,2),
	at TIMESTAMP(6) NULL, flag BOOLEAN, doc JSON, score DOUBLE)`
	mariaInsert = `INSERT INTO bench SELECT seq, seq %% 100000, CONCAT(MD5(seq), LPAD(HEX(seq %% 4294967296), 8, '0')),
	(seq %% 10000000) / 100, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq %% 2 = 0,
	JSON_OBJECT('k', seq %% 100, 'tag', CONCAT('t', seq %% 10)), seq / 3 FROM seq_%d_to_%d`
	mariaUpdate = `UPDATE bench b JOIN seq_0_to_%[4]d s ON b.id = %[2]d + s.seq * %[3]d
	SET b.qty = b.qty + 1, b.amount = b.amount + 1, b.at = NOW(6), b.doc = JSON_SET(b.doc, '$.k', %[1]d)`
	mariaDelete = `DELETE b FROM bench b JOIN seq_0_to_%[3]d s ON b.id = %[1]d + s.seq * %[2]d`
)

// mariaRun is the MariaDB benchmark's state beside the shared run.
type mariaRun struct {
	*run
	srv *mariadbserver.Server
	db  *sql.DB
}

// runMariaDB is Run for SourceMariaDB.
func (b *run) runMariaDB(ctx context.Context, plan streamPlan) (*Result, error) {
	m := &mariaRun{run: b}
	if err := m.start(ctx); err != nil {
		return nil, err
	}
	if err := m.prepare(ctx); err != nil {
		return nil, err
	}
	b.printf("Data directory %s; daemon log %s", b.dir, filepath.Join(b.dir, "cdcd.log"))
	for _, phase := range []func(context.Context, streamPlan) error{m.selectPhase, b.loadPhase, m.streamPhase, m.verify} {
		if err := phase(ctx, plan); err != nil {
			return nil, err
		}
	}
	b.res.LoadAvgEnd = loadAverage()
	b.res.Print(b.opts.Out, false)
	return &b.res, nil
}

// start starts the throwaway MariaDB and creates the database.
func (m *mariaRun) start(ctx context.Context) error {
	if m.opts.DSN != "" {
		return fmt.Errorf("bench: --source %s starts its own server; --dsn is PostgreSQL's", SourceMariaDB)
	}
	m.printf("Starting a throwaway MariaDB ...")
	srv, err := mariadbserver.Start(ctx, mariadbserver.Options{Args: []string{"--innodb-buffer-pool-size=256M",
		"--innodb-log-file-size=256M", "--max-binlog-size=256M"}})
	if err != nil {
		return err
	}
	m.cleanup = append(m.cleanup, func() { _ = srv.Stop() })
	m.srv, m.pgPID = srv, srv.PID()
	root, err := srv.Open("")
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+mariaDB); err != nil {
		return fmt.Errorf("bench: create database: %w", err)
	}
	if m.db, err = srv.Open(mariaDB); err != nil {
		return err
	}
	m.db.SetMaxOpenConns(1)
	m.cleanup = append(m.cleanup, func() { m.db.Close() })
	return nil
}

// dsn is the daemon's: root over TCP, in the config's URL form.
func (m *mariaRun) dsn() string {
	return (&url.URL{Scheme: "mysql", User: url.User(mariadbserver.RootUser), Host: m.srv.Addr(), Path: "/" + mariaDB}).String()
}

func (m *mariaRun) config() string {
	data := filepath.Join(m.dir, "cdcd")
	return fmt.Sprintf(`# Written by cdcd bench --source mariadb.
pipeline: %s
data_dir: %q
source:
  mysql:
    dsn: %q
    server_id: %d
    tables: [%s.bench]
    snapshot: initial%s
sink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: %s
    mode: upsert
    commit_interval: %s
admin:
  listen: "off"
`, pipeline, data, m.dsn(), mariaServerID, mariaDB, m.incremental(), "sqlite://"+filepath.Join(data, "catalog.db"),
		"file://"+filepath.Join(data, "warehouse"), namespace, m.opts.CommitInterval)
}

// incremental is the source's incremental block: CDCD_BENCH_CHUNK_ROWS
// sets the load's chunk_rows (default: the reader's, 8192).
func (m *mariaRun) incremental() string {
	if n, err := strconv.Atoi(os.Getenv("CDCD_BENCH_CHUNK_ROWS")); err == nil && n > 0 {
		return fmt.Sprintf("\n    incremental: {chunk_rows: %d}", n)
	}
	return ""
}

// prepare fills the table, writes the config and opens the catalog watcher.
func (m *mariaRun) prepare(ctx context.Context) error {
	m.flushDB = func(ctx context.Context) error { return flushInnoDB(ctx, m.db) }
	m.printf("Filling %s.bench with %d rows ...", mariaDB, m.opts.Rows)
	t0 := time.Now()
	if _, err := m.db.ExecContext(ctx, mariaDDL); err != nil {
		return fmt.Errorf("bench: create table: %w", err)
	}
	const chunk = 100_000
	for lo := 1; lo <= m.opts.Rows; lo += chunk {
		if _, err := m.db.ExecContext(ctx, fmt.Sprintf(mariaInsert, lo, min(lo+chunk-1, m.opts.Rows))); err != nil {
			return fmt.Errorf("bench: fill table: %w", err)
		}
	}
	if _, err := m.db.ExecContext(ctx, "ANALYZE TABLE bench"); err != nil {
		return fmt.Errorf("bench: analyze: %w", err)
	}
	m.printf("  filled in %v", time.Since(t0).Round(time.Millisecond))
	data := filepath.Join(m.dir, "cdcd")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	m.cfgPath = filepath.Join(m.dir, "cdcd.yaml")
	if err := os.WriteFile(m.cfgPath, []byte(m.config()), 0o644); err != nil {
		return err
	}
	w, err := openWatcher(ctx, iceberg.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(data, "catalog.db"), Name: "cdcd",
		Warehouse: "file://" + filepath.Join(data, "warehouse")}, table.Identifier{namespace, mariaTable})
	if err != nil {
		return err
	}
	m.watch = w
	m.cleanup = append(m.cleanup, w.close)
	return nil
}

// selectPhase measures a plain SELECT * read of the table.
func (m *mariaRun) selectPhase(ctx context.Context, _ streamPlan) error {
	if err := m.settle(ctx); err != nil {
		return err
	}
	for i := 0; i < m.opts.CopyRuns; i++ {
		r, err := m.measureRaw("SELECT * (raw limit)", int64(m.opts.Rows), func() (int64, error) { return selectAll(ctx, m.db) })
		if err != nil {
			return fmt.Errorf("bench: SELECT *: %w", err)
		}
		m.printf("SELECT * run %d: %.0f rows/s", i+1, r.Rate())
		m.res.Copy = append(m.res.Copy, r)
	}
	return nil
}

// selectAll reads every row of the table, each column as raw bytes.
func selectAll(ctx context.Context, db *sql.DB) (int64, error) {
	rows, err := db.QueryContext(ctx, "SELECT * FROM bench")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]sql.RawBytes, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// streamPhase writes the workload with the daemon stopped, reads it with
// the plain decode loop, then lets a daemon catch up on it.
func (m *mariaRun) streamPhase(ctx context.Context, plan streamPlan) error {
	var start string
	if err := m.db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&start); err != nil {
		return err
	}
	stmts := plan.statementsFrom(mariaInsert, mariaUpdate, mariaDelete)
	m.printf("Streaming: writing %d transactions (%d inserts, %d updates, %d deletes) with cdcd stopped ...",
		len(stmts), plan.insertTx*plan.txRows, plan.updateTx*plan.txRows, plan.deleteTx*plan.txRows)
	t0 := time.Now()
	for i, q := range stmts {
		res, err := m.db.ExecContext(ctx, q)
		if err != nil {
			return fmt.Errorf("bench: workload transaction %d: %w", i, err)
		}
		if n, _ := res.RowsAffected(); n != int64(plan.txRows) {
			return fmt.Errorf("bench: workload transaction %d changed %d rows, want %d", i, n, plan.txRows)
		}
	}
	events := int64(plan.events())
	m.printf("  written in %v (%.0f events/s)", time.Since(t0).Round(time.Millisecond), float64(events)/time.Since(t0).Seconds())

	// The loop is timed CopyRuns times, as the load's raw limit is, and
	// the median counts: one run's rate moved 411k–867k events/s between
	// runs of the same binlog on this project's machine (BENCHMARKS.md,
	// session 29), and the streaming ratio with it.
	if err := m.settle(ctx); err != nil {
		return err
	}
	for i := range m.opts.CopyRuns {
		raw, err := m.measureRaw("BinlogSyncer decode loop (raw limit)", events, func() (int64, error) {
			return mysql.DecodeLoop(ctx, m.srv.ReplDSN(""), mariaServerID+1, mysql.FlavorMariaDB, start, events)
		})
		if err != nil {
			return fmt.Errorf("bench: decode loop: %w", err)
		}
		if raw.Items != events {
			return fmt.Errorf("bench: the decode loop saw %d events, want %d", raw.Items, events)
		}
		m.printf("  decode loop run %d: %.0f events/s", i+1, raw.Rate())
		m.res.Decodes = append(m.res.Decodes, raw)
	}
	m.res.Decode = medianRun(m.res.Decodes)

	m.printf("Streaming: cdcd from its start until a snapshot holds the last transaction ...")
	total := m.loaded + plan.records()
	r, st, err := m.daemonPhase(ctx, "stream", events, phaseTimeout(int(events)), func(st tableState) bool { return st.consumed >= total })
	if err != nil {
		return err
	}
	if want := int64(plan.finalRows()); st.rows != want || st.consumed != total {
		return fmt.Errorf("bench: after streaming the table holds %d rows, want %d (consumed %d records of %d)", st.rows, want, st.consumed, total)
	}
	r.Name = "streaming -> Iceberg"
	m.res.Stream = r
	m.printf("  %.0f events/s in %v", r.Rate(), r.Wall.Round(time.Millisecond))
	return nil
}

// verify compares the table's final row count with MariaDB's.
func (m *mariaRun) verify(ctx context.Context, _ streamPlan) error {
	if err := m.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM bench").Scan(&m.res.PGRows); err != nil {
		return err
	}
	if equal, err := m.countMirror(ctx); err != nil || equal {
		return err
	}
	return fmt.Errorf("bench: MariaDB holds %d rows but the Iceberg table %d (summary), %d (scan)",
		m.res.PGRows, m.res.SummaryRows, m.res.ScanRows)
}

// printMariaDB writes the MariaDB run's table and goals.
func (r *Result) printMariaDB(w io.Writer, markdown bool) {
	o := r.Options
	sel := r.CopyMedian()
	fmt.Fprintf(w, "\ncdcd bench --source mariadb: load %d rows; streaming %d events (scale %g, %d-row transactions); commit_interval %v\n",
		o.Rows, r.Stream.Items, o.Scale, o.TxRows, o.CommitInterval)
	fmt.Fprintf(w, "machine: %d cores, load average %s at the start, %s at the end\n\n", runtime.NumCPU(), r.LoadAvgStart, r.LoadAvgEnd)
	head := []string{"phase", "rows", "seconds", "rows/s", "ratio to raw", "cdcd CPU-µs/row", "MariaDB CPU-µs/row", "cdcd peak RSS"}
	cells := func(m Measure, raw *Measure) []string {
		ratio, cpu, rss := "", fmt.Sprintf("%.2f", m.CPUPerItem()), ""
		if raw != nil {
			ratio = fmt.Sprintf("%.2f", m.Rate()/raw.Rate())
		}
		if m.PeakRSS == 0 {
			cpu = fmt.Sprintf("(%.2f bench)", m.CPUPerItem())
		} else {
			rss = fmt.Sprintf("%d MB", m.PeakRSS>>20)
		}
		return []string{m.Name, fmt.Sprint(m.Items), fmt.Sprintf("%.1f", m.Wall.Seconds()), fmt.Sprintf("%.0f", m.Rate()), ratio, cpu,
			fmt.Sprintf("%.2f", m.PGCPUPerItem()), rss}
	}
	selRow := cells(sel, nil)
	selRow[0] = fmt.Sprintf("SELECT * (raw; median of %d)", len(r.Copy))
	loopRow := cells(r.Decode, nil)
	if len(r.Decodes) > 1 {
		loopRow[0] = fmt.Sprintf("BinlogSyncer decode loop (raw; median of %d)", len(r.Decodes))
	}
	writeTable(w, head, [][]string{selRow, cells(r.Load, &sel), loopRow, cells(r.Stream, &r.Decode)}, markdown)
	scan := "not scanned"
	if r.ScanRows >= 0 {
		scan = fmt.Sprintf("%d by iceberg-go scan", r.ScanRows)
	}
	fmt.Fprintf(w, "\nverified: MariaDB %d rows; Iceberg %d by snapshot summary, %s\n", r.PGRows, r.SummaryRows, scan)
	fmt.Fprintln(w, "goals:")
	peak := max(r.Load.PeakRSS, r.Stream.PeakRSS)
	for _, g := range []struct {
		what string
		ok   bool
		got  string
	}{
		{fmt.Sprintf("initial load >= %.2f of SELECT *", GoalLoadRatio), r.Load.Rate()/sel.Rate() >= GoalLoadRatio, fmt.Sprintf("%.2f", r.Load.Rate()/sel.Rate())},
		{fmt.Sprintf("streaming >= %.2f of the decode loop", GoalStreamRatio), r.Stream.Rate()/r.Decode.Rate() >= GoalStreamRatio,
			fmt.Sprintf("%.2f", r.Stream.Rate()/r.Decode.Rate())},
		{fmt.Sprintf("peak RSS <= %d MB", GoalPeakRSS>>20), peak <= GoalPeakRSS, fmt.Sprintf("%d MB", peak>>20)},
	} {
		mark := "met"
		if !g.ok {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %-50s %-7s (%s)\n", g.what, mark, g.got)
	}
}
