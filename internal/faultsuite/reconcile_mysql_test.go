package faultsuite

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/reconcile"
)

// The reconcile on a MariaDB source (issue 21): the same proofs as on
// PostgreSQL, with the source changed behind the pipeline's back through
// SET sql_log_bin = 0 (the change never reaches the binlog).

// myTypesDDL has a column of each type docs/types.md's MySQL table maps,
// with their edge values: unsigned bigint above 2^63, exact decimals,
// DATETIME and TIMESTAMP with microseconds, TIME beyond 24 h and
// negative, BIT, ENUM and SET, JSON, BINARY padding, zero dates, FLOAT
// and DOUBLE at −0, their largest, the smallest normal FLOAT, 0.1 and a
// subnormal.
var myTypesDDL = []string{
	`CREATE TABLE typed (id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, i INT UNSIGNED, bi BIGINT,
	  ub BIGINT UNSIGNED, d DECIMAL(12,3), du DECIMAL(5,2) UNSIGNED, dl DECIMAL(50,10), b1 BIT(1), b12 BIT(12), y YEAR,
	  dt DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(6), ch CHAR(5), vc VARCHAR(20), tx TEXT, l1 VARCHAR(10) CHARACTER SET latin1,
	  bn BINARY(4), vb VARBINARY(8), bl BLOB, e ENUM('sad','ok'), st SET('x','y','z'), js JSON, fl FLOAT, fl2 FLOAT, db DOUBLE)`,
	`SET SESSION sql_mode = ''`,
	`INSERT INTO typed VALUES
	 (18446744073709551615, -128, 65535, -8388608, 4294967295, -9223372036854775808, 9223372036854775808, -0.5, 999.99,
	  '-12345678901234567890123456789.0123456789', b'1', b'101010101010', 2024, '2024-02-29', '1999-12-31 23:59:59.999999',
	  '2038-01-19 03:14:07.123', '838:59:59.000000', 'ab', 'héllo, "x"', 'N', 'café', X'01', X'00ff', X'', 'ok', 'x,z', '{"a": 1,  "b":[1,2]}', 3.4028235e38, 1e38, 1.7976931348623157e308),
	 (1, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'0', b'0', 0, '0000-00-00', '0000-00-00 00:00:00', '1970-01-01 00:00:01', '-838:59:58.5', '', '', '', '',
	  X'', X'', X'', '', '', '[]', -0e0, 0.1, -0e0),
	 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2024-00-10', '0001-01-01 00:00:00', NULL, '00:00:00', NULL, NULL,
	  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	 (3, 1, 1, 1, 1, 1, 1, 1.5, 0.01, 1, b'1', b'1', 1999, '1969-12-31', '1969-12-31 23:59:59.5', NULL, '-00:00:01', 'a', 'a,b', 'x', 'x', X'ff', X'ff', X'ff', 'sad', '', 'null', 1.17549435e-38, 1e-45, 0.1)`,
	`CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(20))`,
	`INSERT INTO plain SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000`,
}

// TestReconcileMyEqualTypes: a MariaDB mirror of every type, equal to its
// source, is reported equal (exit 0), every row and column compared, while
// the daemon runs and after it stopped.
func TestReconcileMyEqualTypes(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, myTypesDDL, []string{"typed", "plain"}, "")
	p.start()
	p.waitLoaded(p.name + ".typed")
	p.waitLoaded(p.name + ".plain")
	p.waitMirror("plain")
	check := func(when string) {
		t.Helper()
		reps, code := p.reconcileReport()
		for name, rows := range map[string]int64{"typed": 4, "plain": 3000} {
			r := reps[p.name+"."+name]
			if r == nil || !r.Equal() || r.Rows != rows || r.Unchecked != 0 || len(r.Skipped) != 0 || r.Error != "" {
				t.Errorf("%s: %s: %+v, want equal with %d rows, every column compared", when, name, r, rows)
				if r != nil {
					t.Logf("differences: %v; skipped %v", r.Differences(), r.Skipped)
				}
			}
		}
		if code != 0 {
			t.Fatalf("%s: exit %d, want 0", when, code)
		}
	}
	check("daemon running")
	p.stop()
	check("daemon stopped")
}

