package faultsuite

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/internal/mirror"
)

// The MySQL / MariaDB side of the fault suite: the pipeline's source is a
// MariaDB server of the test's own; the harness's process control, status
// and catalog functions serve it as they serve PostgreSQL's.

// myPipeline is a pipeline whose source is MariaDB.
type myPipeline struct {
	*pipeline
	srv    *mariadbserver.Server
	db     *sql.DB // root, in the test's database
	name   string  // the test's database
	tables []string
	extra  string // YAML under source.mysql
	format int    // sink.iceberg.format_version; 0: the default
}

// newMyPipeline starts a MariaDB server, creates the test's database
// (running ddl as root), the watermark table granted to the reader's user,
// and writes the config; nothing runs until start.
func newMyPipeline(t *testing.T, ddl []string, tables []string, extra string) *myPipeline {
	t.Helper()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	dsn := mariadbtest.NewDBOn(t, srv)
	db, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	p := &myPipeline{pipeline: &pipeline{t: t, ctx: t.Context()}, srv: srv, db: db, name: name, extra: extra}
	for _, tb := range tables {
		p.tables = append(p.tables, name+"."+tb)
	}
	p.Dir = t.TempDir()
	p.DataDir = filepath.Join(p.Dir, "data")
	p.Catalog = filepath.Join(p.DataDir, "catalog.db")
	p.Warehouse = filepath.Join(p.DataDir, "warehouse")
	p.Admin = cdcdtest.FreeAddr(t)
	p.sql(ddl...)
	if strings.Contains(extra, "read_only: true") {
		p.writeMyConfig() // no watermark table: nothing is written to the source
		return p.openLog()
	}
	p.sql("CREATE TABLE cdcd_watermark (id VARCHAR(64) NOT NULL PRIMARY KEY, mark VARCHAR(255) NOT NULL, "+
		"written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON `%s`.`cdcd_watermark` TO '%s'@'%%'", name, mariadbserver.ReplUser))
	p.writeMyConfig()
	return p.openLog()
}

// openLog opens the daemon's log file, printed when the test fails.
func (p *myPipeline) openLog() *myPipeline {
	t := p.t
	var err error
	if p.logFile, err = os.OpenFile(filepath.Join(p.Dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.child != nil {
			p.child.Kill()
		}
		p.logFile.Close()
		if t.Failed() {
			t.Logf("daemon log (tail):\n%s", p.logTail(60_000))
		}
	})
	return p
}

func (p *myPipeline) writeMyConfig() {
	p.t.Helper()
	p.CfgPath = filepath.Join(p.Dir, "cdcd.yaml")
	format := ""
	if p.format != 0 {
		format = fmt.Sprintf("    format_version: %d\n", p.format)
	}
	cfg := fmt.Sprintf(`pipeline: myfault
data_dir: %q
source:
  mysql:
    dsn: "mysql://%s:%s@%s/%s"
    server_id: %d
    tables: [%s]
%slog:
  partitions: 3
sink:
  iceberg:
    catalog: {type: sql, uri: %q, name: cdcd}
    warehouse: %q
    namespace: cdc
    commit_interval: 250ms
%sadmin:
  listen: %q
shutdown:
  deadline: 20s
`, p.DataDir, mariadbserver.ReplUser, mariadbserver.ReplPassword, p.srv.Addr(), p.name, 4000+p.srv.ServerID(),
		strings.Join(p.tables, ", "), p.extra, "sqlite://"+p.Catalog, "file://"+p.Warehouse, format, p.Admin)
	if err := os.WriteFile(p.CfgPath, []byte(cfg), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// sql runs statements as root in the test's database.
func (p *myPipeline) sql(stmts ...string) {
	p.t.Helper()
	for _, q := range stmts {
		if _, err := p.db.Exec(q); err != nil {
			p.t.Fatalf("%s: %v", abbrevSQL(q), err)
		}
	}
}

// myDiff compares a table (its bare name) with its mirror.
func (p *myPipeline) myDiff(tb string) *mirror.Diff {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	d, err := mirror.CompareMySQL(p.ctx, p.db, p.name, tb, p.icebergTable(cat, p.name+"."+tb))
	if err != nil {
		p.t.Fatal(err)
	}
	return d
}

// waitMirror waits until each table's mirror equals it (the daemon must
// run and the source be quiet), failing with the last difference.
func (p *myPipeline) waitMirror(tables ...string) {
	p.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for _, tb := range tables {
		for {
			d := p.myDiff(tb)
			if d.Equal() {
				break
			}
			if time.Now().After(deadline) {
				p.t.Fatalf("the mirror of %s never equalled it: %s", tb, d)
			}
			if p.child.Exited() {
				p.t.Fatalf("the daemon exited: %v; mirror: %s", p.child.ExitErr(), d)
			}
			time.Sleep(time.Second)
		}
	}
}

// waitLoaded waits until table (db.table) has no snapshot queued or
// running and its load is done.
func (p *myPipeline) waitLoaded(table string) {
	p.t.Helper()
	p.waitFor("the load of "+table, 5*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Source == table {
				return tb.Snapshot.Done && tb.Snapshot.Percent == 100
			}
		}
		return false
	})
}

