package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/apache/iceberg-go/table"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mirror"
)

// `cdcd demo --mysql`: the same shop and workload in a throwaway MariaDB
// (the local binaries, as the tests start them), loaded by chunks while
// the binlog streams, then mirrored.

// mysqlShop is the shop in MariaDB (no foreign keys: InnoDB's cascades are
// not in the binlog).
var mysqlShop = []string{
	`CREATE TABLE customers (id BIGINT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(200) NOT NULL,
	  email VARCHAR(200) NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`,
	`CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer_id BIGINT NOT NULL, amount DECIMAL(12,2) NOT NULL,
	  status VARCHAR(20) NOT NULL DEFAULT 'new', created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))`,
	`INSERT INTO customers (name, email) VALUES ('Ada Lovelace', 'ada@example.com'), ('Alan Turing', 'alan@example.com'),
	  ('Grace Hopper', 'grace@example.com'), ('Edsger Dijkstra', 'edsger@example.com')`,
	`INSERT INTO orders (customer_id, amount, status) VALUES (1, 19.99, 'paid'), (1, 5.00, 'new'), (2, 120.50, 'shipped'), (3, 42.00, 'new')`,
}

var mysqlTables = []string{"shop.customers", "shop.orders"}

// runMySQL is Run with a throwaway MariaDB.
func runMySQL(ctx context.Context, opts Options, dir string) error {
	out := opts.Out
	p := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	p("Starting a throwaway MariaDB from the local binaries ...")
	srv, err := mariadbserver.Start(ctx, mariadbserver.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	db, err := createMySQLShop(ctx, srv)
	if err != nil {
		return err
	}
	defer db.Close()
	p("MariaDB is up on port %d with database shop (tables shop.customers and shop.orders, a few rows each).", srv.Port())
	dsn := (&url.URL{Scheme: "mysql", User: url.User(mariadbserver.RootUser), Host: srv.Addr(), Path: "/shop"}).String()
	adm, err := newAdmin()
	if err != nil {
		return err
	}
	run, err := startPipeline(ctx, dir, mysqlDemoConfig(dir, dsn, adm), opts, p)
	if err != nil {
		return err
	}
	defer run.release()
	d, done, cfg, cfgPath := run.d, run.done, run.cfg, run.cfgPath
	adm.print(out, cfgPath, "shop.shop_orders")

	if err := waitStreaming(ctx, d, done); err != nil {
		return err
	}
	p("Streaming the binlog; the tables are loaded by key chunks meanwhile (no locks).")
	p("Running a workload: inserts, updates and deletes in small transactions for a few seconds ...")
	stats, pos, err := mysqlWorkload(ctx, db)
	if err != nil {
		return err
	}
	p("  %d inserts, %d updates, %d deletes committed.", stats.inserts, stats.updates, stats.deletes)
	p("Waiting until every change is committed to Iceberg ...")
	if err := waitMySQLCaughtUp(ctx, d, pos, done); err != nil {
		return err
	}
	if err := summarizeMySQL(ctx, out, d, db, cfg); err != nil {
		return err
	}
	printNextMySQL(out, cfgPath)
	if opts.Keep {
		p("\nStill capturing (connect with: mariadb -h %s -P %d -u root shop). Press Ctrl-C to stop.", mariadbserver.Host, srv.Port())
		<-ctx.Done()
	}
	if err := run.stop(); err != nil {
		return err
	}
	return ctx.Err()
}

func createMySQLShop(ctx context.Context, srv *mariadbserver.Server) (*sql.DB, error) {
	root, err := srv.Open("")
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE shop"); err != nil {
		return nil, fmt.Errorf("demo: create database shop: %w", err)
	}
	db, err := srv.Open("shop")
	if err != nil {
		return nil, err
	}
	for _, q := range mysqlShop {
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("demo: create the shop: %w", err)
		}
	}
	return db, nil
}

func mysqlDemoConfig(dir, dsn string, adm admin) string {
	return fmt.Sprintf(`# Written by cdcd demo --mysql: the pipeline that captured the demo shop.
pipeline: demo
data_dir: %q

source:
  mysql:
    dsn: %q
    tables: [%s]
    snapshot: initial     # loaded by key chunks while the binlog streams; no locks

log:
  backend: embedded
  partitions: 4

sink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: shop       # shop.orders lands as shop.shop_orders
    mode: upsert          # a mirror of each table; append writes a changelog instead
    commit_interval: 1s

%s`, dir, dsn, strings.Join(mysqlTables, ", "), "sqlite://"+filepath.Join(dir, "catalog.db"), "file://"+filepath.Join(dir, "warehouse"), adm.block())
}

