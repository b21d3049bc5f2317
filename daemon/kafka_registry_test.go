package daemon

import (
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// TestSchemaPauseWithRemoteRegistry: on the Kafka log with an external
// registry, a schema the registry refuses pauses its table alone, as with
// the embedded registry: its changes are held in order, the pause names
// the column, the other table flows; the registry still refusing keeps it
// paused; resolving it — cdcd's accept through the admin routes, or the
// operator's own compatibility change at the registry — resumes the table
// with every change once and in order.
func TestSchemaPauseWithRemoteRegistry(t *testing.T) {
	ctx := t.Context()
	brokers, _ := kafkatest.Brokers(t)
	lg := openKafka(t, brokers, "cdcd-p")
	// The external registry: cdcd's own registry API over a store of its
	// own, behind HTTP.
	extLog, err := log.Open(t.TempDir(), log.Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer extLog.Close()
	if err := ensureTopic(ctx, extLog, TopicSchemas, log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	ext, err := schema.OpenRegistry(ctx, schemaStore{extLog})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(schema.NewHandler(ext))
	defer srv.Close()
	rem, err := schema.NewRemote(schema.RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	e := emitterOn(t, lg, "a", 1)
	e.reg = rem
	if err := ensureTopic(ctx, lg, "p.public.b", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	col := func(k schema.Kind) []schema.Column {
		return []schema.Column{{Name: "id", Kind: schema.Int64}, {Name: "qty", Kind: k, Nullable: true}}
	}
	a := &schema.Table{Namespace: "public", Name: "a", Columns: col(schema.Int64), Key: []int{0}}
	aText := &schema.Table{Namespace: "public", Name: "a", Columns: col(schema.String), Key: []int{0}}
	b := &schema.Table{Namespace: "public", Name: "b", Columns: col(schema.Int64), Key: []int{0}}
	bText := &schema.Table{Namespace: "public", Name: "b", Columns: col(schema.String), Key: []int{0}}
	ch := func(tb *schema.Table, idx uint32) source.Change {
		v := any(int64(idx))
		if tb.Columns[1].Kind == schema.String {
			v = "x"
		}
		return source.Change{Table: tb, Op: source.OpCreate, After: []any{int64(idx), v}, Pos: pgpos.New(700, idx), LSN: 700, TxID: 3, CommitTime: time.Now()}
	}
	emit := func(cs ...source.Change) {
		t.Helper()
		if err := e.Emit(ctx, cs); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(topic string, want ...int) {
		t.Helper()
		if got := positions(t, records(t, lg, topic)); !slices.Equal(got, want) {
			t.Fatalf("%s holds %v, want %v", topic, got, want)
		}
	}
	emit(ch(a, 0), ch(b, 1), ch(a, 2))
	emit(ch(aText, 3), ch(b, 4), ch(aText, 5))
	expect("p.public.a", 0, 2)
	expect("p.public.b", 1, 4)
	expect(heldTopic("p.public.a"), 3, 5)
	p := e.Paused()
	if len(p) != 1 || p[0].Kind != pauseSchema || p[0].Topic != "p.public.a" || !strings.Contains(p[0].Reason, "qty") {
		t.Fatalf("paused: %+v", p)
	}
	if got := rem.RejectedSubjects(); !slices.Equal(got, []string{"p.public.a-value"}) {
		t.Fatalf("refused subjects %v", got)
	}
	if err := e.tryResume(ctx); err != nil || len(e.Paused()) != 1 {
		t.Fatalf("resumed while the registry still refuses (%v): %+v", err, e.Paused())
	}

	// Resolve 1: cdcd's accept, through the daemon's registry routes.
	h, err := schema.NewRemoteHandler(rem)
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("POST", "/cdcd/subjects/p.public.a-value/accept", nil))
	if w.Code != 200 {
		t.Fatalf("accept: %d %s", w.Code, w.Body)
	}
	if err := e.tryResume(ctx); err != nil || len(e.Paused()) != 0 {
		t.Fatalf("not resumed after accept (%v): %+v", err, e.Paused())
	}
	emit(ch(aText, 6))
	expect("p.public.a", 0, 2, 3, 5, 6)

	// Resolve 2: the operator lowers the subject's level at the registry.
	emit(ch(bText, 7), ch(a, 8))
	expect(heldTopic("p.public.b"), 7)
	var inc *schema.IncompatibleError
	if _, err := rem.Register(ctx, "p.public.b-value", mustValueSchema(t, bText)); !errors.As(err, &inc) {
		t.Fatalf("b's new schema: %v, want refused", err)
	}
	if err := ext.SetCompatibility(ctx, "p.public.b-value", schema.None); err != nil {
		t.Fatal(err)
	}
	if err := e.tryResume(ctx); err != nil || len(e.Paused()) != 0 {
		t.Fatalf("not resumed after the level changed (%v): %+v", err, e.Paused())
	}
	expect("p.public.b", 1, 4, 7)
	expect("p.public.a", 0, 2, 3, 5, 6, 8) // a's first schema is registered: it flows
}

func mustValueSchema(t *testing.T, tb *schema.Table) string {
	t.Helper()
	s, err := schema.ValueSchema(tb, "p.public."+tb.Name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
