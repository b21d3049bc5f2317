package iceberg

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// feed produces kv changes into a log topic "t", as the emitter does.
type feed struct {
	t        *testing.T
	lg       log.Log
	reg      *schema.Registry
	kid, vid uint32
	parts    int32
	pos      int
}

// newFeed opens (or creates) the log in dir with topic "t"; reg is shared
// by every log of a test (the sink decodes through it).
func newFeed(t *testing.T, dir string, reg *schema.Registry, parts int32) *feed {
	lg, err := log.Open(dir, log.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	if err := lg.CreateTopic(t.Context(), "t", log.TopicConfig{Partitions: parts}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	f := &feed{t: t, lg: lg, reg: reg, parts: parts}
	ks, _ := schema.KeySchema(kv, "t")
	vs, _ := schema.ValueSchema(kv, "t")
	if f.kid, err = reg.Register(t.Context(), "t-key", ks); err != nil {
		t.Fatal(err)
	}
	if f.vid, err = reg.Register(t.Context(), "t-value", vs); err != nil {
		t.Fatal(err)
	}
	return f
}

func memRegistry(t *testing.T) *schema.Registry {
	reg, err := schema.OpenRegistry(t.Context(), &memStoreBench{})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func (f *feed) position() []byte {
	f.pos++
	return []byte(fmt.Sprintf("%012d", f.pos))
}

// encode frames a kv change's key (from its after-image) and envelope as
// the feed's records carry them.
func (f *feed) encode(env *schema.Envelope) (key, value []byte) {
	f.t.Helper()
	v, err := schema.AppendEnvelope(schema.AppendFrame(nil, f.vid), kv, env)
	if err != nil {
		f.t.Fatal(err)
	}
	k, err := schema.AppendKey(schema.AppendFrame(nil, f.kid), kv, env.After)
	if err != nil {
		f.t.Fatal(err)
	}
	return k, v
}

// upsert produces an insert of key id.
func (f *feed) upsert(ids ...int64) {
	f.t.Helper()
	for _, id := range ids {
		pos := f.position()
		row := []any{id, fmt.Sprintf("v%d", id), int64(id % 7)}
		k, v := f.encode(&schema.Envelope{Op: 'c', After: row, Source: schema.SourceInfo{Position: pos}})
		rec := log.Record{Key: k, Value: v, Partition: log.PartitionFor(k, f.parts), Headers: []log.Header{{Key: schema.HeaderPosition, Value: pos}}}
		if err := f.lg.Produce(f.t.Context(), "t", []log.Record{rec}); err != nil {
			f.t.Fatal(err)
		}
	}
}

// truncate produces a truncate into every partition; a non-empty reset
// makes it a reset marker of that run.
func (f *feed) truncate(reset string) {
	f.t.Helper()
	parts := make([]int32, f.parts)
	for p := range parts {
		parts[p] = int32(p)
	}
	f.truncateIn(reset, parts...)
}

// truncateIn produces a truncate into the given partitions only: a produce
// into every partition that a crash cut short.
func (f *feed) truncateIn(reset string, parts ...int32) {
	f.t.Helper()
	pos := f.position()
	env := schema.Envelope{Op: 't', Source: schema.SourceInfo{Position: pos}}
	v, err := schema.AppendEnvelope(schema.AppendFrame(nil, f.vid), kv, &env)
	if err != nil {
		f.t.Fatal(err)
	}
	h := []log.Header{{Key: schema.HeaderPosition, Value: pos}}
	if reset != "" {
		h = append(h, log.Header{Key: schema.HeaderReset, Value: []byte(reset)})
	}
	recs := make([]log.Record, len(parts))
	for i, p := range parts {
		recs[i] = log.Record{Value: v, Headers: h, Partition: p}
	}
	if err := f.lg.Produce(f.t.Context(), "t", recs); err != nil {
		f.t.Fatal(err)
	}
}

// end is the topic's end offsets.
func (f *feed) end() []int64 {
	info, err := f.lg.DescribeTopic(f.t.Context(), "t")
	if err != nil {
		f.t.Fatal(err)
	}
	out := make([]int64, len(info.Partitions))
	for i, p := range info.Partitions {
		out[i] = p.End
	}
	return out
}

// runningSink runs a sink of table ns.tbl over lg until the test ends or
// stop is called.
type runningSink struct {
	s    *Sink
	stop func()
}

func startSink(t *testing.T, cat catalog.Catalog, lg log.Log, reg Registry, mode, indexDir string) *runningSink {
	s := New(Config{Pipeline: "p", Group: "g", Mode: mode, IndexDir: indexDir,
		Tables:         []TableConfig{{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}},
		CommitInterval: 50 * time.Millisecond, RetryInterval: 200 * time.Millisecond,
		Compaction: CompactionConfig{Disabled: true}}, cat, lg, reg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	r := &runningSink{s: s}
	stopped := false
	r.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("sink: %v", err)
			}
		}
	}
	t.Cleanup(r.stop)
	return r
}

// waitFor polls cond for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// committedTo reports whether the sink's table holds offsets at least end.
func (r *runningSink) committedTo(end []int64) bool {
	c := r.s.Stats()[0].Committed.Load()
	if c == nil || len(*c) != len(end) {
		return false
	}
	for p := range end {
		if (*c)[p] < end[p] {
			return false
		}
	}
	return true
}

func (r *runningSink) paused() string {
	if p := r.s.Stats()[0].Paused.Load(); p != nil {
		return *p
	}
	return ""
}

// keys scans the table's ids.
func tableKeys(t *testing.T, cat catalog.Catalog) map[int64]bool {
	out := map[int64]bool{}
	for id := range scanTable(t, cat, table.Identifier{"ns", "tbl"}) {
		out[id] = true
	}
	return out
}

func wantKeys(t *testing.T, got map[int64]bool, ids ...int64) {
	t.Helper()
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("table holds %v, want %v", got, want)
	}
}

