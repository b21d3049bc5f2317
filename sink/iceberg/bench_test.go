package iceberg

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// benchTable is the benchmark row shape: bigint PK, int, 40-char text,
// numeric(12,2), timestamptz, bool, small jsonb, float8.
var benchTable = &schema.Table{Namespace: "public", Name: "bench", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64, SourceType: "bigint"},
	{Name: "qty", Kind: schema.Int32, Nullable: true, SourceType: "integer"},
	{Name: "label", Kind: schema.String, Nullable: true, SourceType: "text"},
	{Name: "amount", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
	{Name: "at", Kind: schema.TimestampTZ, Nullable: true, SourceType: "timestamptz"},
	{Name: "flag", Kind: schema.Bool, Nullable: true, SourceType: "boolean"},
	{Name: "doc", Kind: schema.JSON, Nullable: true, SourceType: "jsonb"},
	{Name: "score", Kind: schema.Float64, Nullable: true, SourceType: "double precision"},
}, Key: []int{0}}

func benchRow(id int64, rng *rand.Rand) []any {
	return []any{id, int64(rng.IntN(1000)), fmt.Sprintf("label-%034d", rng.Int64()), fmt.Sprintf("%d.%02d", rng.IntN(1_000_000), rng.IntN(100)),
		int64(1_700_000_000_000_000 + rng.Int64N(1e12)), rng.IntN(2) == 1, fmt.Sprintf(`{"k": %d, "tag": "t%d"}`, rng.IntN(100), rng.IntN(10)), rng.Float64()}
}

// memRegistry is a registry over an in-memory store.
type memStoreBench struct{ keys, values [][]byte }

func (m *memStoreBench) Load(_ context.Context, fn func(k, v []byte) error) error {
	for i := range m.keys {
		if err := fn(m.keys[i], m.values[i]); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStoreBench) Append(_ context.Context, k, v []byte) error {
	m.keys, m.values = append(m.keys, k), append(m.values, v)
	return nil
}

type rusage struct {
	wall time.Time
	cpu  time.Duration
}

func now() rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return rusage{time.Now(), cpu}
}

