package crashsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// The knobs of a run (see the package doc).
const (
	envSeed    = "CDCD_CRASH_SEED"    // the workload's and the kill schedule's seed; random when unset
	envKills   = "CDCD_CRASH_KILLS"   // kills per configuration, over all rounds
	envRound   = "CDCD_CRASH_ROUND"   // kills per round: a fresh database, daemon and check each round
	envConfigs = "CDCD_CRASH_CONFIGS" // comma-separated configuration names; all when unset
	envBigTx   = "CDCD_CRASH_BIG_TX"  // rows of a large transaction
	// envRekeyToast=1: key changes leave a TOASTed column unchanged (see
	// workloadConfig.RekeyUnchangedToast).
	envRekeyToast = "CDCD_CRASH_REKEY_UNCHANGED_TOAST"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// suite is one configuration of the daemon under test.
type suite struct {
	name    string
	mode    string // upsert | append
	version int
	kills   int // the CI default
	points  []string
	// snapshots runs the incremental-snapshot phase (snapshots_test.go):
	// a table added to the running pipeline, another re-snapshotted on
	// demand, both under the workload and the kills.
	snapshots bool
}

// truncateCutPoint appends a truncate's copies to some partitions only and
// kills (daemon/truncatecut.go).
const truncateCutPoint = "daemon.truncate-cut"

var upsertPoints = []string{"after-data-file", "after-puffin-file", "before-catalog-commit", "after-catalog-commit", "after-compaction-commit"}

var suites = []suite{
	{name: "upsert-v3", mode: "upsert", version: 3, kills: 20, points: upsertPoints},
	{name: "upsert-v2", mode: "upsert", version: 2, kills: 6, points: upsertPoints},
	{name: "changelog", mode: "append", version: 3, kills: 6, points: []string{"before-catalog-commit", "after-catalog-commit"}},
	{name: "snapshots", mode: "upsert", version: 3, kills: 6, points: upsertPoints, snapshots: true},
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, v)
	}
	return n
}

// TestCrash runs each configuration: a seeded workload on real PostgreSQL
// while the daemon (the cdcd binary) is killed with SIGKILL at random
// moments and at armed failpoints and restarted; then every Iceberg table
// must equal its source table, the tables' metadata must hold cdcd's
// invariants, and the slot must never have confirmed what the log did not
// hold.
func TestCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(envSeed); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", envSeed, v, err)
		}
	}
	t.Logf("seed %d (replay: %s=%d)", seed, envSeed, seed)
	picked := pickedConfigs(t)
	if !slices.ContainsFunc(suites, func(s suite) bool { return picked(s.name) }) {
		t.Logf("%s picks no PostgreSQL configuration", envConfigs)
		return
	}
	binDir, err := os.MkdirTemp("", "cdcd-crash-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(binDir) })
	bin, err := cdcdtest.Build(binDir, failpoint.BuildTag)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range suites {
		if !picked(s.name) {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			inRounds(t, s.name, seed, envInt(t, envKills, s.kills), 1, func(t *testing.T, seed uint64, kills int) {
				runRound(t, bin, s, seed, kills)
			})
		})
	}
}

// pickedConfigs says whether CDCD_CRASH_CONFIGS picks a configuration
// (every one when it is unset); a name no configuration has fails t.
func pickedConfigs(t *testing.T) func(name string) bool {
	var known []string
	for _, s := range suites {
		known = append(known, s.name)
	}
	for _, c := range mariaConfigs {
		known = append(known, "mariadb-"+c.name)
	}
	pick := map[string]bool{}
	for _, n := range strings.Split(os.Getenv(envConfigs), ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(known, n) {
			t.Fatalf("%s names %q: the configurations are %s", envConfigs, n, strings.Join(known, ", "))
		}
		pick[n] = true
	}
	return func(name string) bool { return len(pick) == 0 || pick[name] }
}

// minRound is the fewest kills a round runs when there are more: the
// snapshots configuration starts its snapshots after the second kill and
// wants a kill to meet one (80 kills in rounds of 6 left a last round of 2,
// which failed that check, session 26).
const minRound = 3

