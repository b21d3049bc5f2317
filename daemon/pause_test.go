package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// restarted is a new emitter over e's log and state, as after a restart.
func restarted(t *testing.T, e *emitter, configured ...string) *emitter {
	t.Helper()
	e2 := &emitter{lg: e.lg, reg: e.reg, state: e.state, pipeline: "p", db: "db", connector: "postgresql",
		topicOf: e.topicOf, partitions: e.partitions, logger: e.logger,
		codecs: map[*schema.Table]*tableCodec{}, last: map[string][]source.Position{}, paused: map[string]*pauseState{},
		free: make(chan *batchRecords, 2)}
	if err := e2.loadPaused(t.Context(), configured); err != nil {
		t.Fatal(err)
	}
	return e2
}

// records returns every record of topic, partition by partition.
func records(t *testing.T, lg log.Log, topic string) []log.Record {
	t.Helper()
	info, err := lg.DescribeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []log.Record
	for _, p := range info.Partitions {
		recs, err := lg.Fetch(t.Context(), topic, p.Partition, p.Start, log.FetchOptions{MaxBytes: 16 << 20})
		if err != nil && p.End > p.Start {
			t.Fatal(err)
		}
		out = append(out, recs...)
	}
	return out
}

// positions lists the index (the low 4 bytes) of each record's position.
func positions(t *testing.T, recs []log.Record) []int {
	t.Helper()
	var out []int
	for _, r := range recs {
		_, idx, err := pgpos.Parse(source.Position(r.Header(HeaderPosition)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int(idx))
	}
	return out
}

func sameInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// faultTables are two tables of one emitter: a holds a numeric(10,2), b
// is plain.
func faultTables(t *testing.T) (e *emitter, a, b *schema.Table) {
	t.Helper()
	e, lg := newTestEmitter(t, "a", 1)
	if err := ensureTopic(t.Context(), lg, "p.public.b", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	a = &schema.Table{Namespace: "public", Name: "a", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "price", Kind: schema.Decimal, Precision: 10, Scale: 2, Nullable: true}}, Key: []int{0}}
	b = &schema.Table{Namespace: "public", Name: "b", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	return e, a, b
}

// TestValueFaultPausesOneTable: a NaN in a numeric(10,2) and a change the
// source marked faulty stop their table alone — the change and the table's
// later ones held in order, the pause naming key, column, value and fix —
// while the other table flows, across a restart; each skip sends one
// faulty change to the dead-letter topic and replays up to the next one,
// and the table then flows again.
func TestValueFaultPausesOneTable(t *testing.T) {
	ctx := t.Context()
	e, a, b := faultTables(t)
	now := time.Now()
	ch := func(tb *schema.Table, idx uint32, row []any) source.Change {
		return source.Change{Table: tb, Op: source.OpCreate, After: row, Pos: pgpos.New(500, idx), LSN: 500, TxID: 9, CommitTime: now}
	}
	marked := ch(a, 4, []any{int64(4), nil})
	marked.Fault = &source.Fault{Reason: "timestamp past year 294247", Column: "at", Value: "294248-01-01 00:00:00+00", Fix: "skip it"}
	batch := []source.Change{
		ch(a, 0, []any{int64(1), "1.50"}),
		ch(a, 1, []any{int64(2), "NaN"}),
		ch(b, 2, []any{int64(10)}),
		ch(a, 3, []any{int64(3), "2.00"}),
		marked,
		ch(b, 5, []any{int64(11)}),
	}
	if err := e.Emit(ctx, batch); err != nil {
		t.Fatalf("a faulty row failed the batch: %v", err)
	}
	if got := positions(t, records(t, e.lg, "p.public.a")); !sameInts(got, []int{0}) {
		t.Errorf("topic a holds %v, want only the change before the fault", got)
	}
	if got := positions(t, records(t, e.lg, "p.public.b")); !sameInts(got, []int{2, 5}) {
		t.Errorf("topic b holds %v, want both of its changes", got)
	}
	held := records(t, e.lg, heldTopic("p.public.a"))
	if got := positions(t, held); !sameInts(got, []int{1, 3, 4}) {
		t.Fatalf("holding topic holds %v, want 1 (fault), 3, 4 (fault)", got)
	}
	if held[0].Header(schema.HeaderFault) == nil || held[1].Header(schema.HeaderFault) != nil || held[2].Header(schema.HeaderFault) == nil {
		t.Fatal("the faulty changes are not fault records, or the good one is")
	}
	var doc faultDoc
	if err := json.Unmarshal(held[0].Value, &doc); err != nil || doc.Column != "price" || doc.Value != "NaN" || string(held[0].Key) != `{"id":2}` {
		t.Errorf("fault record: key %s doc %+v (%v)", held[0].Key, doc, err)
	}
	p := e.Paused()
	if len(p) != 1 || p[0].Kind != pauseValue || p[0].Key != `{"id":2}` || p[0].Column != "price" || p[0].Value != "NaN" || p[0].Held != 3 ||
		!strings.Contains(p[0].Reason, "NaN") || !strings.Contains(p[0].Resolve, "cdcd table skip -c FILE public.a") ||
		!strings.Contains(p[0].Resolve, "cdcd snapshot -c FILE --replace public.a") {
		t.Fatalf("paused: %+v", p)
	}

	// A restart keeps the pause; the source sending the batch again adds
	// nothing; the registry does not resume a value pause.
	e = restarted(t, e, "p.public.a", "p.public.b")
	if err := e.Emit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if n := len(records(t, e.lg, heldTopic("p.public.a"))); n != 3 {
		t.Fatalf("holding topic has %d records after the batch came again, want 3", n)
	}
	if err := e.tryResume(ctx); err != nil || e.paused["p.public.a"] == nil {
		t.Fatalf("a value pause resumed without a skip (%v)", err)
	}

	// Skip 1: the NaN goes to the dead-letter topic, 3 is replayed, and
	// the marked change stops the table again.
	res, err := e.skip(ctx, "p.public.a")
	if err != nil || res.Resumed || res.Paused == nil || res.Paused.Column != "at" || res.Paused.Value != "294248-01-01 00:00:00+00" {
		t.Fatalf("first skip: %+v, %v", res, err)
	}
	if got := positions(t, records(t, e.lg, deadTopic("p.public.a"))); !sameInts(got, []int{1}) {
		t.Errorf("dead-letter topic holds %v, want the NaN change", got)
	}
	if got := positions(t, records(t, e.lg, "p.public.a")); !sameInts(got, []int{0, 3}) {
		t.Errorf("topic a holds %v after the first skip, want 0, 3", got)
	}
	// Skip 2: the table resumes and its next changes go to the topic.
	if res, err := e.skip(ctx, "p.public.a"); err != nil || !res.Resumed {
		t.Fatalf("second skip: %+v, %v", res, err)
	}
	if err := e.Emit(ctx, []source.Change{{Table: a, Op: source.OpCreate, After: []any{int64(5), "1.00"}, Pos: pgpos.New(600, 0), LSN: 600, CommitTime: now}}); err != nil {
		t.Fatal(err)
	}
	if got := positions(t, records(t, e.lg, "p.public.a")); !sameInts(got, []int{0, 3, 0}) {
		t.Errorf("topic a holds %v after resuming, want 0, 3 and the new change", got)
	}
	if got := positions(t, records(t, e.lg, deadTopic("p.public.a"))); !sameInts(got, []int{1, 4}) {
		t.Errorf("dead-letter topic holds %v, want both faulty changes", got)
	}
	if _, err := e.skip(ctx, "p.public.a"); err == nil {
		t.Error("skipping a table that is not paused succeeded")
	}
}

// TestTableFaultPause: a fault of a whole table (no row) pauses it and
// holds its later changes; the source saying so again changes nothing; a
// skip accepts the gap (recorded in the dead-letter topic) and replays.
// A pause of a table that left the config is dropped at the next start.
func TestTableFaultPause(t *testing.T) {
	ctx := t.Context()
	e, a, b := faultTables(t)
	now := time.Now()
	stop := source.Change{Table: &schema.Table{Namespace: "public", Name: "a"}, Pos: pgpos.New(700, 0), LSN: 700, CommitTime: now,
		Fault: &source.Fault{Reason: "table public.a was dropped from publication pub", Fix: "ALTER PUBLICATION pub ADD TABLE public.a; then re-snapshot"}}
	batch := []source.Change{stop,
		{Table: a, Op: source.OpCreate, After: []any{int64(1), "1.00"}, Pos: pgpos.New(700, 1), LSN: 700, CommitTime: now},
		{Table: b, Op: source.OpCreate, After: []any{int64(1)}, Pos: pgpos.New(700, 2), LSN: 700, CommitTime: now}}
	if err := e.Emit(ctx, batch); err != nil {
		t.Fatal(err)
	}
	ps := e.pauseOf("p.public.a")
	if ps == nil || ps.kind() != pauseTable || !strings.Contains(ps.Reason, "dropped from publication") || !strings.Contains(ps.Fix, "ALTER PUBLICATION") {
		t.Fatalf("pause: %+v", ps)
	}
	since := ps.Since
	if err := e.Emit(ctx, []source.Change{stop}); err != nil {
		t.Fatal(err)
	}
	if ps := e.pauseOf("p.public.a"); !ps.Since.Equal(since) {
		t.Error("the same fault again restarted the pause")
	}
	if got := positions(t, records(t, e.lg, "p.public.b")); !sameInts(got, []int{2}) {
		t.Errorf("topic b holds %v", got)
	}
	if n := len(records(t, e.lg, "p.public.a")); n != 0 {
		t.Errorf("topic a got %d records while paused", n)
	}
	res, err := e.skip(ctx, "p.public.a")
	if err != nil || !res.Resumed || !strings.Contains(res.Skipped, "the gap") {
		t.Fatalf("skip: %+v %v", res, err)
	}
	dead := records(t, e.lg, deadTopic("p.public.a"))
	if len(dead) != 1 || !strings.Contains(string(dead[0].Value), `"accepted_gap":true`) {
		t.Errorf("dead-letter topic: %d records", len(dead))
	}
	if got := positions(t, records(t, e.lg, "p.public.a")); !sameInts(got, []int{1}) {
		t.Errorf("topic a holds %v after the skip, want the held change", got)
	}

	// Paused again, then restarted without the table in the config.
	if err := e.Emit(ctx, []source.Change{{Table: stop.Table, Pos: pgpos.New(800, 0), Fault: stop.Fault}}); err != nil {
		t.Fatal(err)
	}
	if e = restarted(t, e, "p.public.b"); len(e.paused) != 0 {
		t.Fatal("the pause of an unconfigured table survived the restart")
	}
	if e = restarted(t, e, "p.public.a", "p.public.b"); len(e.paused) != 0 {
		t.Fatal("the dropped pause came back")
	}
}
