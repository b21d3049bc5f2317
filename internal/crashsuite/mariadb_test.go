package crashsuite

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/internal/mirror"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestCrashMariaDB is the crash suite's MariaDB configuration: a seeded
// workload of transactions (inserts, updates, deletes, key changes, a
// composite key) on a MariaDB server of its own while the daemon loads the
// tables lock-free and streams, killed with SIGKILL at random moments
// (CDCD_CRASH_KILLS, default 10) and restarted; then every Iceberg table
// must equal its source by iceberg-go's scan, each key once.
func TestCrashMariaDB(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	kills := envInt(t, envKills, 10)
	rng := rand.New(rand.NewPCG(seed, 3))
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	db, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec("CREATE TABLE acct (id INT PRIMARY KEY, bal DECIMAL(14,2) NOT NULL, note VARCHAR(40))",
		"CREATE TABLE item (shop VARCHAR(8) NOT NULL, id BIGINT NOT NULL, qty INT, at DATETIME(6), PRIMARY KEY (shop, id))")
	for lo := 0; lo < 4000; lo += 500 {
		var a, it []string
		for i := lo; i < lo+500; i++ {
			a = append(a, fmt.Sprintf("(%d, %d.00, 'seed')", i, i))
			it = append(it, fmt.Sprintf("('s%d', %d, %d, '2025-01-01 00:00:00.%06d')", i%3, i, i, i))
		}
		exec("INSERT INTO acct VALUES "+strings.Join(a, ", "), "INSERT INTO item VALUES "+strings.Join(it, ", "))
	}
	exec("CREATE TABLE cdcd_watermark (id VARCHAR(64) NOT NULL PRIMARY KEY, mark VARCHAR(255) NOT NULL, "+
		"written TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON `%s`.`cdcd_watermark` TO '%s'@'%%'", name, mariadbserver.ReplUser))

	dir := t.TempDir()
	admin := cdcdtest.FreeAddr(t)
	cfgPath := filepath.Join(dir, "cdcd.yaml")
	cfg := fmt.Sprintf(`pipeline: crashmy
data_dir: %q
source:
  mysql:
    dsn: "mysql://%s:%s@%s/%s"
    server_id: %d
    tables: [%s.acct, %s.item]
    incremental: {chunk_rows: 250, max_rows_per_second: 4000}
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    commit_interval: 250ms
    compaction: {interval: 400ms, min_files: 3}
admin:
  listen: %q
shutdown:
  deadline: 20s
`, dir, mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), name, mariadbtest.ServerID(t), name, name, admin)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	bin, err := cdcdtest.Build(binDir, failpoint.BuildTag)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "daemon.log"))
			if len(b) > 40_000 {
				b = b[len(b)-40_000:]
			}
			t.Logf("daemon log (tail):\n%s", b)
		}
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		mariadbWorkload(t, db, seed, stop)
	}()
	child := cdcdtest.Start(t, bin, cfgPath, admin, logFile)
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(400+rng.IntN(1200)) * time.Millisecond)
		fmt.Fprintf(logFile, "---- crash: kill -9 (%d)\n", k+1)
		child.Kill()
		child = cdcdtest.Start(t, bin, cfgPath, admin, logFile)
	}
	close(stop)
	wg.Wait()
	child.WaitUntil(t, "the loads done", 5*time.Minute, func() bool {
		st, err := child.Status()
		return err == nil && loadsDone(st)
	})
	deadline := time.Now().Add(3 * time.Minute)
	for _, tb := range []string{"acct", "item"} {
		for d := mariadbDiff(t, dir, db, name, tb); !d.Equal(); d = mariadbDiff(t, dir, db, name, tb) {
			if time.Now().After(deadline) || child.Exited() {
				t.Fatalf("the mirror of %s never equalled it (daemon exited: %v): %s", tb, child.Exited(), d)
			}
			time.Sleep(time.Second)
		}
	}
}

// loadsDone reports whether every table's load is over.
func loadsDone(st daemon.Status) bool {
	for _, tb := range st.Tables {
		if !tb.Snapshot.Done {
			return false
		}
	}
	return len(st.Tables) > 0
}

// mariadbDiff compares a table with its mirror.
func mariadbDiff(t *testing.T, dir string, db *sql.DB, name, tb string) *mirror.Diff {
	ctx := t.Context()
	cat, err := sinkice.OpenCatalog(ctx, sinkice.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Name: "cdcd", Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	tbl, err := cat.LoadTable(ctx, table.Identifier{"mirror", name + "_" + tb})
	if err != nil {
		return &mirror.Diff{Table: tb, Missing: []string{"the Iceberg table: " + err.Error()}}
	}
	d, err := mirror.CompareMySQL(ctx, db, name, tb, tbl)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mariadbWorkload commits seeded transactions until stop.
func mariadbWorkload(t *testing.T, db *sql.DB, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 4))
	next := 100_000
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		tx, err := db.Begin()
		if err != nil {
			t.Errorf("begin: %v", err)
			return
		}
		for j := 0; j < 1+rng.IntN(5); j++ {
			k := rng.IntN(4400)
			var q string
			switch rng.IntN(8) {
			case 0, 1:
				q = fmt.Sprintf("UPDATE acct SET bal = bal + 1.25, note = 'u%d' WHERE id = %d", i, k)
			case 2:
				q = fmt.Sprintf("DELETE FROM acct WHERE id = %d", k)
			case 3:
				q = fmt.Sprintf("INSERT INTO acct VALUES (%d, 1.00, 'i%d') ON DUPLICATE KEY UPDATE bal = bal - 1", k, i)
			case 4:
				next++
				q = fmt.Sprintf("UPDATE acct SET id = %d WHERE id = %d", next, k) // a key change
			case 5:
				q = fmt.Sprintf("UPDATE item SET qty = qty + 1, at = NOW(6) WHERE shop = 's%d' AND id = %d", k%3, k)
			case 6:
				q = fmt.Sprintf("DELETE FROM item WHERE shop = 's%d' AND id BETWEEN %d AND %d", k%3, k, k+5)
			case 7:
				next++
				q = fmt.Sprintf("INSERT INTO item VALUES ('s%d', %d, 1, NULL)", rng.IntN(3), next)
			}
			if _, err := tx.Exec(q); err != nil {
				tx.Rollback()
				if strings.Contains(err.Error(), "Duplicate") || strings.Contains(err.Error(), "Deadlock") {
					break
				}
				t.Errorf("%s: %v", q, err)
				return
			}
		}
		if err := tx.Commit(); err != nil && !strings.Contains(err.Error(), "already been committed") {
			t.Errorf("commit: %v", err)
			return
		}
	}
}