func offsetsSnapshot(t *testing.T, cat catalog.Catalog) *table.Snapshot {
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"ns", "tbl"})
	if err != nil {
		t.Fatal(err)
	}
	_, snap, err := committedOffsets(tbl, "p", 3)
	if err != nil || snap == nil {
		t.Fatalf("offsets: %v %v", snap, err)
	}
	return snap
}

// TestReplacedLogPausesUntilReset: a table whose offsets belong to another
// log topic (the log directory was replaced) never reads the new log's
// offsets as its own: it pauses, naming both topics and the fix; reset
// markers produced into the new log (a re-snapshot) resume it: the table
// is truncated there and rebuilt from what follows, even when a partition's
// first marker is one a crash left in some partitions only.
func TestReplacedLogPausesUntilReset(t *testing.T) {
	for _, mode := range []string{ModeUpsert, ModeAppend} {
		t.Run(mode, func(t *testing.T) {
			cat := testCatalog(t)
			reg := memRegistry(t)
			indexDir := t.TempDir()
			a := newFeed(t, t.TempDir(), reg, 3)
			a.upsert(1, 2, 3, 4, 5, 6)
			r := startSink(t, cat, a.lg, reg, mode, indexDir)
			waitFor(t, "the first log committed", func() bool { return r.committedTo(a.end()) })
			r.stop()
			infoA, _ := a.lg.DescribeTopic(t.Context(), "t")
			if got := topicOf(offsetsSnapshot(t, cat)); got != infoA.ID || got == "" {
				t.Fatalf("cdcd.topic-id %q, want the log's %q", got, infoA.ID)
			}

			// A new log: more records than the table has read in every
			// partition, so its offsets would pass for the table's.
			b := newFeed(t, t.TempDir(), reg, 3)
			b.upsert(101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115)
			infoB, _ := b.lg.DescribeTopic(t.Context(), "t")
			r = startSink(t, cat, b.lg, reg, mode, indexDir)
			waitFor(t, "paused", func() bool { return r.paused() != "" })
			why := r.paused()
			for _, s := range []string{infoA.ID, infoB.ID, "cdcd snapshot -c FILE --replace ns.tbl"} {
				if !strings.Contains(why, s) && !strings.Contains(*r.s.Stats()[0].PausedFix.Load(), s) {
					t.Errorf("pause reason %q lacks %q", why, s)
				}
			}
			time.Sleep(500 * time.Millisecond) // a few retries: still paused, nothing read
			if r.paused() == "" {
				t.Fatal("resumed without a reset marker")
			}
			if mode == ModeUpsert {
				wantKeys(t, tableKeys(t, cat), 1, 2, 3, 4, 5, 6)
			}

			// A re-snapshot whose marker a crash left in partition 0 only,
			// its rows, then the re-snapshot redone: reset markers, then
			// the table's rows. The partial marker is moot.
			b.truncateIn("run-0", 0)
			b.upsert(150, 151, 152)
			b.truncate("run-1")
			b.upsert(201, 202, 203)
			waitFor(t, "resumed and caught up", func() bool { return r.paused() == "" && r.committedTo(b.end()) })
			r.stop()
			if got := topicOf(offsetsSnapshot(t, cat)); got != infoB.ID {
				t.Errorf("cdcd.topic-id %q after the reset, want %q", got, infoB.ID)
			}
			if mode == ModeUpsert {
				wantKeys(t, tableKeys(t, cat), 201, 202, 203)
			}
		})
	}
}

