package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// openLog opens an embedded log in a temporary directory.
func openLog(t *testing.T, dir string) *log.Embedded {
	t.Helper()
	lg, err := log.Open(dir, log.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return lg
}

// memState is a State in memory.
type memState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memState) Load(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[k], nil
}

func (s *memState) Save(_ context.Context, k string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[k] = append([]byte(nil), v...)
	return nil
}

// recorder is the next Emitter: it keeps what it is given.
type recorder struct {
	mu      sync.Mutex
	changes []source.Change
	fail    error
}

func (r *recorder) Emit(_ context.Context, batch []source.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.changes = append(r.changes, batch...)
	return r.fail
}

// notified is a next Emitter that listens for the source's catch-up.
type notified struct {
	recorder
	caughtUp int
}

func (n *notified) CaughtUp() { n.caughtUp++ }

// TestRelayPassesCatchUpOn: the source's catch-up notice reaches the
// mirror's Emitter through the relay (without it a backlog's tail waited
// out the mirror's commit interval when an outbox was configured).
func TestRelayPassesCatchUpOn(t *testing.T) {
	lg := openLog(t, t.TempDir())
	next := &notified{}
	r := newTestRelay(t, lg, next, false, NewLogTarget(lg, log.TopicConfig{Partitions: 1}))
	var e source.Emitter = r
	n, ok := e.(source.CatchUpNotifier)
	if !ok {
		t.Fatal("the relay does not take a catch-up notice")
	}
	n.CaughtUp()
	if next.caughtUp != 1 {
		t.Fatalf("the next Emitter heard %d catch-ups, want 1", next.caughtUp)
	}
	// A next Emitter that does not listen is fine.
	newTestRelay(t, lg, &recorder{}, false, NewLogTarget(lg, log.TopicConfig{Partitions: 1})).CaughtUp()
}

