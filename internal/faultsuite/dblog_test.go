package faultsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Incremental snapshots (issue 17) end to end: the repair of a damaged
// mirror with `cdcd snapshot --replace`, kill -9 in the middle of a
// snapshot, a table added to a running pipeline, the signal table — each
// under writes on exactly the rows being read, each ending in a mirror
// equal to the source.

// accounts is a table whose big column is stored out of line, so an update
// that leaves it alone streams it as unchanged.
const accounts = `CREATE TABLE %[1]s (id int PRIMARY KEY, v text, big text);
	ALTER TABLE %[1]s ALTER COLUMN big SET STORAGE EXTERNAL;
	INSERT INTO %[1]s SELECT g, 'v' || g, repeat(chr(97 + g %% 26), 2100) FROM generate_series(1, %[2]d) g;`

// writer changes rows of table at random until stopped: inserts, updates
// that leave big unchanged, updates of big, deletes, key changes.
type writer struct {
	stop func() (int, error)
}

func startWriter(t *testing.T, dsn, table string, keys int, seed uint64) *writer {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var n int
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, werr = writeRandomly(ctx, dsn, table, keys, seed)
	}()
	w := &writer{stop: func() (int, error) { cancel(); wg.Wait(); return n, werr }}
	t.Cleanup(func() { _, _ = w.stop() })
	return w
}

func writeRandomly(ctx context.Context, dsn, table string, keys int, seed uint64) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	n := 0
	// Statements run to their end (ctx is checked between them): one pgx
	// abandons at ctx's end may still commit after the writer returned,
	// after the test read the table to compare (see source/postgres's
	// stoppedBetween).
	run := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		id, other := 1+rng.IntN(keys), 1+rng.IntN(keys)
		var q string
		var args []any
		switch op := rng.IntN(10); {
		case op < 2:
			q, args = "INSERT INTO "+table+" VALUES ($1, $2, repeat($3, 2100)) ON CONFLICT (id) DO NOTHING", []any{id, fmt.Sprint("i", n), string(rune('a' + rng.IntN(26)))}
		case op < 6:
			q, args = "UPDATE "+table+" SET v = $2 WHERE id = $1", []any{id, fmt.Sprint("u", n)}
		case op < 7:
			q, args = "UPDATE "+table+" SET big = repeat($2, 2200) WHERE id = $1", []any{id, string(rune('A' + rng.IntN(26)))}
		case op < 8:
			q, args = "DELETE FROM "+table+" WHERE id = $1", []any{id}
		default:
			q, args = "UPDATE "+table+" SET id = $2 WHERE id = $1 AND NOT EXISTS (SELECT 1 FROM "+table+" WHERE id = $2)", []any{id, other}
		}
		if _, err := conn.Exec(run, q, args...); err != nil {
			var pe *pgconn.PgError
			if asPgError(err, &pe) && (pe.Code == "23505" || pe.Code == "40P01") {
				continue
			}
			return n, fmt.Errorf("%s: %w", q, err)
		}
		n++
		time.Sleep(time.Duration(rng.IntN(2)) * time.Millisecond)
	}
	return n, nil
}