// peakRSS reads VmHWM (kB) of this process; resetPeak starts a new peak.
func peakRSS() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			f := strings.Fields(l)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// TestSinkThroughput measures the upsert sink from the log into committed
// Iceberg: N inserts, then N random updates of those rows; rows/s, CPU-µs
// per row, peak RSS (each phase runs in a child process, so the figures are
// the sink's alone); then the scan time of the updated table against a
// freshly written table of the same rows. Run with
//
//	CGO_ENABLED=0 CDCD_SINK_BENCH=1000000 go test ./sink/iceberg/ -run TestSinkThroughput -v -timeout 30m
//
// CGO_ENABLED=0 builds as the shipped binary is built (pebble's cache and
// memtables are then Go memory, under the soft limit). The children run
// under `cdcd run`'s default soft memory limit, 200 MiB, unless GOMEMLIMIT
// is set.
//
// Goals: >= 150k rows/s inserts, >= 80k rows/s updates, RSS <= 300 MB.
func TestSinkThroughput(t *testing.T) {
	if os.Getenv("CDCD_SINK_BENCH_CHILD") != "" {
		sinkBenchChild(t)
		return
	}
	n, _ := strconv.Atoi(os.Getenv("CDCD_SINK_BENCH"))
	if n == 0 {
		t.Skip("set CDCD_SINK_BENCH=<rows> to run")
	}
	ctx := t.Context()
	dir := t.TempDir()
	const partitions = 8
	rng := rand.New(rand.NewPCG(1, 2))
	produce := func(topic string, op byte, ids func(i int) int64, rng *rand.Rand) {
		lg, err := log.Open(filepath.Join(dir, "log"), log.Options{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer lg.Close()
		reg, err := schema.OpenRegistry(ctx, &fileStore{path: filepath.Join(dir, "registry")})
		if err != nil {
			t.Fatal(err)
		}
		if err := lg.CreateTopic(ctx, topic, log.TopicConfig{Partitions: partitions}); err != nil && !strings.Contains(err.Error(), "exists") {
			t.Fatal(err)
		}
		ks, _ := schema.KeySchema(benchTable, topic)
		vs, _ := schema.ValueSchema(benchTable, topic)
		kid, _ := reg.Register(ctx, topic+"-key", ks)
		vid, _ := reg.Register(ctx, topic+"-value", vs)
		batch := make([]log.Record, 0, 10000)
		for i := 0; i < n; i++ {
			row := benchRow(ids(i), rng)
			env := schema.Envelope{After: row, Op: op, Source: schema.SourceInfo{Connector: "postgresql", Table: "bench",
				Position: []byte(fmt.Sprintf("%c%012d", op, i))}}
			if op == 'u' {
				env.Before = []any{row[0], nil, nil, nil, nil, nil, nil, nil}
			}
			v, err := schema.AppendEnvelope(schema.AppendFrame(nil, vid), benchTable, &env)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := schema.AppendKey(schema.AppendFrame(nil, kid), benchTable, row)
			batch = append(batch, log.Record{Key: k, Value: v, Partition: log.PartitionFor(k, partitions)})
			if len(batch) == cap(batch) || i == n-1 {
				if err := lg.Produce(ctx, topic, batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	run := func(what, topic, table string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSinkThroughput$", "-test.v")
		cmd.Env = os.Environ()
		if os.Getenv("GOMEMLIMIT") == "" {
			cmd.Env = append(cmd.Env, "GOMEMLIMIT=224MiB") // cmd/cdcd's defaultMemoryLimit
		}
		cmd.Env = append(cmd.Env, "CDCD_SINK_BENCH_CHILD="+dir, "CDCD_SINK_BENCH_TOPIC="+topic, "CDCD_SINK_BENCH_TABLE="+table, "CDCD_SINK_BENCH_PHASE="+what)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "RESULT ") {
				t.Logf("%-8s %8d rows %s", what, n, strings.TrimSpace(l[strings.Index(l, "RESULT ")+7:]))
			}
		}
	}
	produce("bench", 'c', func(i int) int64 { return int64(i) }, rng)
	run("inserts", "bench", "bench")
	produce("bench", 'u', func(int) int64 { return rng.Int64N(int64(n)) }, rng)
	run("updates", "bench", "bench")
	produce("fresh", 'c', func(i int) int64 { return int64(i) }, rand.New(rand.NewPCG(9, 9)))
	run("fresh", "fresh", "fresh")
	cat, err := OpenCatalog(ctx, benchCatalog(dir))
	if err != nil {
		t.Fatal(err)
	}
	scanTime := func(name string) (time.Duration, int64) {
		tbl, err := cat.LoadTable(ctx, table.Identifier{"b", name})
		if err != nil {
			t.Fatal(err)
		}
		if tasks, err := tbl.Scan().PlanFiles(ctx); err == nil {
			t.Logf("scan of %s: %d tasks", name, len(tasks))
		}
		best := time.Duration(1 << 62)
		var rows int64
		if p, _ := strconv.Atoi(os.Getenv("CDCD_SINK_BENCH_SCAN_PROCS")); p > 0 {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
		}
		for i := 0; i < 3; i++ {
			start := time.Now()
			at, err := tbl.Scan().ToArrowTable(ctx)
			if err != nil {
				t.Fatal(err)
			}
			best = min(best, time.Since(start))
			rows = at.NumRows()
			at.Release()
		}
		return best, rows
	}
	du, rows := scanTime("bench")
	df, frows := scanTime("fresh")
	t.Logf("scan (best of 3): updated table %d rows in %v; fresh table %d rows in %v; ratio %.2f", rows, du, frows, df, float64(du)/float64(df))
	cat.(interface{ Close() error }).Close()
	run("compact", "bench", "bench")
	cat, err = OpenCatalog(ctx, benchCatalog(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	dc, crows := scanTime("bench")
	df, _ = scanTime("fresh")
	t.Logf("scan (best of 3): compacted table %d rows in %v; fresh table in %v; ratio %.2f (goal <= 1.2)", crows, dc, df, float64(dc)/float64(df))
	// The key index lost (as when it is behind the table after a crash):
	// rebuilt from the table at the next start.
	if err := os.RemoveAll(filepath.Join(dir, "index", "b.bench")); err != nil {
		t.Fatal(err)
	}
	run("rebuild", "bench", "bench")
}

// sinkBenchRebuild starts the table's writer with its key index gone, so
// it rebuilds the index from the table, and checks the result.
func sinkBenchRebuild(t *testing.T, dir string, lg *log.Embedded, cat catalog.Catalog) {
	ctx := context.Background()
	s := New(Config{Pipeline: "bench", Group: "g", Tables: []TableConfig{{Topic: "bench", Ident: table.Identifier{"b", "bench"}}},
		IndexDir: filepath.Join(dir, "index")}, cat, lg, nil, slog.New(slog.DiscardHandler))
	w := &tableWriter{s: s, cfg: s.cfg.Tables[0], stats: s.stats[0], logger: s.logger}
	resetPeak()
	start := now()
	if err := w.load(ctx); err != nil {
		t.Fatal(err)
	}
	end := now()
	w.close()
	chk, err := VerifyIndex(ctx, w.tbl, filepath.Join(dir, "index"))
	if err != nil || len(chk.Problems) > 0 {
		t.Fatalf("the rebuilt index: %v %v", err, chk.Problems)
	}
	fmt.Printf("RESULT index rebuilt: %d keys in %.2fs, %.0f CPU-ms, peak RSS %d MB\n",
		chk.IndexKeys, end.wall.Sub(start.wall).Seconds(), float64(end.cpu-start.cpu)/1e6, peakRSS()/1024)
}

// sinkBenchCompact compacts the benchmark table until nothing is left to do.
func sinkBenchCompact(t *testing.T, dir string, lg *log.Embedded, cat catalog.Catalog) {
	ctx := context.Background()
	s := New(Config{Pipeline: "bench", Group: "g", Tables: []TableConfig{{Topic: "bench", Ident: table.Identifier{"b", "bench"}}},
		IndexDir: filepath.Join(dir, "index"), Compaction: CompactionConfig{MaxBytes: 1 << 30, MinGroup: 2}}, cat, lg, nil, slog.New(slog.DiscardHandler))
	w := &tableWriter{s: s, cfg: s.cfg.Tables[0], stats: s.stats[0], logger: s.logger}
	if err := w.load(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.close()
	start := now()
	before := len(w.up.data)
	for round := 0; round <= 20 && compactOnce(t, w, nil); round++ {
	}
	end := now()
	var bytes int64
	for _, df := range w.up.data {
		bytes += df.FileSizeBytes()
	}
	fmt.Printf("RESULT compaction: %d data files -> %d (%.1f MB) in %.2fs, %.0f CPU-ms, peak RSS %d MB\n",
		before, len(w.up.data), float64(bytes)/(1<<20), end.wall.Sub(start.wall).Seconds(), float64(end.cpu-start.cpu)/1e6, peakRSS()/1024)
}

func benchCatalog(dir string) CatalogConfig {
	return CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Name: "bench", Warehouse: "file://" + filepath.Join(dir, "warehouse")}
}

// sinkBenchChild runs the sink over one topic until it has committed all
// of it and prints the figures.
func sinkBenchChild(t *testing.T) {
	// The package's tests overwrite every window handed back (TestMain);
	// the daemon does not, and the benchmark measures what it does
	// (about 0.1 CPU-µs a row).
	poisonWindows = false
	ctx := context.Background()
	dir := os.Getenv("CDCD_SINK_BENCH_CHILD")
	topic, name := os.Getenv("CDCD_SINK_BENCH_TOPIC"), os.Getenv("CDCD_SINK_BENCH_TABLE")
	lg, err := log.Open(filepath.Join(dir, "log"), log.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	reg, err := schema.OpenRegistry(ctx, &fileStore{path: filepath.Join(dir, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := OpenCatalog(ctx, benchCatalog(dir))
	if err != nil {
		t.Fatal(err)
	}
	if name == "bench" && os.Getenv("CDCD_SINK_BENCH_PHASE") == "compact" {
		sinkBenchCompact(t, dir, lg, cat)
		return
	}
	if name == "bench" && os.Getenv("CDCD_SINK_BENCH_PHASE") == "rebuild" {
		sinkBenchRebuild(t, dir, lg, cat)
		return
	}
	info, err := lg.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range info.Partitions {
		total += p.End
	}
	// CDCD_SINK_BENCH_CPU=file: a CPU profile per phase (file.<phase>).
	if p := os.Getenv("CDCD_SINK_BENCH_CPU"); p != "" {
		f, _ := os.Create(p + "." + os.Getenv("CDCD_SINK_BENCH_PHASE"))
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	// CDCD_SINK_BENCH_CATALOG_MS=N: every catalog commit takes N ms more,
	// as a REST catalog's round trips do.
	var sinkCat catalog.Catalog = cat
	if ms, _ := strconv.Atoi(os.Getenv("CDCD_SINK_BENCH_CATALOG_MS")); ms > 0 {
		sinkCat = slowCatalog{cat, time.Duration(ms) * time.Millisecond}
	}
	start := now()
	s := New(Config{Pipeline: "bench", Group: "g", Tables: []TableConfig{{Topic: topic, Ident: table.Identifier{"b", name}}},
		CommitInterval: 2 * time.Second, IndexDir: filepath.Join(dir, "index"),
		PipelineCommits: os.Getenv("CDCD_PIPELINE_COMMITS") == "1", SerialInserts: os.Getenv("CDCD_SERIAL_INSERTS") == "1"}, sinkCat, lg, reg, slog.New(slog.DiscardHandler)) // as the daemon reads it
	s.tune.index = benchIndexOptions(t)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	var committedBefore int64 = -1
	var maxHeap uint64
	var ms runtime.MemStats
	var profiledAt uint64
	for {
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > maxHeap {
			maxHeap = ms.HeapInuse
			// CDCD_SINK_BENCH_HEAP=file: a heap profile near the peak
			// (rewritten whenever the heap grew another 16 MB past 128 MB).
			if p := os.Getenv("CDCD_SINK_BENCH_HEAP"); p != "" && maxHeap > 128<<20 && maxHeap > profiledAt+16<<20 {
				f, _ := os.Create(p + "." + os.Getenv("CDCD_SINK_BENCH_PHASE"))
				pprof.WriteHeapProfile(f)
				f.Close()
				profiledAt = maxHeap
			}
		}
		c := s.Stats()[0].Committed.Load()
		if c != nil && committedBefore < 0 {
			committedBefore = 0
			for _, o := range *c {
				committedBefore += o
			}
		}
		caught := c != nil
		for _, p := range info.Partitions {
			if c == nil || (*c)[p.Partition] < p.End {
				caught = false
			}
		}
		if caught {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("sink stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	end := now()
	cancel()
	<-done
	n := total - committedBefore
	wall := end.wall.Sub(start.wall)
	cpu := end.cpu - start.cpu
	fmt.Printf("RESULT in %6.2fs: %8.0f rows/s, %5.2f CPU-µs/row, peak RSS %d MB (max Go heap in use %d MB, sys %d MB), %d commits\n",
		wall.Seconds(), float64(n)/wall.Seconds(), float64(cpu.Microseconds())/float64(n), peakRSS()/1024, maxHeap>>20, ms.Sys>>20, s.Stats()[0].Commits.Load())
}

// fileStore is a registry store in one file (for the benchmark's processes).
type fileStore struct{ path string }

func (f *fileStore) Load(_ context.Context, fn func(k, v []byte) error) error {
	b, err := os.ReadFile(f.path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, "\t")
		if ok {
			if err := fn([]byte(k), []byte(v)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *fileStore) Append(_ context.Context, k, v []byte) error {
	fh, err := os.OpenFile(f.path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = fmt.Fprintf(fh, "%s\t%s\n", k, v)
	return err
}

// slowCatalog adds a delay to every commit (CDCD_SINK_BENCH_CATALOG_MS).
type slowCatalog struct {
	catalog.Catalog
	delay time.Duration
}

func (c slowCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	time.Sleep(c.delay)
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}
