package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// BenchmarkStreaming: the reader's rows/s against a plain BinlogSyncer
// read-and-decode loop over the same binlog, in the same run (the issue's
// goal: ≥ 0.6 of the plain loop). Rows: CDCD_BENCH_ROWS, default 200000.
// The reader emits into a counting Emitter: this is the reader's own cost,
// not the log's.
//
//	go test ./source/mysql -run '^$' -bench Streaming -benchtime 1x
func BenchmarkStreaming(b *testing.B) {
	srv, _, name, start, rows := benchTable(b)
	for b.Loop() {
		t0, c0, m0 := time.Now(), cpuTime(), mallocs()
		if _, err := DecodeLoop(context.Background(), srv.ReplDSN(name), mariadbtest.ServerID(b), FlavorMariaDB, start, int64(rows)); err != nil {
			b.Fatal(err)
		}
		raw := float64(rows) / time.Since(t0).Seconds()
		rawCPU := float64((cpuTime() - c0).Microseconds()) / float64(rows)
		rawAllocs := float64(mallocs()-m0) / float64(rows)

		st := newMemState()
		cp, _ := json.Marshal(checkpoint{Flavor: FlavorMariaDB, GTID: start, Ordinal: 1})
		st.Save(context.Background(), "mysql/checkpoint", cp)
		ctx, cancel := context.WithCancel(context.Background())
		em := &counting{want: int64(rows), done: cancel}
		r := New(Config{DSN: srv.ReplDSN(name), ServerID: mariadbtest.ServerID(b), Tables: []string{name + ".bench"}}, st,
			slog.New(slog.DiscardHandler))
		t0, c0, m0, a0 := time.Now(), cpuTime(), mallocs(), allocated()
		if err := r.Run(ctx, em); err != context.Canceled {
			b.Fatal(err)
		}
		got := float64(rows) / time.Since(t0).Seconds()
		gotCPU := float64((cpuTime() - c0).Microseconds()) / float64(rows)
		b.ReportMetric(float64(allocated()-a0)/float64(rows), "reader-B/row")
		b.ReportMetric(raw, "raw-rows/s")
		b.ReportMetric(got, "reader-rows/s")
		b.ReportMetric(got/raw, "ratio")
		b.ReportMetric(rawCPU, "raw-cpu-µs/row")
		b.ReportMetric(gotCPU, "reader-cpu-µs/row")
		b.ReportMetric(rawAllocs, "raw-allocs/row")
		b.ReportMetric(float64(mallocs()-m0)/float64(rows), "reader-allocs/row")
	}
}

