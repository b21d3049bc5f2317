package iceberg

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestSinkBenchPrepare lays out TestSinkThroughput's state up to its
// updates phase in a directory that outlives the test: N inserts produced
// and committed (by the inserts phase's child), then N random updates of
// those rows produced, not yet committed. Copies of it let one updates
// phase be run again and again, by any build's test binary, without the
// inserts before it:
//
//	CDCD_SINK_BENCH=1000000 CDCD_SINK_BENCH_PREPARE=/tmp/x/state ./iceberg.test -test.run '^TestSinkBenchPrepare$' -test.v
//	cp -a /tmp/x/state /tmp/x/run
//	CDCD_SINK_BENCH_CHILD=/tmp/x/run CDCD_SINK_BENCH_TOPIC=bench CDCD_SINK_BENCH_TABLE=bench \
//	  CDCD_SINK_BENCH_PHASE=updates GOMEMLIMIT=224MiB ./iceberg.test -test.run '^TestSinkThroughput$' -test.v
//
// CDCD_SINK_BENCH_PREPARE_UPDATES=M produces M updates instead of N;
// CDCD_SINK_BENCH_PREPARE_INSERTS_ONLY=1 stops once the inserts are
// produced (for runs of the inserts phase: CDCD_SINK_BENCH_PHASE=inserts).
func TestSinkBenchPrepare(t *testing.T) {
	dir := os.Getenv("CDCD_SINK_BENCH_PREPARE")
	n, _ := strconv.Atoi(os.Getenv("CDCD_SINK_BENCH"))
	if dir == "" || n == 0 {
		t.Skip("set CDCD_SINK_BENCH=<rows> and CDCD_SINK_BENCH_PREPARE=<dir> to run")
	}
	updates := n
	if m, _ := strconv.Atoi(os.Getenv("CDCD_SINK_BENCH_PREPARE_UPDATES")); m > 0 {
		updates = m
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const partitions = 8
	rng := rand.New(rand.NewPCG(1, 2))
	produce := func(topic string, op byte, count int, ids func(i int) int64) {
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
		for i := 0; i < count; i++ {
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
			if len(batch) == cap(batch) || i == count-1 {
				if err := lg.Produce(ctx, topic, batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	produce("bench", 'c', n, func(i int) int64 { return int64(i) })
	if os.Getenv("CDCD_SINK_BENCH_PREPARE_INSERTS_ONLY") != "" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSinkThroughput$", "-test.v")
	cmd.Env = append(os.Environ(), "GOMEMLIMIT=224MiB", "CDCD_SINK_BENCH_CHILD="+dir, "CDCD_SINK_BENCH_TOPIC=bench",
		"CDCD_SINK_BENCH_TABLE=bench", "CDCD_SINK_BENCH_PHASE=inserts", "CDCD_SINK_BENCH_CPU=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inserts: %v\n%s", err, out)
	}
	t.Logf("inserts: %s", out)
	produce("bench", 'u', updates, func(int) int64 { return rng.Int64N(int64(n)) })
}

// TestSinkBenchIndexMetrics prints pebble's metrics of the key index in
// CDCD_SINK_BENCH_INDEX (a table's directory under the index directory).
func TestSinkBenchIndexMetrics(t *testing.T) {
	dir := os.Getenv("CDCD_SINK_BENCH_INDEX")
	if dir == "" {
		t.Skip("set CDCD_SINK_BENCH_INDEX=<dir> to run")
	}
	x, err := openIndex(dir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	t.Logf("%s", x.db.Metrics())
}

// benchIndexOptions reads the key index's experiment options for the sink
// benchmark's children from CDCD_SINK_BENCH_INDEX_OPTS, e.g.
// "cache=32,mem=32,block=1024,l0=8,rows=1,dense=1048576" (sizes in MiB, block in bytes;
// rows=1: a new index in row blocks, as before session 34).
func benchIndexOptions(t *testing.T) indexOptions {
	var o indexOptions
	for _, f := range strings.Split(os.Getenv("CDCD_SINK_BENCH_INDEX_OPTS"), ",") {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("CDCD_SINK_BENCH_INDEX_OPTS: %s: %v", f, err)
		}
		switch k {
		case "cache":
			o.cacheSize = int64(n) << 20
		case "mem":
			o.memTableSize = uint64(n) << 20
		case "block":
			o.blockSize = n
		case "l0":
			o.l0Compaction = n
		case "dense":
			o.denseGap = int64(n)
		case "rows":
			o.rowBlocks = n != 0
		default:
			t.Fatalf("CDCD_SINK_BENCH_INDEX_OPTS: unknown %s", k)
		}
	}
	return o
}
