package daemon

import (
	"context"
	"encoding/binary"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// TestMigrateOffsetMapping: a table's next offset in the embedded log maps
// to the number of copied records below it (the embedded partition may
// start late and have gaps: retention, compaction), and an offset the
// table has not read past a lost range is refused.
func TestMigrateOffsetMapping(t *testing.T) {
	m := &migration{
		ranks: map[string][][]int64{"t": {{5, 6, 9, 10}, {0, 1, 2}}},
		lost:  map[string][][]log.LostRange{"t": {{{From: 7, To: 9, Reason: "bad crc"}}, nil}},
	}
	for _, c := range []struct {
		p          int
		next, want int64
	}{{0, 9, 2}, {0, 10, 3}, {0, 11, 4}, {1, 0, 0}, {1, 2, 2}, {1, 3, 3}} {
		got, err := m.kafkaOffset("t", c.p, c.next)
		if err != nil || got != c.want {
			t.Errorf("partition %d next %d -> %d, %v; want %d", c.p, c.next, got, err, c.want)
		}
	}
	for _, next := range []int64{5, 7, 8} {
		_, err := m.kafkaOffset("t", 0, next)
		if err == nil || !strings.Contains(err.Error(), "lost offsets [7, 9)") || !strings.Contains(err.Error(), "--replace") {
			t.Errorf("next %d before a lost range: %v, want a refusal naming the range and the re-snapshot", next, err)
		}
	}
}

// memSchemas keeps a test registry's records in memory.
type memSchemas struct{ recs [][2][]byte }

func (s *memSchemas) Load(_ context.Context, fn func(key, value []byte) error) error {
	for _, r := range s.recs {
		if err := fn(r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memSchemas) Append(_ context.Context, key, value []byte) error {
	s.recs = append(s.recs, [2][]byte{key, value})
	return nil
}

// TestMigrateReframe: a frame's schema id becomes the external registry's
// id of the same schema — also for a schema whose subject was deleted from
// the embedded registry (registered under the record's subject) — and
// bytes that are not a frame of a known schema stay as they are.
func TestMigrateReframe(t *testing.T) {
	ctx := t.Context()
	emb, err := schema.OpenRegistry(ctx, &memSchemas{})
	if err != nil {
		t.Fatal(err)
	}
	ext, err := schema.OpenRegistry(ctx, &memSchemas{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(schema.NewHandler(ext))
	t.Cleanup(srv.Close)
	remote, err := schema.NewRemote(schema.RemoteConfig{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	rec := func(name string) string {
		return `{"type":"record","name":"` + name + `","fields":[{"name":"id","type":"long"}]}`
	}
	// The external registry numbers differently: it already holds one.
	if _, err := ext.Register(ctx, "other-value", rec("other")); err != nil {
		t.Fatal(err)
	}
	live, err := emb.Register(ctx, "t-value", rec("live"))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := emb.Register(ctx, "gone-value", rec("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emb.DeleteSubject(ctx, "gone-value"); err != nil {
		t.Fatal(err)
	}
	m := &migration{reg: emb, remote: remote, ids: map[uint32]uint32{}}
	frame := func(id uint32) []byte {
		b := []byte{0, 0, 0, 0, 0, 0xAA, 0xBB}
		binary.BigEndian.PutUint32(b[1:5], id)
		return b
	}
	for _, c := range []struct {
		old     uint32
		subject string
		name    string
	}{{live, "t-value", "live"}, {gone, "fault.public.gone-value", "gone"}} {
		out, err := m.reframe(ctx, frame(c.old), c.subject)
		if err != nil {
			t.Fatal(err)
		}
		id := binary.BigEndian.Uint32(out[1:5])
		if got, err := ext.SchemaByID(id); err != nil || !strings.Contains(got, `"`+c.name+`"`) || id == c.old {
			t.Errorf("id %d became %d (%q, %v), want the external id of record %s", c.old, id, got, err, c.name)
		}
		if string(out[5:]) != "\xAA\xBB" || out[0] != 0 {
			t.Errorf("the frame's body changed: %x", out)
		}
	}
	for _, b := range [][]byte{[]byte(`{"json":1}`), frame(9999), {0, 1}} {
		if out, err := m.reframe(ctx, b, "x-value"); err != nil || string(out) != string(b) {
			t.Errorf("%x became %x (%v): not a frame of a known schema, it must stay", b, out, err)
		}
	}
}
