package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/schema"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// memStore keeps an external test registry's records in memory.
type memStore struct {
	mu   sync.Mutex
	recs [][2][]byte
}

func (s *memStore) Load(_ context.Context, fn func(key, value []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if err := fn(r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memStore) Append(_ context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, [2][]byte{key, value})
	return nil
}

// externalRegistry serves a Confluent-compatible registry API (cdcd's own,
// over memory) for the length of the test.
func externalRegistry(t *testing.T) string {
	t.Helper()
	reg, err := schema.OpenRegistry(t.Context(), &memStore{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(schema.NewHandler(reg))
	t.Cleanup(srv.Close)
	return srv.URL
}

// kafkaConfig rewrites the e2e config for the Kafka backend.
func kafkaConfig(t *testing.T, path string, brokers []string, registry string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.Replace(string(b), "log:\n  partitions: 4\n", fmt.Sprintf(
		"log:\n  partitions: 4\n  backend: kafka\n  kafka: {brokers: [%s]}\nschema_registry: {url: %q}\n",
		`"`+strings.Join(brokers, `", "`)+`"`, registry), 1)
	if conf == string(b) {
		t.Fatal("the config has no log section to rewrite")
	}
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKafkaEndToEnd: PostgreSQL -> Kafka (kfake, transactional) with an
// external registry -> Iceberg, across a restart: the mirror equals the
// source, and the topics hold Kafka's records read read_committed.
func TestKafkaEndToEnd(t *testing.T) {
	t.Parallel()
	brokers, _ := kafkatest.Brokers(t)
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL); err != nil {
		t.Fatal(err)
	}
	// TestEndToEndUpsert's v3 workload: a table whose changes end in a
	// truncate before its first commit is never created, and its lag never
	// clears (a sink corner case, reported).
	m := newModel(13)
	if _, err := m.run(t.Context(), conn, 30, 0); err != nil { // loaded by the initial snapshot
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := writeConfigMode(t, dir, dsn, names.Slot, "off", "upsert", 3)
	kafkaConfig(t, path, brokers, externalRegistry(t))
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int) {
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := d.Log().(*kafka.Log); !ok {
			t.Fatalf("the daemon's log is %T, want the Kafka backend", d.Log())
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		lsn, err := m.run(t.Context(), conn, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(150)
	run(150) // a clean restart resumes from the table's offsets
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	acct, kv := m.expected()
	compareMirror(t, "acct", acct, mirror(t, cat, table.Identifier{"mirror", "acct"}, "acct/"))
	compareMirror(t, "kv", kv, mirror(t, cat, table.Identifier{"mirror", "kv"}, "kv/"))
	checkTableInvariants(t, cat, table.Identifier{"mirror", "acct"})

	// The changes are Kafka's records, in the pipeline's topics.
	lg, err := kafka.Open(t.Context(), kafka.Options{Brokers: brokers}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(t.Context(), "e2e.public.acct")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range info.Partitions {
		recs, err := lg.Fetch(t.Context(), info.Name, p.Partition, p.Start, log.FetchOptions{MaxBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		total += len(recs)
	}
	if total == 0 || len(info.Partitions) != 4 || info.ID == "" {
		t.Fatalf("topic e2e.public.acct: %d records read back, %+v", total, info)
	}
	t.Logf("%d acct rows, %d kv rows; %d acct changes in Kafka", len(acct), len(kv), total)
}