func asPgError(err error, pe **pgconn.PgError) bool {
	for e := err; e != nil; {
		if p, ok := e.(*pgconn.PgError); ok {
			*pe = p
			return true
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		e = u.Unwrap()
	}
	return false
}

// snapshotsDone waits until no incremental snapshot is queued or running
// and at least n have finished.
func (p *pipeline) snapshotsDone(n int, timeout time.Duration) []snapshot.Progress {
	p.t.Helper()
	st := p.waitFor(fmt.Sprintf("%d snapshots done", n), timeout, func(st daemon.Status) bool {
		done := 0
		for _, s := range st.Snapshots {
			if s.Finished.IsZero() {
				return false
			}
			if s.State == "failed" {
				p.t.Fatalf("snapshot of %s failed: %s", s.Table, s.Error)
			}
			done++
		}
		return done >= n
	})
	return st.Snapshots
}

// damage changes the Iceberg table behind cdcd's back (the daemon is
// stopped): rows with keys in drop disappear, extra rows appear.
func (p *pipeline) damage(sourceTable string, drop []int32, extra []int32) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl := p.icebergTable(cat, sourceTable)
	tx := tbl.NewTransaction()
	var in []iceberggo.BooleanExpression
	for _, k := range drop {
		in = append(in, iceberggo.EqualTo(iceberggo.Reference("id"), k))
	}
	if len(in) > 0 {
		if err := tx.Delete(p.ctx, iceberggo.NewOr(in[0], in[0], in[1:]...), nil); err != nil {
			p.t.Fatalf("damage: delete rows: %v", err)
		}
	}
	if len(extra) > 0 {
		sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
		if err != nil {
			p.t.Fatal(err)
		}
		b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
		defer b.Release()
		for _, k := range extra {
			for i, f := range sc.Fields() {
				switch f.Name {
				case "id":
					b.Field(i).(*array.Int32Builder).Append(k)
				default:
					b.Field(i).(*array.StringBuilder).Append("extra")
				}
			}
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		rdr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec})
		if err != nil {
			p.t.Fatal(err)
		}
		defer rdr.Release()
		if err := tx.Append(p.ctx, rdr, nil); err != nil {
			p.t.Fatalf("damage: append rows: %v", err)
		}
	}
	if _, err := tx.Commit(p.ctx); err != nil {
		p.t.Fatalf("damage: commit: %v", err)
	}
}

// TestSnapshotReplaceRepairsMirror: rows deleted from and added to the
// Iceberg table behind cdcd's back are repaired by `cdcd snapshot
// --replace` while writers change exactly the rows being read.
func TestSnapshotReplaceRepairsMirror(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(accounts, "acct", 3000), Tables: []string{"public.acct"},
		SourceExtra: "incremental: {chunk_rows: 250}"})
	p.start()
	p.waitCaughtUp()
	p.requireMirror()
	p.stop()
	p.damage("public.acct", []int32{5, 6, 700, 2999}, []int32{100001, 100002})
	if d := p.diff("public.acct"); len(d.Missing) != 4 || len(d.Extra) != 2 {
		t.Fatalf("the damage did not take: %s", d)
	}

	p.start()
	p.waitFor("the daemon ready", time.Minute, func(st daemon.Status) bool { return st.Ready })
	w := startWriter(t, p.DSN, "acct", 3500, 1)
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", "public.acct")
	if code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s%s", code, out, errOut)
	}
	done := p.snapshotsDone(1, 3*time.Minute)
	n, err := w.stop()
	if err != nil {
		t.Fatal(err)
	}
	p.waitCaughtUp()
	p.requireMirror()
	t.Logf("%d writes during the snapshot; %+v", n, done)
	if !p.logContains("snapshot reset") {
		t.Error("the daemon's log does not tell of the reset")
	}
}

// TestSnapshotKilledResumes: the daemon is killed with SIGKILL three times
// while a snapshot runs under writes; each start resumes after the last
// durable chunk (the rows read in all are well under twice the table) and
// the mirror ends equal.
func TestSnapshotKilledResumes(t *testing.T) {
	t.Parallel()
	const rows = 12000
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(accounts, "acct", rows), Tables: []string{"public.acct"},
		Snapshot: "incremental", SourceExtra: "incremental: {chunk_rows: 300, max_rows_per_second: 3000}"})
	w := startWriter(t, p.DSN, "acct", rows+500, 2)
	p.start()
	for kill := range 3 {
		progress := p.waitFor("the snapshot going", 2*time.Minute, func(st daemon.Status) bool {
			return len(st.Snapshots) > 0 && st.Snapshots[0].Rows > int64(1500*(kill+1))
		}).Snapshots[0]
		t.Logf("kill %d at %d rows", kill, progress.Rows)
		if kill == 0 { // the progress is in the metrics while it runs
			_, out := p.adminRequest("GET", "/metrics", nil, "")
			for _, name := range []string{"rows", "rows_estimated", "running", "rows_per_second", "eta_seconds"} {
				if !strings.Contains(out, "cdcd_table_incremental_snapshot_"+name+"{") {
					t.Errorf("/metrics has no cdcd_table_incremental_snapshot_%s while the snapshot runs", name)
				}
			}
		}
		p.kill()
		p.start()
	}
	done := p.snapshotsDone(1, 4*time.Minute)
	if n, err := w.stop(); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("%d writes", n)
	}
	p.waitCaughtUp()
	p.requireMirror()
	// Resumed, not started over: the reset (the plan) happened once.
	if c := strings.Count(p.logTail(50_000_000), "msg=\"snapshot started\""); c != 1 {
		t.Errorf("the snapshot was planned %d times, want once", c)
	}
	t.Logf("%+v", done)
}