// readTopic returns every record of every partition of topic.
func readTopic(t *testing.T, lg log.Log, topic string) []log.Record {
	t.Helper()
	info, err := lg.DescribeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []log.Record
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(t.Context(), topic, p.Partition, off, log.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out = append(out, recs...)
			off = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}

// event is an insert into the outbox table at position (lsn, idx).
func event(lsn uint64, idx uint32, aggType, aggID, typ string) source.Change {
	return source.Change{Table: outboxTable, Op: source.OpCreate, After: row(uuid.New(), aggType, aggID, typ, fmt.Sprintf(`{"n":%d}`, idx), nil),
		Pos: pgpos.New(lsn, idx), LSN: lsn, CommitTime: time.Now()}
}

func newTestRelay(t *testing.T, lg log.Log, next source.Emitter, mirrored bool, targets ...Target) *Relay {
	t.Helper()
	if err := lg.CreateTopic(t.Context(), "_dead", log.TopicConfig{Partitions: 1}); err != nil && !errors.Is(err, log.ErrTopicExists) {
		t.Fatal(err)
	}
	r, err := New(Config{Route: Route{Table: "public.outbox", MessagePrefix: "app"}, Mirrored: mirrored, Log: lg, DeadLetterTopic: "_dead"},
		next, targets, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRelayLogExactlyOnce: events go to their topics keyed and placed by
// aggregate id, in order; the other changes go on; after a restart (a new
// relay on the same log) the batch the source sends again is dropped.
func TestRelayLogExactlyOnce(t *testing.T) {
	dir := t.TempDir()
	lg := openLog(t, dir)
	next := &recorder{}
	r := newTestRelay(t, lg, next, false, NewLogTarget(lg, log.TopicConfig{Partitions: 4}))
	orders := &schema.Table{Namespace: "public", Name: "orders"}
	var batch []source.Change
	for i := range 40 {
		batch = append(batch, event(100, uint32(2*i), "Order", fmt.Sprint(i%5), "Placed"))
		batch = append(batch, source.Change{Table: orders, Op: source.OpCreate, Pos: pgpos.New(100, uint32(2*i+1))})
	}
	batch = append(batch, source.Change{Table: outboxTable, Op: source.OpDelete, Before: batch[0].After, Pos: pgpos.New(100, 80)})
	if err := r.Emit(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if len(next.changes) != 40 {
		t.Fatalf("the next emitter got %d changes, want the 40 of other tables", len(next.changes))
	}
	check := func(lg log.Log) {
		t.Helper()
		recs := readTopic(t, lg, "outbox.Order")
		if len(recs) != 40 {
			t.Fatalf("%d records in outbox.Order, want 40", len(recs))
		}
		last := map[string]source.Position{}
		for _, rec := range recs {
			if want := log.PartitionFor(rec.Key, 4); rec.Partition != want {
				t.Errorf("aggregate %s in partition %d, want %d (murmur2 of the key)", rec.Key, rec.Partition, want)
			}
			pos := source.Position(rec.Header(schema.HeaderPosition))
			if prev := last[string(rec.Key)]; prev != nil && pos.Compare(prev) <= 0 {
				t.Errorf("aggregate %s out of order", rec.Key)
			}
			last[string(rec.Key)] = pos
		}
	}
	check(lg)
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	// The source sends the batch again after a crash, plus one new event.
	lg = openLog(t, dir)
	defer lg.Close()
	next = &recorder{}
	target := NewLogTarget(lg, log.TopicConfig{Partitions: 4})
	r = newTestRelay(t, lg, next, false, target)
	if err := r.Emit(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	check(lg)
	if d := target.Stats().Duplicates.Load(); d != 40 {
		t.Errorf("%d duplicates dropped, want 40", d)
	}
	if err := r.Emit(t.Context(), []source.Change{event(101, 0, "Order", "1", "Shipped")}); err != nil {
		t.Fatal(err)
	}
	if n := len(readTopic(t, lg, "outbox.Order")); n != 41 {
		t.Errorf("%d records after a new event, want 41", n)
	}
}

// TestRelayMirroredAndMalformed: a mirrored outbox table's changes go on
// too; an event that cannot be routed goes to the dead-letter topic with
// the reason, and the batch goes on.
func TestRelayMirroredAndMalformed(t *testing.T) {
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	next := &recorder{}
	r := newTestRelay(t, lg, next, true, NewLogTarget(lg, log.TopicConfig{Partitions: 2}))
	bad := event(5, 1, "Order", "", "Placed")
	batch := []source.Change{event(5, 0, "Order", "a", "Placed"), bad,
		{Message: &source.Message{Prefix: "app", Content: []byte("not json")}, Pos: pgpos.New(5, 2)}}
	if err := r.Emit(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if len(next.changes) != 2 {
		t.Errorf("the next emitter got %d changes, want the table's 2 (not the message)", len(next.changes))
	}
	dead := readTopic(t, lg, "_dead")
	if len(dead) != 2 || r.Stats().Malformed.Load() != 2 || r.Stats().Events.Load() != 1 {
		t.Fatalf("%d dead letters, stats %d malformed %d events", len(dead), r.Stats().Malformed.Load(), r.Stats().Events.Load())
	}
	if e := string(dead[0].Header(HeaderError)); e == "" || string(dead[1].Value) != "not json" {
		t.Errorf("dead letters: %q / %q", e, dead[1].Value)
	}
}

// blockingTarget waits until released; it fails when told to.
type blockingTarget struct {
	release chan struct{}
	fail    error
	got     int
	stats   TargetStats
}

func (b *blockingTarget) Name() string        { return "blocking" }
func (b *blockingTarget) Stats() *TargetStats { return &b.stats }
func (b *blockingTarget) Deliver(ctx context.Context, msgs []Message) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	b.got += len(msgs)
	return b.fail
}

// TestRelayWaitsForEveryTarget: Emit returns only when every target has
// the batch's events (so the source confirms nothing earlier), and fails
// when one target fails.
func TestRelayWaitsForEveryTarget(t *testing.T) {
	lg := openLog(t, t.TempDir())
	defer lg.Close()
	slow := &blockingTarget{release: make(chan struct{})}
	r := newTestRelay(t, lg, &recorder{}, false, NewLogTarget(lg, log.TopicConfig{Partitions: 1}), slow)
	done := make(chan error, 1)
	go func() { done <- r.Emit(t.Context(), []source.Change{event(9, 0, "A", "1", "T")}) }()
	select {
	case err := <-done:
		t.Fatalf("Emit returned (%v) before the slow target had the event", err)
	case <-time.After(200 * time.Millisecond):
	}
	// The event's wait began when Emit took it, a moment after the test's
	// 200 ms began: half of them is a bound a loaded machine keeps.
	if lag := r.Lag(time.Now()); lag < 100*time.Millisecond {
		t.Errorf("lag %s while an event waits 200ms", lag)
	}
	close(slow.release)
	if err := <-done; err != nil || slow.got != 1 {
		t.Fatalf("Emit: %v, target got %d", err, slow.got)
	}
	if lag := r.Lag(time.Now()); lag != 0 {
		t.Errorf("lag %s with nothing pending", lag)
	}
	slow.fail = errors.New("boom")
	if err := r.Emit(t.Context(), []source.Change{event(10, 0, "A", "1", "T")}); err == nil {
		t.Fatal("Emit succeeded although a target failed")
	}
}
