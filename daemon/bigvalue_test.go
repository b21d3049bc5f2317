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

// TestOversizedChangePausesOneTable: a change whose row is larger than a
// log record stops its table alone, as a fault record without its large
// values that names the table, key, column and sizes and the fixes; the
// changes after it are held; another table flows; a change that fits is
// passed on as it is.
func TestOversizedChangePausesOneTable(t *testing.T) {
	ctx := t.Context()
	e, lg := newTestEmitter(t, "big", 1)
	if err := ensureTopic(ctx, lg, "p.public.b", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	big := &schema.Table{Namespace: "public", Name: "big", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "doc", Kind: schema.String, Nullable: true},
		{Name: "raw", Kind: schema.Bytes, Nullable: true}, {Name: "note", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	b := &schema.Table{Namespace: "public", Name: "b", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	now := time.Now()
	ch := func(tb *schema.Table, idx uint32, before, after []any) source.Change {
		op := source.OpCreate
		if before != nil {
			op = source.OpUpdate
		}
		return source.Change{Table: tb, Op: op, Before: before, After: after, Pos: pgpos.New(700, idx), LSN: 700, CommitTime: now}
	}
	fits := ch(big, 0, nil, []any{int64(1), strings.Repeat("a", maxRowBytes-200), nil, "n"})
	if e.oversized(&fits) != &fits {
		t.Fatal("a change that fits a record was changed")
	}
	doc := strings.Repeat("d", 40<<20)
	raw := make([]byte, 30<<20)
	tooBig := ch(big, 1, []any{int64(2), nil, nil, nil}, []any{int64(2), doc, raw, "small note"})
	batch := []source.Change{fits, tooBig, ch(b, 2, nil, []any{int64(10)}), ch(big, 3, nil, []any{int64(3), "x", nil, nil})}
	if err := e.Emit(ctx, batch); err != nil {
		t.Fatalf("a change too large failed the batch: %v", err)
	}
	if tooBig.After[1] != doc {
		t.Error("the source's change was modified")
	}
	if got := positions(t, records(t, lg, "p.public.big")); !sameInts(got, []int{0}) {
		t.Errorf("topic big holds %v, want the change that fits", got)
	}
	if got := positions(t, records(t, lg, "p.public.b")); !sameInts(got, []int{2}) {
		t.Errorf("topic b holds %v: the other table does not flow", got)
	}
	held := records(t, lg, heldTopic("p.public.big"))
	if got := positions(t, held); !sameInts(got, []int{1, 3}) {
		t.Fatalf("holding topic holds %v, want 1 (fault), 3", got)
	}
	if len(held[0].Value) > 64<<10 || held[0].Header(schema.HeaderFault) == nil {
		t.Fatalf("fault record of %d bytes (fault header %q)", len(held[0].Value), held[0].Header(schema.HeaderFault))
	}
	var fd faultDoc
	if err := json.Unmarshal(held[0].Value, &fd); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(fd.After), `"note":"small note"`) || !strings.Contains(string(fd.After), `"doc":null`) {
		t.Errorf("fault record's row: %s", fd.After)
	}
	p := e.Paused()
	if len(p) != 1 || p[0].Key != `{"id":2}` || p[0].Column != "doc" || !strings.Contains(p[0].Value, "41943040 bytes") {
		t.Fatalf("paused: %+v", p)
	}
	for _, w := range []string{"public.big", "more than a change can be in cdcd's log", "column doc holds 41943040 bytes", "column raw holds 31457280 bytes", `key {"id":2}`} {
		if !strings.Contains(p[0].Reason, w) {
			t.Errorf("reason does not say %q: %s", w, p[0].Reason)
		}
	}
	for _, w := range []string{"cdcd table skip -c FILE public.big", "cdcd snapshot -c FILE --replace public.big", "masking"} {
		if !strings.Contains(p[0].Resolve, w) {
			t.Errorf("fix does not say %q: %s", w, p[0].Resolve)
		}
	}
	// A change too large while the table is held is a fault record too.
	if err := e.Emit(ctx, []source.Change{ch(big, 4, nil, []any{int64(4), doc, raw, nil})}); err != nil {
		t.Fatal(err)
	}
	if held = records(t, lg, heldTopic("p.public.big")); len(held) != 3 || held[2].Header(schema.HeaderFault) == nil || len(held[2].Value) > 64<<10 {
		t.Fatalf("a held change too large: %d held records", len(held))
	}
}

// smallRecords is a log whose records are at most 2 MiB, as a Kafka
// cluster's may be.
type smallRecords struct{ log.Log }

func (smallRecords) MaxRecordBytes() int { return 2 << 20 }

// TestOversizedForTheLogsLimit: a log with smaller records than the
// embedded log's sets the limit.
func TestOversizedForTheLogsLimit(t *testing.T) {
	e, lg := newTestEmitter(t, "big", 1)
	e.lg = smallRecords{lg}
	tb := &schema.Table{Namespace: "public", Name: "big", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "doc", Kind: schema.String, Nullable: true}}, Key: []int{0}}
	c := source.Change{Table: tb, Op: source.OpCreate, After: []any{int64(1), strings.Repeat("d", 3<<20)}, Pos: pgpos.New(1, 0)}
	if err := e.Emit(t.Context(), []source.Change{c}); err != nil {
		t.Fatal(err)
	}
	p := e.Paused()
	if len(p) != 1 || p[0].Column != "doc" || !strings.Contains(p[0].Reason, "(2031616 bytes)") {
		t.Fatalf("paused: %+v", p)
	}
}