// TestTableAddedToPipeline: a table added to the config of a running
// pipeline is snapshotted at the next start, under writes, and the table
// that was there is not read again.
func TestTableAddedToPipeline(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: fmt.Sprintf(accounts, "old", 500) + fmt.Sprintf(accounts, "added", 4000), Tables: []string{"public.old"},
		SourceExtra: "incremental: {chunk_rows: 400}"})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.reconfigure(func(o *pipelineOptions) { o.Tables = []string{"public.old", "public.added"} })
	w := startWriter(t, p.DSN, "added", 4500, 3)
	w2 := startWriter(t, p.DSN, "old", 600, 4)
	p.start()
	done := p.snapshotsDone(1, 3*time.Minute)
	for _, w := range []*writer{w, w2} {
		if _, err := w.stop(); err != nil {
			t.Fatal(err)
		}
	}
	p.waitCaughtUp()
	p.requireMirror()
	if len(done) != 1 || done[0].Table != "public.added" || done[0].Origin != "added" || !done[0].Replace {
		t.Errorf("snapshots %+v, want one replacing snapshot of public.added", done)
	}
}

// TestSignalTable: Debezium's signals in a signal table: pause-snapshot
// holds a snapshot queued by execute-snapshot until resume-snapshot; the
// snapshot then re-reads the table, restoring rows the mirror lost.
func TestSignalTable(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: fmt.Sprintf(accounts, "acct", 2000) +
			`CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));`,
		Tables: []string{"public.acct"}, SourceExtra: "incremental: {chunk_rows: 200, signal_table: public.debezium_signal}"})
	p.start()
	p.waitCaughtUp()
	p.stop()
	p.damage("public.acct", []int32{10, 11, 1500}, nil)
	p.start()
	w := startWriter(t, p.DSN, "acct", 2200, 5)
	p.exec(`INSERT INTO debezium_signal VALUES ('p-1', 'pause-snapshot', '{"type": "incremental"}')`)
	p.exec(`INSERT INTO debezium_signal VALUES ('s-1', 'execute-snapshot', '{"data-collections": ["public.acct"], "type": "incremental"}')`)
	p.waitFor("the snapshot queued and paused", time.Minute, func(st daemon.Status) bool {
		return len(st.Snapshots) == 1 && st.Snapshots[0].State == "paused" && st.Snapshots[0].Rows == 0
	})
	time.Sleep(time.Second)
	if st := p.status(); st.Snapshots[0].Rows != 0 {
		t.Fatalf("a paused snapshot read %d rows", st.Snapshots[0].Rows)
	}
	p.exec(`INSERT INTO debezium_signal VALUES ('r-1', 'resume-snapshot', '{"type": "incremental"}')`)
	done := p.snapshotsDone(1, 3*time.Minute)
	if _, err := w.stop(); err != nil {
		t.Fatal(err)
	}
	p.waitCaughtUp()
	p.requireMirror()
	if done[0].Rows < 1500 || done[0].Replace || done[0].Origin != "signal" {
		t.Errorf("snapshot %+v, want a signal's re-read of the whole table", done[0])
	}
}

