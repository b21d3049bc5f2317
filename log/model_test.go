package log

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// model is the in-memory truth the model-based test checks the log
// against: every record of every partition that may still be in the log,
// and every group's committed offsets.
type model struct {
	parts   map[string][][]Record // topic -> partition -> records by offset
	cfgs    map[string]TopicConfig
	commits map[string]map[int32]int64 // group|topic -> offsets
}

// TestModel runs seeded random sequences of produce, fetch, commit,
// cleanup (retention and compaction), clock jumps and reopen against an
// in-memory model. Set CDCD_LOG_MODEL_SEED to replay one seed.
func TestModel(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	if s := os.Getenv("CDCD_LOG_MODEL_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []uint64{seed}
	} else {
		seeds = append(seeds, uint64(time.Now().UnixNano()))
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("replay with CDCD_LOG_MODEL_SEED=%d go test -run TestModel ./log/", seed)
				}
			})
			runModel(t, seed, 400)
		})
	}
}

type modelRun struct {
	t     *testing.T
	rng   *rand.Rand
	clock *fakeClock
	dir   string
	l     *Embedded
	m     model
}

func runModel(t *testing.T, seed uint64, ops int) {
	r := &modelRun{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), clock: newClock(), dir: t.TempDir()}
	r.m = model{parts: map[string][][]Record{}, cfgs: map[string]TopicConfig{}, commits: map[string]map[int32]int64{}}
	r.open()
	defer func() { _ = r.l.Close() }()
	r.createTopic("del", TopicConfig{Partitions: 2, Retention: time.Hour, RetentionBytes: 6000})
	r.createTopic("cmp", TopicConfig{Partitions: 2, Cleanup: CleanupCompact, DeleteRetention: 30 * time.Minute})
	for i := 0; i < ops; i++ {
		switch n := r.rng.IntN(100); {
		case n < 45:
			r.produce()
		case n < 75:
			r.fetch()
		case n < 83:
			r.commit()
		case n < 90:
			r.cleanup()
		case n < 95:
			r.clock.advance(time.Duration(r.rng.IntN(40)) * time.Minute)
		case n < 97:
			r.offsetForTime()
		default:
			r.reopen()
		}
	}
	r.reopen()
	r.checkAll()
	for _, ps := range r.l.Stats().Partitions {
		t.Logf("%s/%d: start %d end %d segments %d", ps.Topic, ps.Partition, ps.Start, ps.End, ps.Segments)
	}
	for topic, parts := range r.m.parts {
		for p, recs := range parts {
			t.Logf("%s/%d: %d records remain", topic, p, len(recs))
		}
	}
}