// benchTable fills a table bench of CDCD_BENCH_ROWS rows (default
// 200000) in a new server, in transactions of 1,000 rows; start is the
// GTID position before them.
func benchTable(b *testing.B) (srv *mariadbserver.Server, db *sql.DB, name, start string, rows int) {
	rows = 200_000
	if n, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && n > 0 {
		rows = n
	}
	srv = mariadbtest.NewServer(b, mariadbserver.Options{})
	dsn := mariadbtest.NewDBOn(b, srv)
	db, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE bench (id BIGINT PRIMARY KEY, a INT, b BIGINT, c VARCHAR(40), d DECIMAL(12,2),
		e TIMESTAMP(6) NULL, f BOOLEAN, g DOUBLE)`); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&start); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < rows; i += 1000 {
		q := fmt.Sprintf(`INSERT INTO bench SELECT seq, seq %% 1000, seq * 7, CONCAT('row ', seq), (seq %% 100000) / 100,
			FROM_UNIXTIME(1700000000 + seq), seq %% 2, seq / 3 FROM seq_%d_to_%d`, i, min(i+1000, rows)-1)
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	return srv, db, name, start, rows
}

// BenchmarkChunkReads: the load's chunk reads (ReadChunk: the chunk's
// SELECT, every value into the table model) through go-mysql's client
// (chunks-*, the load's path) and through database/sql (sql-chunks-*,
// read-only snapshots' path) against a plain SELECT * scanned as raw bytes
// by database/sql, in the same run, by this process's CPU per row (the
// server's is not counted). Rows: CDCD_BENCH_ROWS, default 200000.
//
//	go test ./source/mysql -run '^$' -bench ChunkReads -benchtime 1x
func BenchmarkChunkReads(b *testing.B) {
	srv, _, name, _, rows := benchTable(b)
	ci, err := parseDSN(srv.ReplDSN(name))
	if err != nil {
		b.Fatal(err)
	}
	pool, err := ci.open()
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	fast := &myDatabase{db: pool, flavor: FlavorMariaDB, ci: &ci}
	defer fast.closeConns()
	qn := name + ".bench"
	chunks := func(d *myDatabase) (wall, cpu time.Duration, allocs uint64) {
		plan, err := d.Plan(ctx, qn, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		t0, c0, m0 := time.Now(), cpuTime(), mallocs()
		var after snapshot.Key
		got := 0
		for {
			ch, err := d.ReadChunk(ctx, qn, nil, snapshot.ChunkQuery{After: after, Upper: plan.Upper, Limit: 8192})
			if err != nil {
				b.Fatal(err)
			}
			got += len(ch.Rows)
			if len(ch.Rows) < 8192 {
				break
			}
			after = ch.Last
		}
		wall, cpu, allocs = time.Since(t0), cpuTime()-c0, mallocs()-m0
		if got != rows {
			b.Fatalf("the chunks read %d rows; want %d", got, rows)
		}
		return wall, cpu, allocs
	}
	for b.Loop() {
		t0, c0, m0 := time.Now(), cpuTime(), mallocs()
		n := selectAll(b, pool, name)
		rawWall, rawCPU, rawAllocs := time.Since(t0), cpuTime()-c0, mallocs()-m0
		if n != rows {
			b.Fatalf("SELECT * read %d rows; want %d", n, rows)
		}
		sqlWall, sqlCPU, sqlAllocs := chunks(&myDatabase{db: pool, flavor: FlavorMariaDB})
		wall, cpu, allocs := chunks(fast)
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(rows) }
		b.ReportMetric(per(rawCPU), "raw-cpu-µs/row")
		b.ReportMetric(per(cpu), "chunks-cpu-µs/row")
		b.ReportMetric(per(sqlCPU), "sql-chunks-cpu-µs/row")
		b.ReportMetric(rawWall.Seconds()/wall.Seconds(), "ratio")
		b.ReportMetric(rawWall.Seconds()/sqlWall.Seconds(), "sql-ratio")
		b.ReportMetric(float64(rawAllocs)/float64(rows), "raw-allocs/row")
		b.ReportMetric(float64(allocs)/float64(rows), "chunks-allocs/row")
		b.ReportMetric(float64(sqlAllocs)/float64(rows), "sql-chunks-allocs/row")
	}
}

// BenchmarkLoad: the reader's whole initial load (the incremental engine's
// range chunks, Ahead at once, each between its watermarks, its rows
// emitted by the stream when it meets the high watermark) into a counting
// Emitter, against a plain SELECT * scanned as raw bytes, in the same run:
// the load's ratio without the log and the sink (cdcd bench's load phase
// measures them too). Rows: CDCD_BENCH_ROWS, default 200000.
//
//	go test ./source/mysql -run '^$' -bench 'Load$' -benchtime 1x
func BenchmarkLoad(b *testing.B) {
	srv, db, name, _, rows := benchTable(b)
	wt := name + ".cdcd_watermark"
	if err := ensureWatermarkTable(context.Background(), db, wt); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("GRANT SELECT, INSERT, UPDATE ON `%s`.`cdcd_watermark` TO '%s'@'%%'", name, mariadbserver.ReplUser)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		t0, c0 := time.Now(), cpuTime()
		if n := selectAll(b, db, name); n != rows {
			b.Fatalf("SELECT * read %d rows, want %d", n, rows)
		}
		raw := float64(rows) / time.Since(t0).Seconds()
		rawCPU := float64((cpuTime() - c0).Microseconds()) / float64(rows)

		ctx, cancel := context.WithCancel(context.Background())
		em := &counting{want: int64(rows), done: cancel, reads: true}
		r := New(Config{DSN: srv.ReplDSN(name), ServerID: mariadbtest.ServerID(b), Tables: []string{name + ".bench"},
			WatermarkTable: wt, Load: true}, newMemState(), slog.New(slog.DiscardHandler))
		t0, c0, a0 := time.Now(), cpuTime(), allocated()
		if err := r.Run(ctx, em); err != context.Canceled {
			b.Fatal(err)
		}
		got := float64(rows) / time.Since(t0).Seconds()
		gotCPU := float64((cpuTime() - c0).Microseconds()) / float64(rows)
		b.ReportMetric(float64(allocated()-a0)/float64(rows), "load-B/row")
		if em.n != int64(rows) {
			b.Fatalf("the load emitted %d rows, want %d", em.n, rows)
		}
		tm := r.Snapshots().Timings() // summed over chunks read at once
		b.Logf("%d chunks in %v: reader wait %v, low %v, read %v, order %v, high %v, meet %v; engine wait %v, bounds %v",
			tm.Chunks, time.Since(t0).Round(time.Millisecond), tm.ReaderWait, tm.Low, tm.Read, tm.Order, tm.High, tm.Meet, tm.EngineWait, tm.Bounds)
		b.ReportMetric(raw, "raw-rows/s")
		b.ReportMetric(got, "load-rows/s")
		b.ReportMetric(got/raw, "ratio")
		b.ReportMetric(rawCPU, "raw-cpu-µs/row")
		b.ReportMetric(gotCPU, "load-cpu-µs/row")
	}
}

// selectAll reads table bench with SELECT *, every column as raw bytes.
func selectAll(b *testing.B, db *sql.DB, name string) int {
	rows, err := db.Query("SELECT * FROM " + quoteIdent(name) + ".bench")
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	raw := make([]sql.RawBytes, 8)
	ptrs := make([]any, len(raw))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	n := 0
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// cpuTime is this process's user+system CPU time.
// mallocs is the heap allocations this process made so far: unlike CPU
// time, a figure a loaded machine does not blur.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// allocated is the bytes this process allocated on the heap so far.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// counting is an Emitter that counts changes (reads: only the load's
// rows) and cancels once it has want.
type counting struct {
	n, want int64
	reads   bool
	done    func()
}

// Submit is Emit: counting is a source.Pipeliner, as the daemon's
// Emitter is, so the reader takes its pipelined paths.
func (c *counting) Submit(ctx context.Context, batch []source.Change) error {
	return c.Emit(ctx, batch)
}

func (c *counting) Sync(context.Context) error { return nil }

func (c *counting) Emit(_ context.Context, batch []source.Change) error {
	n := int64(len(batch))
	if c.reads {
		n = 0
		for i := range batch {
			if batch[i].Op == source.OpRead && batch[i].Reset == "" {
				n++
			}
		}
	}
	if atomic.AddInt64(&c.n, n) >= c.want {
		c.done()
	}
	return nil
}
