package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
)

// embeddedChanges reads an embedded log as the reconcile does.
type embeddedChanges struct{ lg *log.Embedded }

func (c embeddedChanges) Describe(ctx context.Context, topic string) (log.TopicInfo, error) {
	return c.lg.DescribeTopic(ctx, topic)
}

func (c embeddedChanges) Fetch(ctx context.Context, topic string, p int32, off int64, opts log.FetchOptions) ([]log.Record, error) {
	return c.lg.Fetch(ctx, topic, p, off, opts)
}

func (c embeddedChanges) SchemaByID(uint32) (string, error) { return "", nil }

// TestReconcileBusy: the source's state in the log says which tables a
// reconcile leaves out — all of them until the initial load is done, a
// table while a replacing snapshot of it is queued or running — and later
// records (read incrementally) change the answer.
func TestReconcileBusy(t *testing.T) {
	ctx := context.Background()
	lg, err := log.Open(t.TempDir(), log.Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	cfg := &config.Config{Source: config.Source{Postgres: &config.Postgres{Slot: "s1"}}}
	b := newBusyState(cfg, embeddedChanges{lg})
	want := func(table, words string) {
		t.Helper()
		why, err := b.why(ctx, table)
		if err != nil {
			t.Fatal(err)
		}
		if words == "" && why != "" || !strings.Contains(why, words) {
			t.Errorf("%s: busy %q, want %q", table, why, words)
		}
	}
	want("public.a", "has not started")
	if err := ensureTopic(ctx, lg, TopicState, log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	st := &stateStore{lg: lg, values: map[string][]byte{}}
	save := func(key, value string) {
		t.Helper()
		if err := st.Save(ctx, key, []byte(value)); err != nil {
			t.Fatal(err)
		}
	}
	want("public.a", "has not started")
	save("postgres/s1", `{"slot":"s1","slot_created":true,"snapshot_done":false,"load":{}}`)
	want("public.a", "initial load has not finished")
	save("postgres/s1", `{"slot":"s1","slot_created":true,"snapshot_done":true}`)
	want("public.a", "")
	save("postgres/s1/tables", `["public.b"]`)
	want("public.a", "not queued yet")
	save("postgres/s1/tables", `["public.a", "public.b"]`)
	want("public.a", "")
	save("postgres/s1/incremental", `{"runs":[{"id":"r1","table":"public.a","replace":true,"origin":"cli","started":"2026-01-01T00:00:00Z"},
		{"id":"r2","table":"public.b","where":"id < 5","origin":"cli","started":"2026-01-01T00:00:00Z"}]}`)
	want("public.a", "replaces its contents (cdcd snapshot --replace)")
	want(`"public"."a"`, "replaces its contents")
	want("public.b", "") // a --where run adds rows in the stream's order: nothing is missing
	save("postgres/s1/incremental", `{"runs":[{"id":"r3","table":"public.a","replace":true,"origin":"load-resumed","started":"2026-01-01T00:00:00Z"}]}`)
	want("public.a", "the rest of an interrupted initial load")
	save("postgres/s1/incremental", `{"runs":[]}`)
	want("public.a", "")
}