// myHammer writes to exactly the keys being chunked until stopped:
// updates, deletes, inserts inside and beyond the upper bound, key
// changes. Most writes go to the keys just ahead of the load's progress
// (polled from /status), where the chunk being read is.
func (p *myPipeline) myHammer(table string, n int, seed uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var cursor atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if p.child == nil {
				continue
			}
			if st, err := p.child.Status(); err == nil {
				for _, tb := range st.Tables {
					if tb.Source == p.name+"."+table && !tb.Snapshot.Done {
						cursor.Store(tb.Snapshot.Rows)
					}
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 2))
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			k := rng.IntN(n + n/10)
			if rng.IntN(5) > 0 {
				k = int(cursor.Load()) + rng.IntN(900)
			}
			var q string
			switch rng.IntN(7) {
			case 0, 1:
				q = fmt.Sprintf("UPDATE %s SET v = v + 1, note = 'u%d', amount = amount + 0.01 WHERE id = %d", table, i, k)
			case 2:
				q = fmt.Sprintf("DELETE FROM %s WHERE id = %d", table, k)
			case 3:
				q = fmt.Sprintf("INSERT INTO %s VALUES (%d, 'b', 0, 'i%d', 1.00, NOW(6)) ON DUPLICATE KEY UPDATE v = v + 100", table, k, i)
			case 4:
				q = fmt.Sprintf("UPDATE %s SET id = %d WHERE id = %d AND g = 'a'", table, n+n/10+rng.IntN(n), k) // a key change
			case 5:
				q = fmt.Sprintf("INSERT IGNORE INTO %s VALUES (%d, 'a', 1, 'beyond', 2.50, NULL)", table, n*3+i)
			case 6:
				q = fmt.Sprintf("DELETE FROM %s WHERE id BETWEEN %d AND %d", table, k, k+3) // several keys at once
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := p.db.ExecContext(ctx, q)
			cancel()
			if err != nil && !strings.Contains(err.Error(), "Duplicate") {
				p.t.Errorf("%s: %v", q, err)
				return
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	p.t.Cleanup(stop)
	return stop
}

const myOrdersDDL = "(id INT NOT NULL, g VARCHAR(8) NOT NULL, v INT, note VARCHAR(40), amount DECIMAL(12,2), at DATETIME(6), PRIMARY KEY (id, g))"

// myRows inserts n rows into table.
func (p *myPipeline) myRows(table string, n int) {
	p.t.Helper()
	for lo := 0; lo < n; lo += 1000 {
		var vals []string
		for i := lo; i < min(lo+1000, n); i++ {
			vals = append(vals, fmt.Sprintf("(%d, 'a', %d, 'row %d', %d.25, '2024-02-29 12:00:00.%06d')", i, i, i, i, i))
		}
		p.sql("INSERT INTO " + table + " VALUES " + strings.Join(vals, ", "))
	}
}

// TestMySQLReadOnlyLoad: with read_only: true nothing is written to the
// source (no watermark table exists); the load under writes and kills
// still ends in an equal mirror.
func TestMySQLReadOnlyLoad(t *testing.T) {
	t.Parallel()
	const n = 6000
	p := newMyPipeline(t, []string{"CREATE TABLE orders " + myOrdersDDL}, []string{"orders"},
		"    read_only: true\n    incremental: {chunk_rows: 200, max_rows_per_second: 2000}\n")
	p.myRows("orders", n)
	stopW := p.myHammer("orders", n, 21)
	p.start()
	for i := 0; i < 2; i++ {
		time.Sleep(time.Duration(700+rand.IntN(800)) * time.Millisecond)
		p.kill()
		p.start()
	}
	p.waitLoaded(p.name + ".orders")
	stopW()
	p.waitMirror("orders")
	var n2 int
	if err := p.db.QueryRow("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'cdcd_watermark'",
		p.name).Scan(&n2); err != nil || n2 != 0 {
		t.Errorf("a watermark table exists in read-only mode (%d, %v)", n2, err)
	}
}

// TestMySQLLoadUnderWritesAndKills: a new MariaDB pipeline loads its table
// by chunks, lock-free, while a writer hammers exactly the keys being
// chunked and the daemon is killed with SIGKILL mid-load several times;
// then a table added to the config is loaded while the first streams, and
// `cdcd snapshot --replace` re-reads the first under writes. Every mirror
// equals its source by iceberg-go's scan: nothing lost, nothing twice, no
// deleted row back.
func TestMySQLLoadUnderWritesAndKills(t *testing.T) {
	t.Parallel()
	const n = 12000
	p := newMyPipeline(t, []string{"CREATE TABLE orders " + myOrdersDDL, "CREATE TABLE later " + myOrdersDDL},
		[]string{"orders"}, "    incremental: {chunk_rows: 300, max_rows_per_second: 3000}\n")
	p.myRows("orders", n)
	p.myRows("later", 2000)
	orders := p.name + ".orders"
	stopW := p.myHammer("orders", n, 11)
	p.start()
	kills := 0
	for i := 0; i < 4; i++ {
		time.Sleep(time.Duration(800+rand.IntN(1200)) * time.Millisecond)
		st, err := p.child.Status()
		if err == nil && loadDone(st, orders) {
			break
		}
		p.kill()
		kills++
		p.start()
	}
	if kills < 3 {
		t.Errorf("only %d kills before the load finished: make it slower", kills)
	}
	p.waitLoaded(orders)
	stopW()
	p.waitMirror("orders")

	// A table added later is loaded while the first streams.
	p.stop()
	p.tables = append(p.tables, p.name+".later")
	p.writeMyConfig()
	stopW = p.myHammer("orders", n, 12)
	stopL := p.myHammer("later", 2000, 13)
	p.start()
	p.waitLoaded(p.name + ".later")
	stopW()
	stopL()
	p.waitMirror("orders", "later")

	// cdcd snapshot --replace re-reads a table under writes, with a kill.
	stopW = p.myHammer("orders", n, 14)
	if out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", orders); code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s %s", code, out, errOut)
	}
	time.Sleep(time.Second)
	p.kill()
	p.start()
	p.waitLoaded(orders)
	stopW()
	p.waitMirror("orders", "later")
	if !p.logContains("snapshot reset") {
		t.Error("no reset marker logged")
	}
	t.Logf("%d kills mid-load", kills)
}

// loadDone reports whether table's load is over in st.
func loadDone(st daemon.Status, table string) bool {
	for _, tb := range st.Tables {
		if tb.Source == table {
			return tb.Snapshot.Done && tb.Snapshot.Percent == 100
		}
	}
	return false
}
