package postgres

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// kvTable is the model of the kill tests' table as the reader builds it.
var kvTable = &schema.Table{Namespace: "public", Name: "kv", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64}, {Name: "v", Kind: schema.Int64, Nullable: true}, {Name: "pad", Kind: schema.String, Nullable: true},
}, Key: []int{0}}

const kvDDL = `CREATE TABLE kv (id bigint PRIMARY KEY, v bigint, pad text)`

// workload writes random committed transactions to kv and records, per
// key, every change it committed ("c:v", "u:v", "d").
type workload struct {
	conn    *pgx.Conn
	rng     *rand.Rand
	next    int64 // next new id
	live    []int64
	counter int64
	big     int // rows of an occasional large transaction; 0 for none
	want    map[int64][]string
	lastLSN uint64 // WAL insert position inside the last committed transaction
	pad     string
	commits *commitBounds // when set, every commit's bounds are added
}

// commitBounds are the WAL bounds of committed transactions: lo, read
// inside the transaction before its commit, lies below its commit record;
// hi, read after the commit, at or past the commit's end.
type commitBounds struct {
	mu sync.Mutex
	b  [][2]uint64
}

func (c *commitBounds) add(lo, hi uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b = append(c.b, [2]uint64{lo, hi})
}

// missed returns a transaction the slot surely confirmed (hi <= confirmed)
// and the log surely lacks (lo > newest: the log holds transactions in
// commit order, so it lacks every one after its newest).
func (c *commitBounds) missed(confirmed, newest uint64) ([2]uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.b {
		if b[1] <= confirmed && b[0] > newest {
			return b, true
		}
	}
	return [2]uint64{}, false
}

func newWorkload(conn *pgx.Conn, seed uint64, preloaded int64, big int) *workload {
	w := &workload{conn: conn, rng: rand.New(rand.NewPCG(seed, seed)), next: preloaded + 1, big: big, want: map[int64][]string{},
		pad: fmt.Sprintf("%0100d", 0)}
	for id := int64(1); id <= preloaded; id++ {
		w.live = append(w.live, id)
	}
	return w
}

func (w *workload) pick() (int64, int) {
	i := w.rng.IntN(len(w.live))
	return w.live[i], i
}