// TestReconcileMyFloatStream: FLOAT and DOUBLE values that reach the
// mirror through the binlog (the load reads them through SQL, the stream
// as the float32 and float64 the row events carry) compare equal at their
// edges: −0 (MariaDB stores 0), 0.1, 1e38, the largest (3.4028235e38 is
// out of range in strict mode: FLT_MAX exactly) and the smallest
// normal of each width, subnormals, integers past 2^24 and 2^53. NaN and
// ±Infinity cannot be stored (MariaDB refuses them). A value damaged in
// Iceberg by one unit in the last place is found, with its key and
// column.
func TestReconcileMyFloatStream(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, []string{
		"CREATE TABLE fl (id INT PRIMARY KEY, f FLOAT, d DOUBLE)",
		"INSERT INTO fl VALUES (1, 1.5, 2.5), (2, 0.1, 0.1), (3, 7, 7)",
	}, []string{"fl"}, "")
	tb := p.name + ".fl"
	p.start()
	p.waitLoaded(tb)
	p.waitStreaming()
	p.sql(`INSERT INTO fl VALUES (10, -0e0, -0e0), (11, 0.1, 0.1), (12, 1e38, 1e38), (13, 3.4028234663852886e38, 1.7976931348623157e308),
	  (14, 1.17549435e-38, 2.2250738585072014e-308), (15, 1e-45, 5e-324), (16, 16777217, 123456789012345678), (17, NULL, NULL),
	  (18, -1.5, 0.30000000000000004), (19, -3.4028234663852886e38, -1e-300)`,
		"UPDATE fl SET f = 0.1, d = -0.1 WHERE id = 1",
		"UPDATE fl SET f = f * 3, d = d * 3 WHERE id = 2",
		"UPDATE fl SET f = -f, d = -d WHERE id = 10",
		"DELETE FROM fl WHERE id = 3")
	for _, q := range []string{"INSERT INTO fl VALUES (90, 'nan', 0)", "INSERT INTO fl VALUES (91, 0, 'inf')",
		"INSERT INTO fl VALUES (92, 0, 1e308 * 10)", "INSERT INTO fl VALUES (93, 1e39, 0)"} {
		if _, err := p.db.Exec(q); err == nil {
			t.Errorf("%s: MariaDB stored it (the test assumes NaN and infinities cannot be stored)", q)
		}
	}
	// No waitMirror (internal/mirror renders no floats): a reconcile
	// while the daemon runs waits for the mirror itself (rule 3).
	reps, code := p.reconcileReport()
	if r := reps[tb]; code != 0 || r == nil || !r.Equal() || r.Rows != 12 || r.Unchecked != 0 || r.Error != "" {
		t.Fatalf("floats through the binlog: exit %d, %+v; want equal, 12 rows", code, r)
	}

	p.stop()
	p.damageRewrite(tb, 11, "f", math.Nextafter32(float32(0.1), 1))
	p.damageRewrite(tb, 14, "d", math.Nextafter(2.2250738585072014e-308, 0))
	reps, code = p.reconcileReport()
	if code != 4 {
		t.Errorf("a float damaged by one ulp: exit %d, want 4", code)
	}
	requireFound(t, reps[tb], nil, nil, map[string][]string{"11": {"f"}, "14": {"d"}})
}