// inRounds runs kills kills of configuration name in rounds of
// CDCD_CRASH_ROUND (default 50, at least least: a configuration whose plan
// needs that many kills), each a subtest with a seed of its own, until one
// fails. A remainder under minRound kills goes into the round before it.
func inRounds(t *testing.T, name string, seed uint64, kills, least int, round func(t *testing.T, seed uint64, kills int)) {
	size := max(envInt(t, envRound, 50), least)
	for r := 0; kills > 0; r++ {
		n := min(kills, size)
		if rest := kills - n; rest > 0 && rest < minRound {
			n = kills // a short last round would check too little: this one takes it
		}
		kills -= n
		rs := seed + uint64(r)*1_000_003
		t.Run(fmt.Sprintf("round%d", r), func(t *testing.T) {
			t.Logf("seed %d: %s=%d %s=%s %s=%d", rs, envSeed, rs, envConfigs, name, envKills, n)
			round(t, rs, n)
		})
		if t.Failed() {
			return
		}
	}
}

// writeConfig writes the daemon's config capturing captured (names in
// tables) and returns its path.
func writeConfig(t *testing.T, s suite, dir, dsn, slot, admin string, captured []string) string {
	qualified := make([]string, len(captured))
	for i, n := range captured {
		qualified[i] = "public." + n
	}
	cfg := fmt.Sprintf(`pipeline: crash
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [%s]
    snapshot: initial
    heartbeat_interval: 300ms
%slog:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: %s
    format_version: %d
    commit_interval: 250ms
    compaction: {interval: 400ms, min_files: 3, retain_snapshots: 30, snapshot_max_age: 10s}
admin:
  listen: %q
shutdown:
  deadline: 20s
`, dir, dsn+"&logical_decoding_work_mem=64kB", slot, slot, strings.Join(qualified, ", "), incrementalConfig(s), s.mode, s.version, admin)
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitSlotCreated waits (up to three minutes) until replication slot slot
// exists or the daemon c has exited (at an armed failpoint).
func waitSlotCreated(t *testing.T, conn *pgx.Conn, slot string, c *cdcdtest.Child) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline) && !c.Exited(); time.Sleep(100 * time.Millisecond) {
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	if !c.Exited() {
		t.Fatalf("the daemon did not create slot %s within three minutes", slot)
	}
}