// mysqlWorkload is workload's MariaDB twin; it returns the server's GTID
// position after the last transaction.
func mysqlWorkload(ctx context.Context, db *sql.DB) (workloadStats, string, error) {
	var st workloadStats
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 60; i++ {
		if err := mysqlTx(ctx, db, func(tx *sql.Tx) error {
			name := firstNames[rng.IntN(len(firstNames))]
			res, err := tx.ExecContext(ctx, `INSERT INTO customers (name, email) VALUES (?, ?)`,
				fmt.Sprintf("%s #%d", name, i), fmt.Sprintf("customer%d@example.com", i))
			if err != nil {
				return err
			}
			cust, _ := res.LastInsertId()
			st.inserts++
			for j := 0; j < 1+rng.IntN(3); j++ {
				if _, err := tx.ExecContext(ctx, `INSERT INTO orders (customer_id, amount) VALUES (?, ?)`,
					cust, fmt.Sprintf("%d.%02d", 1+rng.IntN(300), rng.IntN(100))); err != nil {
					return err
				}
				st.inserts++
			}
			n, err := execN(ctx, tx, `UPDATE orders SET status = ? ORDER BY RAND() LIMIT 1`, statuses[rng.IntN(len(statuses))])
			st.updates += n
			if err == nil && i%5 == 4 {
				n, err = execN(ctx, tx, `DELETE FROM orders WHERE status IN ('cancelled', 'new') ORDER BY id LIMIT 1`)
				st.deletes += n
			}
			if err == nil && i%10 == 9 {
				n, err = execN(ctx, tx, `UPDATE customers SET email = CONCAT(LOWER(name), '@example.org') WHERE id = ?`, 1+rng.Int64N(cust))
				st.updates += n
			}
			return err
		}); err != nil {
			return st, "", err
		}
		select { // pace it so the sink commits several snapshots
		case <-ctx.Done():
			return st, "", ctx.Err()
		case <-time.After(40 * time.Millisecond):
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE customers SET name = CONCAT(name, ' (VIP)') WHERE id = 1`); err != nil {
		return st, "", err
	}
	st.updates++
	var pos string
	err := db.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos)
	return st, pos, err
}

func mysqlTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("demo: workload: %w", err)
	}
	return tx.Commit()
}

func execN(ctx context.Context, tx *sql.Tx, q string, args ...any) (int, error) {
	res, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// waitMySQLCaughtUp returns once the reader's checkpoint holds the GTID
// position pos (every change up to it is durable in the log), the loads
// are done and every table has committed all of its topic.
func waitMySQLCaughtUp(ctx context.Context, d *daemon.Daemon, pos string, done <-chan error) error {
	want, err := gomysql.ParseGTIDSet(gomysql.MariaDBFlavor, pos)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if st := d.Status(); st.CaughtUp(0) && loadsDone(st) {
			if have, err := gomysql.ParseGTIDSet(gomysql.MariaDBFlavor, d.MySQLStats().GTID()); err == nil && have.Contain(want) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("demo: the pipeline did not catch up within 2 minutes; see the daemon log")
		}
		select {
		case err := <-done:
			return fmt.Errorf("demo: the pipeline stopped: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// loadsDone reports whether no snapshot is queued or running.
func loadsDone(st daemon.Status) bool {
	for _, t := range st.Tables {
		if t.Snapshot.Incremental != "" || !t.Snapshot.Done {
			return false
		}
	}
	return true
}

// summarizeMySQL prints, per table, what landed in Iceberg next to MariaDB.
func summarizeMySQL(ctx context.Context, out io.Writer, d *daemon.Daemon, db *sql.DB, cfg *config.Config) error {
	fmt.Fprintln(out, "\nWhat landed in Iceberg (read back with iceberg-go's scan):")
	for _, name := range cfg.Source.MySQL.Tables {
		ns, tbl := cfg.Sink.Iceberg.TableIdent(name)
		t, err := d.Catalog().LoadTable(ctx, table.Identifier{ns, tbl})
		if err != nil {
			return fmt.Errorf("demo: load %s.%s: %w", ns, tbl, err)
		}
		dbName, bare, _ := strings.Cut(name, ".")
		diff, err := mirror.CompareMySQL(ctx, db, dbName, bare, t)
		if err != nil {
			return err
		}
		verdict := "identical: every row compared"
		if !diff.Equal() {
			verdict = diff.String()
		}
		fmt.Fprintf(out, "\n  %s.%s  <-  MariaDB %s\n", ns, tbl, name)
		fmt.Fprintf(out, "    rows:       %d in Iceberg, %d in MariaDB — %s (%d matched)\n", diff.IcebergRows, diff.SourceRows, verdict,
			diff.SourceRows-len(diff.Missing)-len(diff.Differ))
		fmt.Fprintf(out, "    location:   %s\n", t.Location())
		summary := t.CurrentSnapshot().Summary.Properties
		fmt.Fprintf(out, "    snapshots:  %d, each carrying the log offsets it covers (now %s)\n", len(t.Metadata().Snapshots()), summary["cdcd.offsets"])
		fmt.Fprintf(out, "    files:      %s data files, %s deletion vectors (%s rows deleted or replaced)\n",
			summary["total-data-files"], summary["total-delete-files"], summary["total-position-deletes"])
		at, err := t.Scan().ToArrowTable(ctx)
		if err != nil {
			return fmt.Errorf("demo: scan %s.%s: %w", ns, tbl, err)
		}
		printRows(out, at, 5)
		at.Release()
	}
	return nil
}

func printNextMySQL(out io.Writer, cfgPath string) {
	fmt.Fprintf(out, `
Point cdcd at your own MySQL or MariaDB:
  1. The server writes a row binlog with GTIDs: binlog_format=ROW, binlog_row_image=FULL,
     binlog_row_metadata=FULL (MySQL: gtid_mode=ON); cdcd validate and run name any that is off.
  2. A user with REPLICATION SLAVE, REPLICATION CLIENT (MariaDB: BINLOG MONITOR) and SELECT on
     the tables, plus the watermark table of the lock-free load (the README has the GRANTs).
  3. Copy %s, set source.mysql.dsn and tables (database.table; every table needs a primary
     key), and data_dir; then cdcd validate -c cdcd.yaml && cdcd run -c cdcd.yaml
`, cfgPath)
}
