package postgres

import (
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
)

// TestTransactionalMessages: transactional logical decoding messages with
// a configured prefix arrive as changes in their place in the transaction
// (also in a transaction streamed before its commit); every transactional
// message takes a change index, so the changes after one keep their
// positions whatever prefixes are configured; messages of rolled-back
// work and non-transactional ones never arrive.
func TestTransactionalMessages(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	e.dsn = smallDecodingMemory(e.dsn)
	c := newCollector()
	_, r := e.startReader(t, []string{"t"}, false, c, func(cfg *Config) { cfg.Messages = []string{"app.outbox"} })

	e.exec(t, `BEGIN;
		INSERT INTO t VALUES (1, 'a');
		SELECT pg_logical_emit_message(true, 'app.outbox', '{"n": 1}');
		SELECT pg_logical_emit_message(true, 'other', 'not for us');
		SELECT pg_logical_emit_message(false, 'app.outbox', 'not transactional');
		INSERT INTO t VALUES (2, 'b');
		SAVEPOINT s;
		SELECT pg_logical_emit_message(true, 'app.outbox', '{"n": "rolled back"}');
		ROLLBACK TO SAVEPOINT s;
		COMMIT`)
	e.exec(t, `BEGIN;
		SELECT pg_logical_emit_message(true, 'app.outbox', '{"n": "aborted"}');
		ROLLBACK`)
	// Streamed before its commit: larger than logical_decoding_work_mem.
	e.exec(t, `BEGIN;
		INSERT INTO t SELECT g, repeat('x', 200) FROM generate_series(10, 1009) g;
		SELECT pg_logical_emit_message(true, 'app.outbox', '{"n": 2}');
		INSERT INTO t VALUES (3, 'c');
		COMMIT`)
	e.exec(t, `SELECT pg_logical_emit_message(true, 'app.outbox', '{"n": 3}')`)

	got := c.wait(t, 3+1002+1)
	msgs := 0
	for i, ch := range got {
		if i > 0 && ch.Pos.Compare(got[i-1].Pos) <= 0 {
			t.Fatalf("change %d does not come after change %d", i, i-1)
		}
		if ch.Message == nil {
			continue
		}
		msgs++
		if ch.Table != nil || ch.Message.Prefix != "app.outbox" {
			t.Errorf("message change %d: table %v, prefix %q", i, ch.Table, ch.Message.Prefix)
		}
	}
	if msgs != 3 {
		t.Fatalf("%d messages arrived, want 3: %s", msgs, describeMsgs(got))
	}
	// The first transaction: insert 0, message 1, the other prefix's 2,
	// insert 3 (the non-transactional message takes no index).
	want := []struct {
		idx     uint32
		content string
	}{{0, ""}, {1, `{"n": 1}`}, {3, ""}}
	for i, w := range want {
		_, idx, _ := pgpos.Parse(got[i].Pos)
		content := ""
		if got[i].Message != nil {
			content = string(got[i].Message.Content)
		}
		if idx != w.idx || content != w.content || got[i].LSN != got[0].LSN {
			t.Errorf("change %d: index %d content %q, want index %d content %q in the first transaction", i, idx, content, w.idx, w.content)
		}
	}
	// The streamed transaction: 1000 inserts, the message at index 1000.
	streamed := got[3 : 3+1002]
	if m := streamed[1000]; m.Message == nil || string(m.Message.Content) != `{"n": 2}` {
		t.Fatalf("change 1000 of the streamed transaction: %+v", m)
	}
	if _, idx, _ := pgpos.Parse(streamed[1001].Pos); idx != 1001 || streamed[1001].After[0] != int64(3) {
		t.Errorf("the insert after the message: index %d row %v", idx, streamed[1001].After)
	}
	if n := r.Stats().StreamedTxns.Load(); n < 1 {
		t.Errorf("no transaction arrived streamed: the test did not exercise streaming")
	}
	if last := got[len(got)-1]; last.Message == nil || string(last.Message.Content) != `{"n": 3}` {
		t.Errorf("last change: %+v", last)
	}
}

func describeMsgs(cs []source.Change) string {
	var b strings.Builder
	for _, c := range cs {
		if c.Message != nil {
			b.WriteString("\n  message " + string(c.Message.Content))
		}
	}
	return b.String()
}