// runRound is one round: fresh database and data directory, kills kills,
// then the checks.
func runRound(t *testing.T, bin string, s suite, seed uint64, kills int) {
	began := time.Now()
	ctx := t.Context()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	conn, longConn, checkConn := connect(), connect(), connect()
	if _, err := conn.Exec(ctx, schemaDDL); err != nil {
		t.Fatal(err)
	}
	w := newWorkload(workloadConfig{Seed: seed, BigTx: envInt(t, envBigTx, 6000), Preload: 3000,
		RekeyUnchangedToast: envInt(t, envRekeyToast, 0) == 1}, conn, longConn)
	if err := w.preload(ctx); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	admin := cdcdtest.FreeAddr(t)
	cfgPath := writeConfig(t, s, dir, dsn, names.Slot, admin, capturedAtStart(s))
	phase := newSnapshotPhase(s, bin, cfgPath, kills)
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			if len(b) > 200_000 {
				b = b[len(b)-200_000:]
			}
			t.Logf("daemon log (tail):\n%s", b)
			keepFailedRound(t, dir)
		}
	}()
	lc := startLiveCheck(checkConn, names.Slot, dir)
	defer func() {
		select {
		case <-lc.stop:
		default:
			lc.finish()
		}
	}()

	// The workload runs from here to the end of the kills.
	var (
		stopWork = make(chan struct{})
		workErr  = make(chan error, 1)
		mu       sync.Mutex // guards w while the workload runs
	)
	go func() {
		for {
			select {
			case <-stopWork:
				workErr <- nil
				return
			default:
			}
			mu.Lock()
			pause, err := w.step(context.Background())
			mu.Unlock()
			if err != nil {
				workErr <- fmt.Errorf("workload step %d: %w", w.steps, err)
				return
			}
			time.Sleep(pause)
		}
	}()

	rng := rand.New(rand.NewPCG(seed, seed+1))
	armed := ""
	switch r := rng.IntN(3); {
	case phase.on: // the first start must stream
	case r == 0:
		armed = "source.after-slot-created"
	case r == 1:
		// At one of the load's reset markers (one a table), appended to
		// some partitions only.
		armed = fmt.Sprintf("%s@%d", truncateCutPoint, 1+rng.IntN(len(tables)))
	}
	c := cdcdtest.Start(t, bin, cfgPath, admin, logFile, failpoint.Env+"="+armed)
	phase.begin(t, c)
	var rc *reconciler
	if s.mode == "upsert" {
		rc = startReconciler(bin, cfgPath)
	}
	// The first kill waits for the slot: creating it waits for the
	// workload's long transactions to end, and on a loaded machine every
	// kill of a run came before that once, so none met the sink.
	waitSlotCreated(t, connect(), names.Slot, c)
	random, byPoint := 0, 0
	for i := 0; i < kills; i++ {
		wait := time.Duration(300+rng.IntN(2200)) * time.Millisecond
		if armed != "" {
			wait += 3 * time.Second // give the point time to be reached
		}
		if phase.waitSnapshot(t, i, c) {
			wait = 0 // killed mid-snapshot
		}
		if c.Wait(wait) {
			if !c.KilledBySIGKILL() || armed == "" {
				t.Fatalf("cdcd exited on its own (armed failpoint %q): %v; exit code %d", armed, c.ExitErr(), c.ExitCode())
			}
			byPoint++
		} else {
			c.Kill()
			random++
		}
		fmt.Fprintf(logFile, "---- crash suite: kill %d/%d (failpoint %q)\n", i+1, kills, armed)
		if phase.addNow(i) {
			writeConfig(t, s, dir, dsn, names.Slot, admin, tables)
			fmt.Fprintf(logFile, "---- crash suite: %s added to the config\n", phase.added)
		}
		select {
		case err := <-workErr:
			t.Fatal(err)
		default:
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond) // down for a while, the workload going on
		armed = ""
		if rng.IntN(5) < 3 {
			p := s.points[rng.IntN(len(s.points))]
			if rng.IntN(2) == 0 {
				p = tables[rng.IntN(len(tables))] + "." + p
			}
			armed = fmt.Sprintf("sink.%s@%d", p, 1+rng.IntN(3))
		} else if rng.IntN(4) == 0 {
			armed = truncateCutPoint // a TRUNCATE, a re-snapshot's reset marker
		}
		if phase.quietStart(i) {
			armed = "" // the request needs a daemon that answers; the next kill waits for the snapshot
		}
		c = cdcdtest.Start(t, bin, cfgPath, admin, logFile, failpoint.Env+"="+armed)
		if phase.replaceNow(i) {
			// Logged first: the snapshot may start before the request returns.
			fmt.Fprintf(logFile, "%s%s\n", replaceMarker, phase.replaced)
			phase.requestReplace(t, c)
		}
	}
	close(stopWork)
	if err := <-workErr; err != nil {
		t.Fatal(err)
	}
	if rc != nil {
		rc.finish(t)
	}
	workDone := time.Now()
	if err := w.endLong(ctx, true); err != nil {
		t.Fatal(err)
	}
	if armed != "" {
		// The last start may still die at its point: replace it by a
		// daemon with nothing armed.
		c.Kill()
		if !c.KilledBySIGKILL() {
			t.Fatalf("cdcd exited on its own: %v", c.ExitErr())
		}
		fmt.Fprintf(logFile, "---- crash suite: final restart\n")
		c = cdcdtest.Start(t, bin, cfgPath, admin, logFile)
	}
	lsn, err := w.mark(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.WaitUntil(t, "caught up", 5*time.Minute, func() bool {
		st, err := c.Status()
		if err != nil {
			return false
		}
		for _, tb := range st.Tables {
			if tb.Paused { // nothing in this workload should pause a table
				t.Fatalf("table %s paused: %s", tb.Table, tb.PausedReason)
			}
		}
		return st.CaughtUp(lsn) && phase.settled(t, st)
	})
	caughtUp := time.Now()
	if rc != nil {
		requireReconcileEqual(t, bin, cfgPath)
	}
	// Idle, the source sends heartbeats, which confirm the slot past the
	// last change: the live check must see that (and accept it) at least
	// once, or it never met the case it accounts for.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		lc.mu.Lock()
		n := len(lc.ahead)
		lc.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("idle for 10s after catching up, the slot never confirmed past the log's newest change: no heartbeat?")
			break
		}
	}
	if err := c.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !c.Wait(30 * time.Second) {
		t.Fatal("cdcd did not stop within 30s of SIGTERM")
	}
	if c.ExitCode() != 0 {
		t.Fatalf("cdcd exit after SIGTERM: %v", c.ExitErr())
	}
	lc.finish()

	// (c) The live invariant, against the final log.
	logs, err := readLog(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range lc.violations(logs) {
		if i < 10 {
			t.Errorf("live check: %s", v)
		}
	}
	if want := lc.wantChecks(); lc.checks < want {
		t.Errorf("only %d live checks (%d misses, last error %v), want at least %d", lc.checks, lc.misses, lc.lastError, want)
	}

	// (a) and (b): every table.
	cat, err := sinkice.OpenCatalog(ctx, sinkice.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Name: "cdcd", Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	summary := []string{}
	for _, name := range tables {
		want, cols, err := sourceRows(ctx, conn, name)
		if err != nil {
			t.Fatal(err)
		}
		tl := logs[name]
		if tl == nil {
			t.Fatalf("no topic for %s in the log", name)
		}
		tbl, err := cat.LoadTable(ctx, table.Identifier{"mirror", name})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := scanTable(ctx, tbl)
		if err != nil {
			t.Fatalf("scan %s: %v", name, err)
		}
		var got rowset
		if s.mode == "upsert" {
			if got, err = upsertRows(sc); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
		} else {
			var seen map[[2]int64]int
			var truncs []int64
			var fromOld int
			if got, seen, truncs, fromOld, err = foldChangelog(sc); err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			checkCoverage(t, name, tl, seen, truncs)
			if fromOld > 0 {
				t.Logf("%s: %d unchanged values of key changes taken from the old key's row", name, fromOld)
			}
		}
		compareRows(t, name, cols, want, got)
		snaps := checkInvariants(t, ctx, tbl, "crash", tl.end)
		var records int64
		for _, e := range tl.end {
			records += e
		}
		line := fmt.Sprintf("%s: %d rows, %d log records, %d snapshots with offsets", name, len(want), records, snaps)
		if s.mode == "upsert" {
			// (d) The key index, after the kills and a clean stop: every
			// live row's key points at that row's file and position.
			chk, err := sinkice.VerifyIndex(ctx, tbl, filepath.Join(dir, "index"))
			if err != nil {
				t.Fatalf("%s: verify the key index: %v", name, err)
			}
			for _, p := range chk.Problems {
				t.Errorf("%s: key index: %s", name, p)
			}
			if chk.LiveRows != int64(len(want)) {
				t.Errorf("%s: the index check read %d live rows, the source has %d", name, chk.LiveRows, len(want))
			}
			line += fmt.Sprintf(", %d index keys each found at its row", chk.IndexKeys)
		}
		summary = append(summary, line)
	}
	// A failpoint may fire just as the test kills, or after the last
	// kill: the log counts them.
	b, _ := os.ReadFile(logFile.Name())
	fired := strings.Count(string(b), "failpoint: killing the process at")
	if fired < byPoint || fired > random+byPoint+1 {
		t.Errorf("%d deaths at failpoints and %d SIGKILLs by the test, but the log shows %d failpoints firing", byPoint, random, fired)
	}
	// The compactor ran under the kills (upsert configs): its commits, and
	// deaths right after one, are in the log.
	compactions := strings.Count(string(b), "msg=compacted ") + strings.Count(string(b), `"msg":"compacted"`)
	atCompaction := strings.Count(string(b), "after-compaction-commit\n") + strings.Count(string(b), `after-compaction-commit"`)
	if slices.Contains(s.points, "after-compaction-commit") && kills >= 10 && compactions+atCompaction == 0 {
		t.Errorf("no compaction committed during the run: the kills never met the compactor")
	}
	summary = append(summary, fmt.Sprintf("%d compactions committed, %d deaths at after-compaction-commit", compactions, atCompaction))
	var ops []string
	for op, n := range w.ops {
		ops = append(ops, fmt.Sprintf("%s=%d", op, n))
	}
	sort.Strings(ops)
	cuts := strings.Count(string(b), "killing the process at "+truncateCutPoint)
	t.Logf("%s seed %d: %d kills (%d SIGKILLs by the test, %d failpoints fired, %d of them a truncate's copies cut short) in %s; workload %d steps [%s]; caught up %s after the workload, checked %s later",
		s.name, seed, random+byPoint, random, fired, cuts, workDone.Sub(began).Round(time.Millisecond), w.steps, strings.Join(ops, " "),
		caughtUp.Sub(workDone).Round(time.Millisecond), time.Since(caughtUp).Round(time.Millisecond))
	t.Logf("live check: %d samples (%d unreadable), %d with the slot past the log's newest change (heartbeats; at most %d bytes), none confirming an undurable transaction",
		lc.checks, lc.misses, len(lc.ahead), lc.maxAhead)
	for _, l := range summary {
		t.Log(l)
	}
	t.Logf("what the daemon went through: %s", logEvents(string(b)))
	phase.check(t, string(b))
	// Nothing in this workload should pause a table, even for a while
	// (a table that failed and was retried 30 s later): say why.
	shown := 0
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, "table paused") && shown < 5 {
			t.Errorf("a table paused during the run: %s", strings.TrimSpace(line))
			shown++
		}
	}
}