// TestReconcileMyRightAfterStart: a reconcile run while the daemon is up
// (its admin API answers) but its reader has not connected to the binlog
// yet, with changes made while the daemon was stopped, compares the
// table: it asks the daemon before calling the pipeline stopped, and
// waits for the reader to catch up. Before, a reconcile in that moment
// said "the pipeline is stopped" and could not compare the table (exit
// 1). The reader is held at its start by LOCK TABLES cdcd_watermark WRITE
// (it probes every table it uses with a SELECT, the watermark table too,
// which the reconcile never reads), released when the reconcile asks the
// daemon's /status, through
// a proxy the reconcile is pointed at (--admin): without the question,
// the reader stays held and the old code fails every time.
func TestReconcileMyRightAfterStart(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, myLedgerDDL, []string{"ledger"}, "")
	tb := p.name + ".ledger"
	p.start()
	p.waitLoaded(tb)
	p.stop()
	p.sql("UPDATE ledger SET owner = CONCAT(owner, '+') WHERE id BETWEEN 100 AND 150", "INSERT INTO ledger VALUES (10000, 'new', 1, NOW())")
	// The stopped daemon's dump thread lingers until the server sends it
	// an event (these writes) and finds the connection closed.
	p.waitNoDump()

	lock, err := p.db.Conn(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(p.ctx, "LOCK TABLES cdcd_watermark WRITE"); err != nil {
		t.Fatal(err)
	}
	var asked sync.Once
	daemonAdmin := &url.URL{Scheme: "http", Host: p.Admin}
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/status" {
			asked.Do(func() {
				if _, err := lock.ExecContext(p.ctx, "UNLOCK TABLES"); err != nil {
					t.Errorf("unlock tables: %v", err)
				}
			})
		}
		httputil.NewSingleHostReverseProxy(daemonAdmin).ServeHTTP(w, r)
	}))
	defer proxy.Close()

	p.start()
	// The reconcile must find the daemon's admin API answering (asked
	// directly, not through the proxy, so the reader stays held): a
	// reconcile before the daemon listens rightly calls the pipeline
	// stopped.
	p.child.WaitUntil(t, "the daemon's admin API answers", time.Minute, func() bool {
		_, err := p.child.Status()
		return err == nil
	})
	var dumps int
	if err := p.db.QueryRowContext(p.ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&dumps); err != nil {
		t.Fatal(err)
	}
	if dumps != 0 {
		t.Fatalf("the reader dumps the binlog while the watermark table is locked: the test holds nothing back")
	}
	reps, code := p.reconcileReport("--admin", strings.TrimPrefix(proxy.URL, "http://"))
	if r := reps[tb]; code != 0 || r == nil || !r.Equal() || r.Error != "" || r.Rows != 3001 || r.Unchecked != 0 {
		t.Fatalf("a reconcile while the reader connects: exit %d, %+v; want equal, 3001 rows", code, r)
	}
}