// TestSnapshotDuringDDL: a column added and filled by an update while a
// replacing snapshot runs under writes: chunks read after the change have
// the new column, a chunk whose window saw the new shape is read again,
// and the mirror ends equal to the table. (Not tested: a column added with
// a default. A constant one is not written into the rows, and a volatile
// one rewrites the table, which logical decoding does not stream: rows the
// mirror held before the ALTER read NULL there, from a chunk or the stream
// alike — the sink writes no initial-default, and only a re-read of the
// table brings the rewritten values.)
func TestSnapshotDuringDDL(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(accounts, "acct", 6000), Tables: []string{"public.acct"},
		SourceExtra: "incremental: {chunk_rows: 200, max_rows_per_second: 4000}"})
	p.start()
	p.waitCaughtUp()
	w := startWriter(t, p.DSN, "acct", 6500, 6)
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", "public.acct")
	if code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s%s", code, out, errOut)
	}
	p.waitFor("the snapshot a third through", time.Minute, func(st daemon.Status) bool {
		return len(st.Snapshots) > 0 && st.Snapshots[0].Rows > 2000
	})
	p.exec(`ALTER TABLE acct ADD COLUMN note text; UPDATE acct SET note = 'n' || id WHERE id % 3 = 0`)
	p.snapshotsDone(1, 3*time.Minute)
	if _, err := w.stop(); err != nil {
		t.Fatal(err)
	}
	p.waitCaughtUp()
	p.requireMirror()
}

// TestKilledDuringInitialLoad: the daemon dies (a failpoint) in the middle
// of the COPY initial load of a table with a TOASTed column. Before it
// starts again, rows of chunks not loaded yet are updated without touching
// that column, and two of them are deleted, so the stream replays updates
// whose unchanged value only the row as it was can give. The restarted
// daemon finishes the load with an incremental snapshot of the table — one
// that goes on after the load's durable chunks, reading only the rest, or,
// when none was durable (the load saves its progress once a second; the
// point is hit before), one that replaces the table; it never pauses it,
// and the Iceberg table ends equal to the source. (Here
// the sink folds each update with its delete in one commit, so the old
// resumption passed too; TestLoadResumedIncrementally in source/postgres,
// which checks every change, is the one that reproduces the pause.)
func TestKilledDuringInitialLoad(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: `CREATE TABLE doc (id int PRIMARY KEY, v text, big text);
		ALTER TABLE doc ALTER COLUMN big SET STORAGE EXTERNAL;
		INSERT INTO doc SELECT g, 'v' || g, CASE WHEN g > 59900 THEN repeat(chr(97 + g % 26), 2100) END
			FROM generate_series(1, 60000) g;
		ANALYZE doc`, Tables: []string{"public.doc"}, SourceExtra: "incremental: {chunk_rows: 5000}"})
	p.startArmed("source.load-chunk-emitted")
	if code := p.exited(3 * time.Minute); code == 0 {
		t.Fatal("the daemon did not die at the failpoint")
	}
	p.exec(`UPDATE doc SET v = 'kept big' WHERE id > 59900`)
	p.exec(`DELETE FROM doc WHERE id IN (59950, 59951)`)
	p.start()
	done := p.snapshotsDone(1, 3*time.Minute)
	// The load saves its progress once a second: how many of its chunks of
	// 20,000 rows were durable when it died is in the log.
	durable := 0
	if m := regexp.MustCompile(`resuming the initial load.* chunks_done=(\d+)`).FindStringSubmatch(p.logTail(5_000_000)); m != nil {
		durable, _ = strconv.Atoi(m[1])
	}
	switch {
	case len(done) != 1 || done[0].Origin != "load-resumed":
		t.Errorf("snapshots %+v, want one of public.doc", done)
	case durable == 0 && !done[0].Replace:
		t.Errorf("no chunk was durable, yet the snapshot %+v does not replace the table", done[0])
	case durable > 0 && (done[0].Replace || done[0].Rows > int64(60000-20000*durable)):
		t.Errorf("%d chunks of 20,000 were durable, yet the snapshot %+v replaced the table or read them again", durable, done[0])
	}
	t.Logf("%d chunks durable at the kill; the snapshot read %d rows", durable, done[0].Rows)
	p.waitCaughtUp()
	p.requireMirror()
	if !p.logContains("resuming the initial load") {
		t.Error("the daemon's log does not tell of the resumed load")
	}
}