// lossyLog reports offsets [from, to) of one partition as lost, as the log
// does for a quarantined range.
type lossyLog struct {
	log.Log
	p        int32
	from, to int64
}

func (l lossyLog) Fetch(ctx context.Context, topic string, p int32, off int64, opts log.FetchOptions) ([]log.Record, error) {
	if p == l.p && off >= l.from && off < l.to {
		return nil, &log.DataLossError{Topic: topic, Partition: p, From: l.from, To: l.to, Reason: "test: damaged segment"}
	}
	recs, err := l.Log.Fetch(ctx, topic, p, off, opts)
	if p == l.p && off < l.from {
		for i := range recs {
			if recs[i].Offset >= l.from {
				return recs[:i], err
			}
		}
	}
	return recs, err
}

// TestDataLossPausesUntilReset: offsets the log lost pause the table,
// naming the partition and the range; it never passes them. A reset
// marker after the lost range resumes it (an earlier plain truncate in the
// other partitions is moot: the marker truncates after it).
func TestDataLossPausesUntilReset(t *testing.T) {
	cat := testCatalog(t)
	reg := memRegistry(t)
	f := newFeed(t, t.TempDir(), reg, 3)
	ids := make([]int64, 30)
	for i := range ids {
		ids[i] = int64(i + 1)
	}
	f.upsert(ids...)
	end := f.end()
	// Partition 1 loses its middle, then receives more.
	lost := lossyLog{Log: f.lg, p: 1, from: end[1] / 2, to: end[1]}
	f.upsert(31, 32, 33, 34, 35, 36)
	r := startSink(t, cat, lost, reg, ModeUpsert, t.TempDir())
	waitFor(t, "paused", func() bool { return r.paused() != "" })
	why := r.paused()
	if !strings.Contains(why, fmt.Sprintf("[%d, %d)", lost.from, lost.to)) || !strings.Contains(why, "partition 1") {
		t.Errorf("pause reason %q does not name the lost range", why)
	}
	if c := *r.s.Stats()[0].Committed.Load(); c[1] > lost.from {
		t.Fatalf("the table passed the lost offsets: partition 1 at %d, lost from %d", c[1], lost.from)
	}
	f.truncate("")
	f.upsert(40, 41)
	time.Sleep(500 * time.Millisecond)
	if r.paused() == "" {
		t.Fatal("resumed at a plain truncate")
	}
	f.truncate("run-2")
	f.upsert(50, 51, 52, 53)
	waitFor(t, "resumed and caught up", func() bool { return r.paused() == "" && r.committedTo(f.end()) })
	r.stop()
	wantKeys(t, tableKeys(t, cat), 50, 51, 52, 53)
}

