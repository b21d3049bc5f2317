package crashsuite

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// mariaConfig is one configuration of the MariaDB crash suite.
type mariaConfig struct {
	name  string
	mode  string // upsert | append
	kills int    // the CI default (CDCD_CRASH_KILLS overrides it)
	// points are the failpoints a restart may arm (mariaPoints, or
	// CDCD_CRASH_POINTS).
	points []string
	// snapshots: the pipeline starts with acct alone; item is added to
	// its config after the first kill, and acct is re-snapshotted on
	// demand (cdcd snapshot --replace) after the third; the kill after
	// each lands mid-snapshot (mariadb_snap_test.go).
	snapshots bool
}

// envPoints (comma-separated failpoint names) replaces mariaPoints.
const envPoints = "CDCD_CRASH_POINTS"

var mariaConfigs = []mariaConfig{
	{name: "upsert", mode: "upsert", kills: 10},
	{name: "changelog", mode: "append", kills: 6},
	{name: "snapshots", mode: "upsert", kills: 6, snapshots: true},
}

// mariaPoints are the failpoints a restart may arm: the MySQL reader's
// (the batch durable in the log with the checkpoint behind it, the
// snapshots' progress saved ahead of the GTID set, the GTID set saved, a
// watermark written with its chunk not yet emitted), the sink's, and a
// truncate's copies cut short (a re-snapshot's reset marker).
var mariaPoints = []string{"source.mysql.after-emit", "source.mysql.before-checkpoint", "source.mysql.after-checkpoint",
	"source.mysql.after-watermark", "sink.after-data-file", "sink.before-catalog-commit", "sink.after-catalog-commit",
	truncateCutPoint}

// TestCrashMariaDB is the crash suite's MariaDB configurations: a seeded
// workload of transactions (inserts, updates, deletes, key changes, a
// composite key) on a MariaDB server of its own while the daemon loads the
// tables lock-free and streams, killed with SIGKILL at random moments and
// at armed failpoints of the reader and the sink, and restarted. Then every
// Iceberg table must equal its source by iceberg-go's scan, each key once
// (upsert), or, as a changelog, hold every record of the log exactly once
// and fold into the source (changelog); and every table's metadata must
// hold cdcd's invariants, its offsets ending at the log's end.
func TestCrashMariaDB(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
	}
	picked := pickedConfigs(t)
	var configs []mariaConfig
	for _, c := range mariaConfigs {
		if picked("mariadb-" + c.name) {
			configs = append(configs, c)
		}
	}
	if len(configs) == 0 {
		t.Logf("%s picks no MariaDB configuration (mariadb-upsert, mariadb-changelog, mariadb-snapshots)", envConfigs)
		return
	}
	t.Logf("seed %d (replay: %s=%d)", seed, envSeed, seed)
	bin, err := cdcdtest.Build(t.TempDir(), failpoint.BuildTag)
	if err != nil {
		t.Fatal(err)
	}
	points := mariaPoints
	if v := os.Getenv(envPoints); v != "" {
		points = strings.Split(v, ",")
	}
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	for _, c := range configs {
		c.points = points
		t.Run(c.name, func(t *testing.T) {
			least := 1
			if c.snapshots {
				least = 6 // item added after kill 2, acct replaced after kill 4, the kill after each meeting it
			}
			inRounds(t, "mariadb-"+c.name, seed, envInt(t, envKills, c.kills), least, func(t *testing.T, seed uint64, kills int) {
				runMariaDB(t, bin, srv, c, seed, kills)
			})
		})
	}
}