var logMsg = regexp.MustCompile(`level=(WARN|ERROR) msg=("[^"]*"|\S+)|msg=("replayed a transaction streamed before its commit"|compacted|"resuming the initial load")`)

// logEvents counts the daemon's warnings and errors, and a few events
// worth knowing a run met, by message.
func logEvents(log string) string {
	n := map[string]int{}
	for _, m := range logMsg.FindAllStringSubmatch(log, -1) {
		msg := m[2] + m[3]
		if m[1] != "" {
			msg = m[1] + " " + msg
		}
		n[msg]++
	}
	var out []string
	for msg, c := range n {
		out = append(out, fmt.Sprintf("%d× %s", c, msg))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// checkCoverage checks a changelog table against its topic: every record
// is a row exactly once, except a truncate's copies in partitions other
// than 0, and every row comes from a record.
func checkCoverage(t *testing.T, name string, tl *topicLog, seen map[[2]int64]int, truncs []int64) {
	t.Helper()
	isTrunc := map[int64]bool{}
	for _, l := range truncs {
		isTrunc[l] = true
	}
	bad := 0
	for p, end := range tl.end {
		for off := int64(0); off < end; off++ {
			n := seen[[2]int64{int64(p), off}]
			switch {
			case n == 1:
			case n == 0 && p > 0 && isTrunc[int64(tl.lsns[p][off])]:
			case n == 0 && tl.tomb[p][off]: // a delete's tombstone: no row
			default:
				if bad++; bad <= 5 {
					t.Errorf("%s: log record %d/%d (LSN %s) is in the changelog %d times", name, p, off, fmtLSN(tl.lsns[p][off]), n)
				}
			}
			delete(seen, [2]int64{int64(p), off})
		}
	}
	for k, n := range seen {
		if bad++; bad <= 5 {
			t.Errorf("%s: changelog has %d rows for %d/%d, past the log's end", name, n, k[0], k[1])
		}
	}
}
