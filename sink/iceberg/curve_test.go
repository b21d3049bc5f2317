package iceberg

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	icebergio "github.com/apache/iceberg-go/io"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestCommitCurve runs a long steady upsert stream — each commit inserts
// new rows and updates earlier ones (deletion vectors) — and prints the
// commit latency along the way, with the metadata sizes. It is a
// benchmark in the shape of a test; run it with
//
//	CDCD_COMMIT_CURVE=3000 go test ./sink/iceberg/ -run TestCommitCurve -v -timeout 60m
//
// CDCD_COMMIT_CURVE_COMPACT=1 runs the compactor between commits, as the
// table loop does; CDCD_COMMIT_CURVE_INDEX=1 prints the key index's pebble
// metrics (levels, write amplification, cache) every 1,000 commits;
// CDCD_COMMIT_CURVE_CPU=file profiles the last 1,000 commits (or from commit
// CDCD_COMMIT_CURVE_CPU_FROM to the end); CDCD_COMMIT_CURVE_MIN_GROUP,
// CDCD_COMMIT_CURVE_INDEX_CACHE_MB, CDCD_COMMIT_CURVE_INDEX_SNAPPY=1 and
// CDCD_COMMIT_CURVE_INDEX_L0 vary the compactor's group size and the key
// index's cache, compression and L0CompactionThreshold;
// CDCD_COMMIT_CURVE_RETAIN=N keeps N snapshots instead of 50.
//
// The goal: the median of the last 100 commits within 1.5x of commits
// 100-200, with metadata.json and the manifest count bounded.
func TestCommitCurve(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE"))
	if n == 0 {
		t.Skip("set CDCD_COMMIT_CURVE=<commits> to run")
	}
	inserts, updates := 2000, 200
	if v, _ := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_INSERTS")); v > 0 {
		inserts = v
	}
	var tune tuning
	if v, _ := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_INDEX_CACHE_MB")); v > 0 {
		tune.index.cacheSize = int64(v) << 20
	}
	tune.index.snappy = os.Getenv("CDCD_COMMIT_CURVE_INDEX_SNAPPY") == "1"
	tune.index.l0Compaction, _ = strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_INDEX_L0"))
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.tune = tune
	w.s.cfg.TargetFileSize = 128 << 20
	w.s.cfg.Maintenance = MaintenanceConfig{RetainSnapshots: 50, SnapshotMaxAge: 0, ExpireEvery: 20}.WithDefaults()
	if v, _ := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_RETAIN")); v > 0 {
		// As many snapshots kept as the defaults keep at a 1 s commit
		// interval (all younger than an hour: 3,600).
		w.s.cfg.Maintenance.RetainSnapshots = v
	}
	if os.Getenv("CDCD_COMMIT_CURVE_NO_MAINTENANCE") != "" {
		w.s.cfg.Maintenance = MaintenanceConfig{MaxDataManifests: 1 << 30, RetainSnapshots: 1 << 30, ExpireEvery: 1 << 30}
	}
	compact := os.Getenv("CDCD_COMMIT_CURVE_COMPACT") != ""
	w.s.cfg.Compaction = CompactionConfig{Disabled: !compact, Interval: time.Second}
	if v, _ := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_MIN_GROUP")); v > 0 {
		w.s.cfg.Compaction.MinGroup = v
	}
	var compactions int
	rng := rand.New(rand.NewPCG(1, 1))
	var next int64
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		// CDCD_COMMIT_CURVE_CPU=file profiles the last 1000 commits, or
		// from commit CDCD_COMMIT_CURVE_CPU_FROM on.
		from := max(0, n-1000)
		if v, err := strconv.Atoi(os.Getenv("CDCD_COMMIT_CURVE_CPU_FROM")); err == nil {
			from = v
		}
		if p := os.Getenv("CDCD_COMMIT_CURVE_CPU"); p != "" && i == from {
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
		buf := make([]change, 0, inserts+updates)
		for j := 0; j < inserts; j++ {
			buf = append(buf, change{table: kv, env: &schema.Envelope{Op: 'c', After: []any{next, "v", int64(j)}}})
			next++
		}
		for j := 0; j < updates && next > 0; j++ {
			id := rng.Int64N(next)
			buf = append(buf, change{table: kv, env: &schema.Envelope{Op: 'u', After: []any{id, "u", int64(j)}, Before: []any{id, nil, nil}}})
		}
		for j := range buf {
			buf[j].env.Source.Position = []byte(fmt.Sprintf("%012d%06d", i, j))
			buf[j] = encoded(buf[j])
		}
		w.buf = buf
		w.next[0] = int64(i + 1)
		start := time.Now()
		if err := w.commit(t.Context()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		lat = append(lat, time.Since(start))
		if compact {
			// Between two commits, as in the table loop: finish a rewrite
			// that is done, or start one that is due.
			select {
			case <-w.compactionDone():
				if err := w.finishCompaction(t.Context()); err != nil {
					t.Fatal(err)
				}
				compactions++
			default:
			}
			w.compactor().Poll(t.Context(), false)
		}
		if (i+1)%100 == 0 || i+1 == n {
			meta := w.tbl.MetadataLocation()
			st, _ := os.Stat(strings.TrimPrefix(meta, "file://"))
			mfs, _ := w.tbl.CurrentSnapshot().Manifests(mustFS(t, w))
			var dataM, delM int
			for _, mf := range mfs {
				if mf.ManifestContent() == 0 {
					dataM++
				} else {
					delM++
				}
			}
			var size int64
			if st != nil {
				size = st.Size()
			}
			t.Logf("commit %5d: median of last 100 %7.1f ms, p90 %7.1f ms; metadata.json %7d B; manifests data %4d delete %4d; snapshots %d; data files %d, vectors %d; compactions %d; files in the table's folder %d",
				i+1, ms(median(lat[max(0, i-99):])), ms(pct(lat[max(0, i-99):], 0.9)), size, dataM, delM, len(w.tbl.Metadata().Snapshots()),
				len(w.up.data), len(w.up.dvs), compactions, len(tableFiles(w)))
			if os.Getenv("CDCD_COMMIT_CURVE_INDEX") != "" && (i+1)%1000 == 0 {
				t.Logf("key index after commit %d:\n%s", i+1, w.up.idx.db.Metrics())
			}
		}
	}
	if n >= 300 {
		if os.Getenv("CDCD_COMMIT_CURVE_FILES") != "" {
			by := map[string]int{}
			for _, p := range tableFiles(w) {
				by[filepath.Base(filepath.Dir(p))+"/*"+filepath.Ext(p)]++
			}
			t.Logf("files by kind: %v", by)
		}
		base := median(lat[100:200])
		last := median(lat[n-100:])
		t.Logf("commits 100-200 median %.1f ms; last 100 median %.1f ms; ratio %.2f (goal <= 1.5)", ms(base), ms(last), float64(last)/float64(base))
	}
	w.close()
}

// tableFiles lists the files under the table's location: what it leaves on
// storage.
func tableFiles(w *tableWriter) []string {
	var out []string
	filepath.WalkDir(strings.TrimPrefix(w.tbl.Location(), "file://"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(d []time.Duration) time.Duration { return pct(d, 0.5) }

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func mustFS(t *testing.T, w *tableWriter) icebergio.IO {
	fs, err := w.tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return fs
}