// TestLegacyTableAdoptsTopicID: a table whose offsets carry no topic id
// (written before cdcd stored one) takes the log's at its next commit.
func TestLegacyTableAdoptsTopicID(t *testing.T) {
	cat := testCatalog(t)
	reg := memRegistry(t)
	dir := t.TempDir()
	f := newFeed(t, filepath.Join(dir, "log"), reg, 3)
	f.upsert(1, 2, 3)
	// An old sink: the same commits without the topic id.
	w := newWriter(t, cat, "p", 3)
	w.s.lg, w.s.reg = f.lg, reg
	w.s.cfg.Mode, w.s.cfg.IndexDir = ModeUpsert, filepath.Join(dir, "index")
	w.buf = []change{}
	for p := range int32(3) {
		recs, err := f.lg.Fetch(t.Context(), "t", p, 0, log.FetchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w.tables = map[uint32]*schema.Table{}
		for i := range recs {
			c, err := w.decode(&recs[i])
			if err != nil {
				t.Fatal(err)
			}
			w.buf = append(w.buf, c)
		}
	}
	copy(w.next, f.end())
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.close()
	if got := topicOf(offsetsSnapshot(t, cat)); got != "" {
		t.Fatalf("the old sink's commit carries topic id %q", got)
	}
	f.upsert(4)
	r := startSink(t, cat, f.lg, reg, ModeUpsert, filepath.Join(dir, "index"))
	waitFor(t, "caught up", func() bool { return r.committedTo(f.end()) })
	r.stop()
	info, _ := f.lg.DescribeTopic(t.Context(), "t")
	if got := topicOf(offsetsSnapshot(t, cat)); got != info.ID {
		t.Errorf("cdcd.topic-id %q, want the adopted %q", got, info.ID)
	}
	wantKeys(t, tableKeys(t, cat), 1, 2, 3, 4)
}

// TestPartialTruncateCopies: a truncate produced into every partition but
// cut short by a crash, in some partitions only. A reset marker so cut is
// moot (its run is redone at a later position: a load after its slot was
// made again, a re-snapshot's marker), and so is a plain truncate before a
// reset marker, whichever partitions hold it and whichever the sink reads
// first. A plain truncate missing from a partition that holds a later one
// pauses the table saying so (plain truncates are replayed at their own
// position, so this is never a crash's doing): it is never passed over
// silently, nor waited for without end, and a re-snapshot's marker after it
// resumes the table. A partial marker with nothing after it is moot as soon
// as a partition without it holds a later position.
func TestPartialTruncateCopies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parts   []int32 // the partial copy's partitions
		reset   string  // the partial copy's reset id ("": a plain truncate)
		then    string  // the complete truncate's reset id
		none    bool    // no complete truncate follows
		pausing bool
	}{
		{name: "reset-missing-from-one", parts: []int32{0, 2, 3}, reset: "load-1", then: "load-2"},
		{name: "reset-in-one", parts: []int32{1}, reset: "load-1", then: "load-2"},
		{name: "plain-then-reset", parts: []int32{0, 2, 3}, then: "load-2"},
		{name: "reset-then-plain", parts: []int32{0, 2, 3}, reset: "load-1"},
		{name: "reset-in-one-then-plain", parts: []int32{2}, reset: "load-1"},
		{name: "plain-then-plain", parts: []int32{0, 2, 3}, pausing: true},
		{name: "reset-alone", parts: []int32{0, 2, 3}, reset: "load-1", none: true},
		{name: "reset-in-one-alone", parts: []int32{1}, reset: "load-1", none: true},
		{name: "plain-alone", parts: []int32{0, 2, 3}, none: true, pausing: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := testCatalog(t)
			reg := memRegistry(t)
			f := newFeed(t, t.TempDir(), reg, 4)
			f.upsert(1, 2, 3, 4, 5, 6, 7, 8)
			f.truncateIn(tc.reset, tc.parts...)
			f.upsert(11, 12, 13, 14, 15, 16) // the abandoned run's rows
			if !tc.none {
				f.truncate(tc.then)
			}
			f.upsert(20, 21, 22, 23, 24, 25)
			r := startSink(t, cat, f.lg, reg, ModeUpsert, t.TempDir())
			if tc.pausing {
				waitFor(t, "paused", func() bool { return r.paused() != "" })
				if why := r.paused(); !strings.Contains(why, "is missing from") {
					t.Errorf("pause reason %q does not say a truncate is missing from some partitions", why)
				}
				// The fix the pause names: a re-snapshot, whose reset
				// marker replaces the table.
				f.truncate("resnapshot")
				f.upsert(30, 31, 32)
				waitFor(t, "resumed and caught up", func() bool { return r.paused() == "" && r.committedTo(f.end()) })
				r.stop()
				wantKeys(t, tableKeys(t, cat), 30, 31, 32)
				return
			}
			waitFor(t, "caught up", func() bool { return r.committedTo(f.end()) || r.paused() != "" })
			if why := r.paused(); why != "" {
				t.Fatalf("paused: %s", why)
			}
			r.stop()
			if tc.none { // the partial marker is moot: nothing truncated
				wantKeys(t, tableKeys(t, cat), 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15, 16, 20, 21, 22, 23, 24, 25)
				return
			}
			wantKeys(t, tableKeys(t, cat), 20, 21, 22, 23, 24, 25)
		})
	}
}