// TestKilledAfterLoadProgress: the daemon is killed (kill -9, a failpoint)
// right after the COPY initial load saved its progress with durable
// chunks and more to load: the path TestKilledDuringInitialLoad reaches
// only when its kill comes late. The load reads 5,000-row chunks and saves
// every 50 ms (test knobs), so the kill finds chunks in the log. Before the
// restart, rows of the last chunk are updated and two deleted. The
// restarted daemon must go on after the durable chunks: no reset marker
// (no Replace), at most the rows of the chunks not durable read again,
// and the Iceberg table equal to the source by iceberg-go's scan.
func TestKilledAfterLoadProgress(t *testing.T) {
	t.Parallel()
	const rows, chunk = 60000, 5000
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(`CREATE TABLE doc (id int PRIMARY KEY, v text);
		INSERT INTO doc SELECT g, 'v' || g FROM generate_series(1, %d) g;
		ANALYZE doc`, rows), Tables: []string{"public.doc"}, SourceExtra: "incremental: {chunk_rows: 2000}"})
	p.startArmed("source.load-progress-saved",
		failpoint.KnobPrefix+"LOAD_CHUNK_ROWS="+strconv.Itoa(chunk), failpoint.KnobPrefix+"STATUS_INTERVAL_MS=50")
	if code := p.exited(3 * time.Minute); code == 0 {
		t.Fatal("the daemon did not die at the failpoint")
	}
	if !p.logContains("failpoint: killing the process at source.load-progress-saved") {
		t.Fatal("the daemon did not die at source.load-progress-saved")
	}
	p.exec(`UPDATE doc SET v = 'changed' WHERE id > 59000`)
	p.exec(`DELETE FROM doc WHERE id IN (59950, 59951)`)
	p.start()
	done := p.snapshotsDone(1, 3*time.Minute)
	durable := 0
	if m := regexp.MustCompile(`resuming the initial load.* chunks_done=(\d+)`).FindStringSubmatch(p.logTail(5_000_000)); m != nil {
		durable, _ = strconv.Atoi(m[1])
	}
	switch {
	case durable < 1:
		t.Fatalf("the load was killed after saving durable chunks, yet the restart resumed after %d", durable)
	case len(done) != 1 || done[0].Origin != "load-resumed":
		t.Errorf("snapshots %+v, want one of public.doc", done)
	case done[0].Replace:
		t.Errorf("%d chunks of %d were durable, yet the snapshot %+v replaced the table", durable, chunk, done[0])
	case done[0].Rows > int64(rows-chunk*durable):
		t.Errorf("%d chunks of %d were durable, yet the snapshot read %d rows (at most %d are not durable)", durable, chunk, done[0].Rows, rows-chunk*durable)
	case done[0].Rows == 0:
		t.Errorf("the snapshot read no rows: the load's tail was never read")
	}
	t.Logf("%d chunks durable at the kill; the snapshot read %d rows", durable, done[0].Rows)
	if !p.logContains("the initial load of a table goes on after its durable chunks") {
		t.Error("the daemon's log does not tell that the load went on after its durable chunks")
	}
	p.waitCaughtUp()
	p.requireMirror()
}

// The cdcd binary built with failpoints, once per test binary.
var fpBuild struct {
	once sync.Once
	bin  string
	err  error
}

// startArmed starts the daemon built with failpoints, points armed (the
// syntax of failpoint.Env).
func (p *pipeline) startArmed(points string, env ...string) {
	p.t.Helper()
	fpBuild.once.Do(func() {
		dir, err := binDir("cdcd-faultsuite-fpbin-")
		if err != nil {
			fpBuild.err = err
			return
		}
		fpBuild.bin, fpBuild.err = cdcdtest.Build(dir, failpoint.BuildTag)
	})
	if fpBuild.err != nil {
		p.t.Fatal(fpBuild.err)
	}
	fmt.Fprintf(p.logFile, "---- faultsuite: start with failpoints %s\n", points)
	p.child = cdcdtest.Start(p.t, fpBuild.bin, p.CfgPath, p.Admin, p.logFile, append(env, failpoint.Env+"="+points)...)
}