// runMariaDB runs one configuration on a database of its own.
func runMariaDB(t *testing.T, bin string, srv *mariadbserver.Server, mc mariaConfig, seed uint64, kills int) {
	rng := rand.New(rand.NewPCG(seed, 3))
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
	serverID := mariadbtest.ServerID(t)
	rate := 4000
	if mc.snapshots {
		rate = 1500 // slow enough that the kills meet the snapshots
	}
	writeCfg := func(tables ...string) {
		t.Helper()
		for i, tb := range tables {
			tables[i] = name + "." + tb
		}
		cfg := fmt.Sprintf(`pipeline: crashmy
data_dir: %q
source:
  mysql:
    dsn: "mysql://%s:%s@%s/%s"
    server_id: %d
    tables: [%s]
    incremental: {chunk_rows: 250, max_rows_per_second: %d}
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: %s
    commit_interval: 250ms
    compaction: {interval: 400ms, min_files: 3}
admin:
  listen: %q
shutdown:
  deadline: 20s
`, dir, mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), name, serverID, strings.Join(tables, ", "), rate, mc.mode, admin)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if mc.snapshots {
		writeCfg("acct")
	} else {
		writeCfg("acct", "item")
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
	armed := ""
	if rng.IntN(3) == 0 {
		// At one of the load's first reset markers, appended to some
		// partitions only.
		armed = fmt.Sprintf("%s@%d", truncateCutPoint, 1+rng.IntN(2))
	}
	child := cdcdtest.Start(t, bin, cfgPath, admin, logFile, failpoint.Env+"="+armed)
	var rc *reconciler
	if mc.mode == "upsert" {
		rc = startReconciler(bin, cfgPath)
	}
	random, byPoint, midSnapshot := 0, 0, 0
	for k := 0; k < kills; k++ {
		wait := time.Duration(400+rng.IntN(1200)) * time.Millisecond
		if armed != "" {
			wait += 3 * time.Second // time to reach the point
		}
		if mc.snapshots && (k == 2 || k == 4) && snapshotRunning(child) {
			wait, midSnapshot = 0, midSnapshot+1
		}
		if child.Wait(wait) {
			if !child.KilledBySIGKILL() || armed == "" {
				t.Fatalf("cdcd exited on its own (armed failpoint %q): %v", armed, child.ExitErr())
			}
			byPoint++
		} else {
			child.Kill()
			random++
		}
		fmt.Fprintf(logFile, "---- crash: kill -9 (%d, failpoint %q)\n", k+1, armed)
		armed = ""
		if rng.IntN(5) < 3 {
			armed = fmt.Sprintf("%s@%d", mc.points[rng.IntN(len(mc.points))], 1+rng.IntN(3))
		}
		if mc.snapshots && k == 1 {
			writeCfg("acct", "item")
			fmt.Fprintf(logFile, "---- crash: %s.item added to the config\n", name)
		}
		if mc.snapshots && k == 3 {
			armed = "" // the request needs a daemon that answers
		}
		child = cdcdtest.Start(t, bin, cfgPath, admin, logFile, failpoint.Env+"="+armed)
		if mc.snapshots && k == 3 {
			requestMyReplace(t, bin, cfgPath, child, name+".acct")
			fmt.Fprintf(logFile, "---- crash: replacing snapshot of %s.acct requested\n", name)
		}
	}
	close(stop)
	wg.Wait()
	if armed != "" { // the last start may still die at its point
		child.Kill()
		fmt.Fprintf(logFile, "---- crash: final restart\n")
		child = cdcdtest.Start(t, bin, cfgPath, admin, logFile)
	}
	child.WaitUntil(t, "the loads done", 5*time.Minute, func() bool {
		st, err := child.Status()
		return err == nil && loadsDone(st) && snapshotsSettled(t, st)
	})
	// A last change of each table to wait for: every earlier one is in the
	// log before it, and so in Iceberg once it is.
	exec("INSERT INTO acct VALUES (-1, 0.00, 'last')", "INSERT INTO item VALUES ('zz', -1, 0, NULL)")
	if mc.mode == "upsert" {
		deadline := time.Now().Add(3 * time.Minute)
		for _, tb := range []string{"acct", "item"} {
			for d := mariadbDiff(t, dir, db, name, tb); !d.Equal(); d = mariadbDiff(t, dir, db, name, tb) {
				if time.Now().After(deadline) || child.Exited() {
					t.Fatalf("the mirror of %s never equalled it (daemon exited: %v): %s", tb, child.Exited(), d)
				}
				time.Sleep(time.Second)
			}
		}
	} else {
		child.WaitUntil(t, "caught up", 3*time.Minute, func() bool {
			time.Sleep(time.Second) // each look scans both tables
			st, err := child.Status()
			return err == nil && st.CaughtUp(0) && changelogHolds(t, dir, name, "acct", "-1") && changelogHolds(t, dir, name, "item", "-1")
		})
	}
	if rc != nil { // it ran on while the daemon caught up after the kills
		rc.finish(t)
		requireReconcileEqual(t, bin, cfgPath)
	}
	if err := child.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !child.Wait(30*time.Second) || child.ExitCode() != 0 {
		t.Fatalf("cdcd did not stop cleanly within 30s of SIGTERM: %v", child.ExitErr())
	}
	summary := checkMariaDBTables(t, dir, db, name, mc.mode)
	b, _ := os.ReadFile(logFile.Name())
	fired := strings.Count(string(b), "failpoint: killing the process at")
	if fired < byPoint || fired > random+byPoint+1 {
		t.Errorf("%d deaths at failpoints and %d SIGKILLs by the test, but the log shows %d failpoints firing", byPoint, random, fired)
	}
	cuts := strings.Count(string(b), "killing the process at "+truncateCutPoint)
	t.Logf("%s seed %d: %d kills (%d SIGKILLs by the test, %d failpoints fired, %d of them a truncate's copies cut short)", mc.name, seed, random+byPoint, random, fired, cuts)
	for _, l := range summary {
		t.Log(l)
	}
	t.Logf("what the daemon went through: %s", logEvents(string(b)))
	if mc.snapshots {
		checkMySnapshots(t, string(b), name, midSnapshot)
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