// step commits one transaction.
func (w *workload) step(ctx context.Context) error {
	w.counter++
	v := w.counter
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var changes [][2]any // id, change
	var deleted []int
	switch r := w.rng.IntN(100); {
	case w.big > 0 && r < 4:
		ids := make([]int64, w.big)
		for i := range ids {
			ids[i] = w.next + int64(i)
			changes = append(changes, [2]any{ids[i], fmt.Sprintf("c:%d", v)})
		}
		if _, err := tx.Exec(ctx, `INSERT INTO kv SELECT id, $1, $2 FROM unnest($3::bigint[]) id`, v, w.pad, ids); err != nil {
			return err
		}
		w.next += int64(w.big)
		defer func() { w.live = append(w.live, ids...) }()
	case w.big > 0 && r < 8 && len(w.live) > 0:
		seen := map[int64]bool{}
		var ids []int64
		for i := 0; i < w.big; i++ {
			id, _ := w.pick()
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
				changes = append(changes, [2]any{id, fmt.Sprintf("u:%d", v)})
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE kv SET v = $1 WHERE id = ANY($2)`, v, ids); err != nil {
			return err
		}
	case r < 50 || len(w.live) < 10:
		id := w.next
		if _, err := tx.Exec(ctx, `INSERT INTO kv VALUES ($1, $2, $3)`, id, v, w.pad); err != nil {
			return err
		}
		changes = append(changes, [2]any{id, fmt.Sprintf("c:%d", v)})
		w.next++
		defer func() { w.live = append(w.live, id) }()
	case r < 85:
		id, _ := w.pick()
		if _, err := tx.Exec(ctx, `UPDATE kv SET v = $1 WHERE id = $2`, v, id); err != nil {
			return err
		}
		changes = append(changes, [2]any{id, fmt.Sprintf("u:%d", v)})
	default:
		id, i := w.pick()
		if _, err := tx.Exec(ctx, `DELETE FROM kv WHERE id = $1`, id); err != nil {
			return err
		}
		changes = append(changes, [2]any{id, "d"})
		deleted = append(deleted, i)
	}
	var lsn string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if w.commits != nil {
		var hi string
		if err := w.conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&hi); err != nil {
			return err
		}
		lo, _ := parseLSN(lsn)
		end, _ := parseLSN(hi)
		w.commits.add(lo, end)
	}
	for _, c := range changes {
		id := c[0].(int64)
		w.want[id] = append(w.want[id], c[1].(string))
	}
	for _, i := range deleted {
		w.live[i] = w.live[len(w.live)-1]
		w.live = w.live[:len(w.live)-1]
	}
	w.lastLSN, _ = parseLSN(lsn)
	return nil
}

// killEnv is a kill -9 test's database, log directory and reader process.
type killEnv struct {
	*env
	dir     string
	cc      childConfig
	logFile *os.File
	proc    *readerProc
	cp      atomic.Uint64 // the slot's consistent point, once known
	bad     atomic.Value  // first violation seen by the live check
}

func newKillEnv(t *testing.T, ddl string, snapshot bool) *killEnv {
	e := setup(t, ddl)
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "reader.log"))
	if err != nil {
		t.Fatal(err)
	}
	ke := &killEnv{env: e, dir: dir, logFile: logFile}
	ke.cc = childConfig{Dir: dir, Partitions: 4, Reader: Config{
		DSN: smallDecodingMemory(e.dsn), Slot: e.names.Slot, Publication: e.names.Publication, Tables: []string{"kv"},
		Snapshot: snapshot, SnapshotChunkRows: 5000, SnapshotWorkers: 3, BatchMax: 2000, StatusInterval: 50 * time.Millisecond,
		HeartbeatInterval: -1, SpillDir: filepath.Join(dir, "spill"), ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
	}}
	t.Cleanup(func() {
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("reader log:\n%s", b)
		}
	})
	return ke
}

// connect opens a connection of the test's own, closed at its end.
func (ke *killEnv) connect(t *testing.T) *pgx.Conn {
	conn, err := pgx.Connect(t.Context(), ke.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (ke *killEnv) start(t *testing.T) {
	ke.proc = startChild(t, ke.cc, ke.logFile)
}

func (ke *killEnv) kill(t *testing.T, i int) {
	ke.proc.kill(t)
	fmt.Fprintf(ke.logFile, "---- test: killed with SIGKILL (%d)\n", i)
	ke.start(t)
}

// liveCheck checks, until ctx ends, that the slot's confirmed_flush_lsn
// never passes the newest position durable in the log (or the slot's
// consistent point, which the initial load's rows sort just below). With
// commits set, the reader may confirm past WAL that holds no captured
// change (an incremental snapshot's watermark messages): then only a
// committed transaction of the workload that the slot surely confirmed and
// the log surely lacks is a violation.
func (ke *killEnv) liveCheck(ctx context.Context, t *testing.T, commits *commitBounds) (checks *atomic.Int64) {
	checks = &atomic.Int64{}
	conn := ke.connect(t)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			confirmed := slotConfirmed(t, conn, ke.names.Slot)
			if confirmed == 0 {
				continue
			}
			ke.cp.CompareAndSwap(0, confirmed)
			newest, err := newestLSN(ctx, ke.dir, topicPrefix+"public.kv")
			if err != nil {
				continue // the writer may be mid-rotation; try again
			}
			if bound := max(newest, ke.cp.Load()); confirmed > bound {
				if commits == nil {
					ke.bad.CompareAndSwap(nil, fmt.Sprintf("confirmed_flush_lsn %X is ahead of the log's newest position %X", confirmed, bound))
				} else if tx, ok := commits.missed(confirmed, bound); ok {
					ke.bad.CompareAndSwap(nil, fmt.Sprintf("confirmed_flush_lsn %X is past the transaction committed between %X and %X, "+
						"which the log lacks (its newest position %X)", confirmed, tx[0], tx[1], bound))
				}
			}
			checks.Add(1)
		}
	}()
	return checks
}

// waitCaughtUp waits until the slot has confirmed past lsn.
func (ke *killEnv) waitCaughtUp(t *testing.T, lsn uint64) {
	t.Helper()
	for deadline := time.Now().Add(120 * time.Second); slotConfirmed(t, ke.conn, ke.names.Slot) < lsn; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("slot confirmed %X, never reached %X", slotConfirmed(t, ke.conn, ke.names.Slot), lsn)
		}
	}
}

// rowsInLog counts the records of kv in the log.
func (ke *killEnv) rowsInLog(t *testing.T) int {
	return countRecords(t, ke.dir, topicPrefix+"public.kv")
}

// kvReplay is the kill tests' log replayed per partition, as the sink
// would apply it: a truncate (a reset marker) empties its partition.
type kvReplay struct {
	state     map[int64]int64     // the rows the log replays to
	streamed  map[int64][]string  // per key, the streamed changes in order
	byLSN     map[uint64][]uint32 // per transaction, the change indexes
	loaded    map[int64]int       // per key, its rows from the COPY load
	read, all int                 // op r rows (COPY and incremental), records
	err       error               // the first record that could not be read
}

// replayKV reads the durable kv records; rows positioned below cp are the
// COPY load's.
func replayKV(ctx context.Context, dir string, cp uint64) (*kvReplay, error) {
	recs, _, err := durable(ctx, dir, topicPrefix+"public.kv")
	if err != nil {
		return nil, err
	}
	rp := &kvReplay{state: map[int64]int64{}, streamed: map[int64][]string{}, byLSN: map[uint64][]uint32{}, loaded: map[int64]int{}}
	for _, part := range recs {
		state := map[int64]int64{}
		for i, r := range part {
			rp.all++
			pos := source.Position(r.Header(headerPos))
			if i > 0 && pos.Compare(source.Position(part[i-1].Header(headerPos))) <= 0 {
				return nil, fmt.Errorf("partition %d: position does not increase at offset %d", r.Partition, r.Offset)
			}
			env, err := schema.DecodeEnvelope(kvTable, r.Value[5:])
			if err != nil {
				return nil, err
			}
			if env.Op == 't' {
				clear(state)
				continue
			}
			row := env.After
			if row == nil {
				row = env.Before
			}
			id := row[0].(int64)
			lsn, idx, err := pgpos.Parse(pos)
			if err != nil {
				return nil, err
			}
			switch env.Op {
			case 'r':
				rp.read++
				if lsn < cp {
					rp.loaded[id]++
				}
				state[id] = row[1].(int64)
				continue
			case 'c':
				rp.streamed[id] = append(rp.streamed[id], fmt.Sprintf("c:%d", row[1].(int64)))
				state[id] = row[1].(int64)
			case 'u':
				rp.streamed[id] = append(rp.streamed[id], fmt.Sprintf("u:%d", row[1].(int64)))
				state[id] = row[1].(int64)
			case 'd':
				rp.streamed[id] = append(rp.streamed[id], "d")
				delete(state, id)
			}
			rp.byLSN[lsn] = append(rp.byLSN[lsn], idx)
		}
		maps.Copy(rp.state, state)
	}
	return rp, nil
}

// kvRows reads the kv table.
func (ke *killEnv) kvRows(t *testing.T) map[int64]int64 {
	t.Helper()
	rows, err := ke.conn.Query(t.Context(), `SELECT id, v FROM kv`)
	if err != nil {
		t.Fatal(err)
	}
	table := map[int64]int64{}
	for rows.Next() {
		var id, v int64
		if err := rows.Scan(&id, &v); err != nil {
			t.Fatal(err)
		}
		table[id] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return table
}

// waitReplays waits until the log replays to the table's content (an
// incremental snapshot still running lacks rows).
func (ke *killEnv) waitReplays(t *testing.T) {
	t.Helper()
	table := ke.kvRows(t)
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		rp, err := replayKV(t.Context(), ke.dir, ke.cp.Load())
		if err == nil && maps.Equal(rp.state, table) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log never replayed to the table (%d rows): %v", len(table), err)
		}
	}
}

// verify checks the log: no key loaded twice by the COPY load; per key,
// the streamed changes are exactly the workload's, in order; every
// transaction's changes are there once, indexes 0..n-1; and the log
// replays to the table's content.
func (ke *killEnv) verify(t *testing.T, w *workload) {
	t.Helper()
	rp, err := replayKV(t.Context(), ke.dir, ke.cp.Load())
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range rp.loaded {
		if n > 1 {
			t.Fatalf("key %d loaded %d times by the COPY load", id, n)
		}
	}
	for id, want := range w.want {
		if !slices.Equal(rp.streamed[id], want) {
			t.Fatalf("key %d: log has %v, the workload committed %v", id, rp.streamed[id], want)
		}
	}
	for id, got := range rp.streamed {
		if _, ok := w.want[id]; !ok {
			t.Fatalf("key %d: log has changes %v the workload never made", id, got)
		}
	}
	for lsn, idx := range rp.byLSN {
		slices.Sort(idx)
		for i, x := range idx {
			if x != uint32(i) {
				t.Fatalf("transaction %X: change indexes %v... are not 0..%d once each", lsn, idx[:min(len(idx), 10)], len(idx)-1)
			}
		}
	}
	table := ke.kvRows(t)
	if len(table) != len(rp.state) {
		t.Fatalf("log replays to %d rows, the table has %d", len(rp.state), len(table))
	}
	for id, v := range table {
		if got, ok := rp.state[id]; !ok || got != v {
			t.Fatalf("key %d: log replays to %d (present %t), the table has %d", id, got, ok, v)
		}
	}
	t.Logf("verified %d records, %d rows read (%d by the COPY load), %d transactions, %d keys",
		rp.all, rp.read, len(rp.loaded), len(rp.byLSN), len(table))
}

// runWorkload runs w until stop is closed; the returned channel reports
// its end.
func runWorkload(w *workload, stop <-chan struct{}, pause time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if err := w.step(context.Background()); err != nil {
				done <- err
				return
			}
			time.Sleep(pause)
		}
	}()
	return done
}

// TestKillNineDuringInitialLoad kills the reader process during the COPY
// initial load (while the table takes writes), then twice more while the
// incremental snapshot that finishes the interrupted load runs or the
// slot streams; after the restarts the log holds every change exactly
// once, no row twice from the COPY load, and replays to the table.
func TestKillNineDuringInitialLoad(t *testing.T) {
	t.Parallel()
	const rows = 120_000
	ke := newKillEnv(t, kvDDL+fmt.Sprintf(`; INSERT INTO kv SELECT g, 0, repeat('p', 100) FROM generate_series(1, %d) g; ANALYZE kv`, rows), true)
	ke.start(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	commits := &commitBounds{} // the resumed load's watermarks may be confirmed past
	checks := ke.liveCheck(ctx, t, commits)
	for ke.rowsInLog(t) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	// The slot exists and is consistent: every write from here on streams.
	w := newWorkload(ke.connect(t), 1, rows, 0)
	w.commits = commits
	stop := make(chan struct{})
	done := runWorkload(w, stop, time.Millisecond)
	for i, frac := range []int{5, 10} {
		for ke.rowsInLog(t) < rows*frac/20 {
			time.Sleep(20 * time.Millisecond)
		}
		ke.kill(t, i+1)
	}
	for ke.rowsInLog(t) < rows {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	ke.kill(t, 3)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ke.waitCaughtUp(t, w.lastLSN)
	ke.waitReplays(t) // the resumed load's incremental snapshot is done
	ke.proc.stop(t)
	cancel()
	if v := ke.bad.Load(); v != nil {
		t.Fatal(v)
	}
	if checks.Load() < 10 {
		t.Fatalf("only %d live checks", checks.Load())
	}
	ke.verify(t, w)
	b, _ := os.ReadFile(ke.logFile.Name())
	if n := strings.Count(string(b), "resuming the initial load"); n < 1 {
		t.Fatalf("the load was resumed %d times: the kills missed it", n)
	}
}

// TestKillNineDuringStreaming kills the reader process four times while
// small and large (streamed, spilled) transactions commit; after the
// restarts the log holds every change exactly once, whole transactions
// with their indexes, and the slot never ran ahead of the log.
func TestKillNineDuringStreaming(t *testing.T) {
	t.Parallel()
	ke := newKillEnv(t, kvDDL, false)
	ke.start(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	checks := ke.liveCheck(ctx, t, nil)
	for slotConfirmed(t, ke.conn, ke.names.Slot) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the slot is consistent once its creation returned
	w := newWorkload(ke.connect(t), 2, 0, 1500)
	stop := make(chan struct{})
	done := runWorkload(w, stop, 2*time.Millisecond)
	for i := 0; i < 4; i++ {
		time.Sleep(time.Duration(400+i*300) * time.Millisecond)
		ke.kill(t, i+1)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ke.waitCaughtUp(t, w.lastLSN)
	ke.proc.stop(t)
	cancel()
	if v := ke.bad.Load(); v != nil {
		t.Fatal(v)
	}
	if checks.Load() < 10 {
		t.Fatalf("only %d live checks", checks.Load())
	}
	ke.verify(t, w)
}