// waitNoDump waits until the server lists no binlog dump.
func (p *myPipeline) waitNoDump() {
	p.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		if err := p.db.QueryRowContext(p.ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			p.t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatal("the stopped daemon's binlog dump is still listed after 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// myLedgerDDL is the damaged tables' shape on MariaDB.
var myLedgerDDL = []string{
	`CREATE TABLE ledger (id INT PRIMARY KEY, owner VARCHAR(40), balance DECIMAL(12,2), at TIMESTAMP(6) NULL)`,
	`INSERT INTO ledger SELECT seq, CONCAT('o', seq), seq * 1.25, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq MINUTE FROM seq_1_to_3000`,
}

// myBypass runs statements at the source with the binlog off for them
// (SET sql_log_bin = 0): the pipeline never sees them.
func (p *myPipeline) myBypass(stmts ...string) {
	p.t.Helper()
	c, err := p.db.Conn(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer c.Close()
	for _, q := range append(append([]string{"SET SESSION sql_log_bin = 0"}, stmts...), "SET SESSION sql_log_bin = 1") {
		if _, err := c.ExecContext(p.ctx, q); err != nil {
			p.t.Fatalf("%s: %v", q, err)
		}
	}
}

// waitStreaming waits until the started daemon reads the binlog: its
// reader says so and the server lists its binlog dump. Until then a
// reconcile takes the pipeline for stopped (Covered: no dump thread) and,
// as the binlog past the checkpoint is not read, cannot compare the table
// (TestReconcileMyDamage once ran its --repair in that moment).
func (p *myPipeline) waitStreaming() {
	p.t.Helper()
	p.waitFor("the reader streaming", 2*time.Minute, func(st daemon.Status) bool { return st.Source.Streaming })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		if err := p.db.QueryRowContext(p.ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
			p.t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatal("the daemon streams, yet the server lists no binlog dump after 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReconcileMyDamage: on MariaDB, every kind of damage is found with
// its keys and columns, with the daemon stopped and running (a row
// deleted from the mirror through a deletion vector, a value changed in a
// rewritten data file, an insert and an update at the source the binlog
// never saw), and --repair makes the mirror equal again by a snapshot of
// exactly those keys; then an extra row in the mirror and a delete the
// binlog never saw, repaired by a replacing snapshot.
func TestReconcileMyDamage(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, myLedgerDDL, []string{"ledger"}, "")
	tb := p.name + ".ledger"
	p.start()
	p.waitLoaded(tb)
	p.waitMirror("ledger")
	p.stop()
	p.damageRewrite(tb, 700, "owner", "it's \\ tampered")
	p.damageDV(tb, 5, 2999)
	p.myBypass("UPDATE ledger SET balance = balance + 1 WHERE id = 1200", "INSERT INTO ledger VALUES (50000, 'unseen', 1, NOW())")
	if d := p.myDiff("ledger"); len(d.Missing) != 3 || len(d.Extra) != 0 || len(d.Differ) != 2 {
		t.Fatalf("the damage did not take (iceberg-go's scan): %s", d)
	}
	wantMissing, wantDiffer := []string{"5", "2999", "50000"}, map[string][]string{"700": {"owner"}, "1200": {"balance"}}
	reps, code := p.reconcileReport()
	if code != 4 {
		t.Errorf("daemon stopped: exit %d, want 4", code)
	}
	requireFound(t, reps[tb], wantMissing, nil, wantDiffer)

	p.start()
	p.waitStreaming()
	p.sql("UPDATE ledger SET owner = CONCAT(owner, '+') WHERE id BETWEEN 10 AND 20") // the pipeline flows
	reps, code = p.reconcileReport("--repair")
	requireFound(t, reps[tb], wantMissing, nil, wantDiffer)
	requireRepaired(t, reps[tb], code, 5, false)
	p.waitMirror("ledger")

	p.stop()
	p.damageAppend(tb, 100001, "ghost")
	p.myBypass("DELETE FROM ledger WHERE id = 1300")
	reps, _ = p.reconcileReport()
	requireFound(t, reps[tb], nil, []string{"1300", "100001"}, map[string][]string{})
	p.start()
	p.waitStreaming()
	reps, code = p.reconcileReport("--repair")
	requireRepaired(t, reps[tb], code, 2, true)
	p.waitMirror("ledger")
	reps, code = p.reconcileReport()
	if r := reps[tb]; code != 0 || r == nil || !r.Equal() || r.Rows != 3000 {
		t.Errorf("a reconcile after the repairs: exit %d, %+v; want equal, 3000 rows", code, r)
	}
}

// TestReconcileMyBench measures cdcd reconcile of a MariaDB table equal to
// its mirror, the daemon running and idle, against a plain SELECT * of the
// same table read to the end (MariaDB has no COPY), and the server's CPU
// per row of the reconcile's reads. CDCD_RECONCILE_BENCH_ROWS sets the
// size (default 20,000). No timing assertion.
func TestReconcileMyBench(t *testing.T) {
	rows := 20_000
	if n, err := strconv.Atoi(os.Getenv("CDCD_RECONCILE_BENCH_ROWS")); err == nil && n > 0 {
		rows = n
	}
	p := newMyPipeline(t, []string{
		"CREATE TABLE bench (id BIGINT PRIMARY KEY, a INT, b BIGINT, c VARCHAR(40), d DECIMAL(12,2), e TIMESTAMP(6) NULL, f TINYINT)",
		fmt.Sprintf("INSERT INTO bench SELECT seq, seq %% 1000, seq * 7, CONCAT('row ', seq), (seq %% 100000) / 100, "+
			"TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq %% 2 FROM seq_1_to_%d", rows),
	}, []string{"bench"}, "")
	p.start()
	p.waitLoaded(p.name + ".bench")
	p.waitMirror("bench")

	var selectRate float64
	for range 2 {
		t0 := time.Now()
		res, err := p.db.QueryContext(p.ctx, "SELECT * FROM bench")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for res.Next() {
			n++
		}
		res.Close()
		if r := float64(n) / time.Since(t0).Seconds(); r > selectRate {
			selectRate = r
		}
	}
	reps, code := p.reconcileReport(p.name + ".bench")
	r := reps[p.name+".bench"]
	if code != 0 || r == nil || !r.Equal() || r.Rows != int64(rows) || r.Unchecked != 0 {
		t.Fatalf("reconcile of an equal table: exit %d, %+v; want equal, %d rows", code, r, rows)
	}
	if r.RowsPerSecond <= 0 || r.SourceCPUMicrosPerRow <= 0 {
		t.Errorf("a figure is missing: reconcile %.0f rows/s, %.2f source CPU-µs/row", r.RowsPerSecond, r.SourceCPUMicrosPerRow)
	}
	t.Logf("MariaDB reconcile of %d rows: %.0f rows/s (%.2f source CPU-µs/row); SELECT * %.0f rows/s: ratio %.2f",
		rows, r.RowsPerSecond, r.SourceCPUMicrosPerRow, selectRate, r.RowsPerSecond/selectRate)
}

// TestReconcileMyUnderWorkload: on MariaDB, no false difference while a
// writer updates, deletes, inserts and changes keys (a composite key
// under a case-insensitive collation: compared by key, not by cdcd's
// order) with the daemon running, killed with SIGKILL (a run then cannot
// compare the table, as the binlog past the checkpoint is not read: it
// says so) and started again; in the end, with the writer stopped, every
// row is compared and none is unchecked.
func TestReconcileMyUnderWorkload(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, []string{"CREATE TABLE orders " + myOrdersDDL}, []string{"orders"},
		"reconcile: {chunk_rows: 2000, block_rows: 50}\n")
	tb := p.name + ".orders"
	p.myRows("orders", 3000)
	p.start()
	p.waitLoaded(tb)
	stop := p.myHammer("orders", 3000, 7)
	noDiff := func(when string) *reconcile.TableReport {
		t.Helper()
		reps, code := p.reconcileReport()
		r := reps[tb]
		if code == 4 || r == nil || len(r.Differences()) > 0 {
			t.Fatalf("%s: exit %d, a difference reported while the mirror follows the source: %v", when, code, r.Differences())
		}
		return r
	}
	compared := 0
	for i := range 2 {
		if r := noDiff(fmt.Sprintf("running, round %d", i)); r.Error == "" {
			compared++
		}
	}
	p.kill()
	noDiff("killed")
	p.start()
	if r := noDiff("started again"); r.Error == "" {
		compared++
	}
	stop()
	p.waitMirror("orders")
	r := noDiff("writer stopped")
	var rows int64
	if err := p.db.QueryRow("SELECT COUNT(*) FROM orders").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if r.Error != "" || r.Rows != rows || r.Unchecked != 0 {
		t.Errorf("after the writer stopped: %d rows compared (%d unchecked, error %q), the source has %d", r.Rows, r.Unchecked, r.Error, rows)
	}
	if compared == 0 {
		t.Errorf("no run compared the table while the writer wrote: the test proved nothing")
	}
}