func (r *modelRun) open() {
	l, err := Open(r.dir, Options{SegmentBytes: 1024 + int64(r.rng.IntN(2048)), IndexIntervalBytes: 64 + r.rng.IntN(512),
		CleanupInterval: -1, now: r.clock.now}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.l = l
}

func (r *modelRun) reopen() {
	if err := r.l.Close(); err != nil {
		r.t.Fatal(err)
	}
	r.open()
	if r.l.Recovery().Lost() {
		r.t.Fatalf("clean reopen lost data: %+v", r.l.Recovery())
	}
	r.checkAll()
}

func (r *modelRun) createTopic(name string, cfg TopicConfig) {
	if err := r.l.CreateTopic(context.Background(), name, cfg); err != nil {
		r.t.Fatal(err)
	}
	r.m.cfgs[name] = cfg
	r.m.parts[name] = make([][]Record, cfg.Partitions)
}

func (r *modelRun) topic() string {
	if r.rng.IntN(2) == 0 {
		return "del"
	}
	return "cmp"
}

func (r *modelRun) produce() {
	topic := r.topic()
	recs := make([]Record, 1+r.rng.IntN(8))
	for i := range recs {
		rec := Record{Key: fmt.Appendf(nil, "k%d", r.rng.IntN(12)), Partition: -1,
			Timestamp: r.clock.now().Add(-time.Duration(r.rng.IntN(120)) * time.Minute)}
		switch r.rng.IntN(10) {
		case 0:
			rec.Value = nil
		case 1:
			rec.Value = []byte{}
		default:
			rec.Value = bytes.Repeat([]byte{byte('a' + r.rng.IntN(26))}, r.rng.IntN(300))
		}
		if r.rng.IntN(4) == 0 {
			rec.Headers = []Header{{Key: "h", Value: fmt.Appendf(nil, "%d", r.rng.IntN(100))}}
		}
		if r.rng.IntN(5) == 0 {
			rec.Partition = int32(r.rng.IntN(2))
		}
		recs[i] = rec
	}
	if err := r.l.Produce(context.Background(), topic, recs); err != nil {
		r.t.Fatalf("Produce: %v", err)
	}
	for _, rec := range recs {
		p := r.m.parts[topic][rec.Partition]
		if n := len(p); n > 0 && rec.Offset <= p[n-1].Offset {
			r.t.Fatalf("offset %d after %d", rec.Offset, p[n-1].Offset)
		}
		rec.Timestamp = time.UnixMilli(rec.Timestamp.UnixMilli())
		r.m.parts[topic][rec.Partition] = append(p, rec)
	}
}

// bounds returns the log's start and end of a partition.
func (r *modelRun) bounds(topic string, p int32) (int64, int64) {
	info, err := r.l.DescribeTopic(context.Background(), topic)
	if err != nil {
		r.t.Fatal(err)
	}
	return info.Partitions[p].Start, info.Partitions[p].End
}

func (r *modelRun) fetch() {
	topic, p := r.topic(), int32(r.rng.IntN(2))
	start, end := r.bounds(topic, p)
	off := start - 2 + r.rng.Int64N(end-start+5)
	recs, err := r.l.Fetch(context.Background(), topic, p, off, FetchOptions{MaxBytes: 1 + r.rng.IntN(2000)})
	if off < start || off > end {
		if !errors.Is(err, ErrOffsetOutOfRange) {
			r.t.Fatalf("Fetch %s/%d@%d outside [%d, %d]: %v", topic, p, off, start, end, err)
		}
		return
	}
	if err != nil {
		r.t.Fatalf("Fetch %s/%d@%d: %v", topic, p, off, err)
	}
	want := r.from(topic, p, off)
	if len(want) > 0 && len(recs) == 0 {
		r.t.Fatalf("Fetch %s/%d@%d returned nothing; model has %d records", topic, p, off, len(want))
	}
	if len(recs) > len(want) {
		r.t.Fatalf("Fetch %s/%d@%d returned %d records; model has %d", topic, p, off, len(recs), len(want))
	}
	for i, got := range recs {
		r.same(got, want[i])
	}
}

// from returns the model's records of a partition at or after off.
func (r *modelRun) from(topic string, p int32, off int64) []Record {
	recs := r.m.parts[topic][p]
	i := sort.Search(len(recs), func(i int) bool { return recs[i].Offset >= off })
	return recs[i:]
}

func (r *modelRun) same(got, want Record) {
	r.t.Helper()
	ok := got.Offset == want.Offset && got.Partition == want.Partition &&
		bytes.Equal(got.Key, want.Key) && (got.Key == nil) == (want.Key == nil) &&
		bytes.Equal(got.Value, want.Value) && (got.Value == nil) == (want.Value == nil) &&
		got.Timestamp.Equal(want.Timestamp) && len(got.Headers) == len(want.Headers)
	for i := 0; ok && i < len(got.Headers); i++ {
		ok = got.Headers[i].Key == want.Headers[i].Key && bytes.Equal(got.Headers[i].Value, want.Headers[i].Value)
	}
	if !ok {
		r.t.Fatalf("record differs:\n got  %+v\n want %+v", got, want)
	}
}

func (r *modelRun) commit() {
	topic := r.topic()
	group := fmt.Sprintf("g%d", r.rng.IntN(3))
	offs := map[int32]int64{int32(r.rng.IntN(2)): r.rng.Int64N(500)}
	if err := r.l.CommitOffsets(context.Background(), group, topic, offs); err != nil {
		r.t.Fatal(err)
	}
	key := group + "|" + topic
	if r.m.commits[key] == nil {
		r.m.commits[key] = map[int32]int64{}
	}
	for p, o := range offs {
		r.m.commits[key][p] = o
	}
	r.checkCommits()
}

func (r *modelRun) checkCommits() {
	for key, want := range r.m.commits {
		var group, topic string
		for i := range key {
			if key[i] == '|' {
				group, topic = key[:i], key[i+1:]
			}
		}
		got, err := r.l.CommittedOffsets(context.Background(), group, topic)
		if err != nil || !equalOffsets(got, want) {
			r.t.Fatalf("CommittedOffsets(%s, %s) = %v, %v; want %v", group, topic, got, err, want)
		}
	}
}

func equalOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (r *modelRun) offsetForTime() {
	topic, p := r.topic(), int32(r.rng.IntN(2))
	ts := r.clock.now().Add(-time.Duration(r.rng.IntN(150)) * time.Minute)
	got, err := r.l.OffsetForTime(context.Background(), topic, p, ts)
	if err != nil {
		r.t.Fatal(err)
	}
	_, end := r.bounds(topic, p)
	target := ts.UnixMilli()
	if ts.Sub(time.UnixMilli(target)) > 0 {
		target++
	}
	want := end
	for _, rec := range r.m.parts[topic][p] {
		if rec.Timestamp.UnixMilli() >= target {
			want = rec.Offset
			break
		}
	}
	if got != want {
		r.t.Fatalf("OffsetForTime(%s/%d, %v) = %d, model says %d", topic, p, ts, got, want)
	}
}

// cleanup runs retention and compaction, checks that the log kept every
// record it must keep and nothing it never had, and adopts its choices.
func (r *modelRun) cleanup() {
	if err := r.l.Cleanup(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	for topic, parts := range r.m.parts {
		cfg := r.m.cfgs[topic]
		for p := range parts {
			got := r.readAll(topic, int32(p))
			start, _ := r.bounds(topic, int32(p))
			activeBase := r.activeBase(topic, int32(p))
			must := r.mustKeep(topic, int32(p), cfg, start, activeBase)
			have := map[int64]Record{}
			for _, rec := range got {
				have[rec.Offset] = rec
			}
			for off := range must {
				if _, ok := have[off]; !ok {
					r.t.Fatalf("%s/%d: cleanup removed offset %d it had to keep (start %d, active %d)", topic, p, off, start, activeBase)
				}
			}
			kept := r.m.parts[topic][p][:0:0]
			i := 0
			for _, want := range r.m.parts[topic][p] {
				if rec, ok := have[want.Offset]; ok {
					r.same(rec, want)
					kept = append(kept, want)
					i++
				}
			}
			if i != len(got) {
				r.t.Fatalf("%s/%d: log has %d records, only %d of them in the model", topic, p, len(got), i)
			}
			r.m.parts[topic][p] = kept
		}
	}
}

// mustKeep is the set of offsets cleanup may not remove: under delete
// everything from the start on; under compact the latest record per key
// (unless an expired tombstone) and all of the active segment.
func (r *modelRun) mustKeep(topic string, p int32, cfg TopicConfig, start, activeBase int64) map[int64]bool {
	must := map[int64]bool{}
	recs := r.m.parts[topic][p]
	if cfg.Cleanup != CleanupCompact {
		for _, rec := range recs {
			if rec.Offset >= start {
				must[rec.Offset] = true
			}
		}
		return must
	}
	latest := map[string]Record{}
	for _, rec := range recs {
		latest[string(rec.Key)] = rec
		if rec.Offset >= activeBase {
			must[rec.Offset] = true
		}
	}
	for _, rec := range latest {
		if rec.Value != nil {
			must[rec.Offset] = true
		}
	}
	return must
}

func (r *modelRun) activeBase(topic string, p int32) int64 {
	part := r.l.topics[topic].parts[p]
	part.mu.Lock()
	defer part.mu.Unlock()
	return part.segs[len(part.segs)-1].base
}

func (r *modelRun) readAll(topic string, p int32) []Record {
	start, end := r.bounds(topic, p)
	var out []Record
	for off := start; off < end; {
		recs, err := r.l.Fetch(context.Background(), topic, p, off, FetchOptions{MaxBytes: 4096})
		if err != nil {
			r.t.Fatal(err)
		}
		if len(recs) == 0 {
			break
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}

// checkAll compares every partition and commit with the model.
func (r *modelRun) checkAll() {
	for topic, parts := range r.m.parts {
		for p := range parts {
			got := r.readAll(topic, int32(p))
			want := r.m.parts[topic][p]
			if len(got) != len(want) {
				r.t.Fatalf("%s/%d: log has %d records, model %d", topic, p, len(got), len(want))
			}
			for i := range got {
				r.same(got[i], want[i])
			}
		}
	}
	r.checkCommits()
}
