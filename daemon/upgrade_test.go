package daemon_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	cdcdmirror "github.com/cdcd-dev/cdcd/internal/mirror"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// logStore is the registry's store over the _schemas topic, as the daemon
// keeps it (a test cannot reach the daemon's own).
type logStore struct{ lg log.Log }

func (s logStore) Load(ctx context.Context, fn func(k, v []byte) error) error {
	for off := int64(0); ; {
		recs, err := s.lg.Fetch(ctx, daemon.TopicSchemas, 0, off, log.FetchOptions{MaxBytes: 1 << 20})
		if errors.Is(err, log.ErrOffsetOutOfRange) || (err == nil && len(recs) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := fn(r.Key, r.Value); err != nil {
				return err
			}
			off = r.Offset + 1
		}
	}
}

func (s logStore) Append(ctx context.Context, k, v []byte) error {
	return s.lg.Produce(ctx, daemon.TopicSchemas, []log.Record{{Key: k, Value: v}})
}

// TestUpgradeFromLegacyEnvelope: a pipeline whose log and registry hold
// records in cdcd's former envelope (testdata/legacy_envelope.json, written
// by cdcd before it wrote Debezium's) is started by this version. The
// table's first schema in Debezium's layout is refused by the subject's
// BACKWARD level (its NOT NULL fields become required) and must be
// registered anyway as the envelope's move, not pause the table; the sink
// reads the old records and the new ones, and the mirror equals the source.
func TestUpgradeFromLegacyEnvelope(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// The table the fixture's records belong to, holding what they left:
	// id 2 (inserted, its body unchanged by an update); id 1 deleted.
	exec(`CREATE TABLE orders (id bigint PRIMARY KEY, qty int NOT NULL, note text, body text NOT NULL,
		price numeric(10,2) NOT NULL, tags text[], at timestamptz);
		INSERT INTO orders VALUES (2, 3, 'first', 'world', 12.50, '{a,NULL}', to_timestamp(1700000000.123456))`)

	dir := t.TempDir()
	cfgText := fmt.Sprintf(`pipeline: shop
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [public.orders]
    snapshot: never
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    commit_interval: 200ms
`, dir, dsn, names.Slot, names.Slot)
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	// daemon.New lays out the data directory (topics, registry, catalog).
	d, err := daemon.New(t.Context(), cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	writeLegacyRecords(t, filepath.Join(dir, "log"), "shop.public.orders", 4)

	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if d, err = daemon.New(t.Context(), cfg, logger); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
		d.Close()
	}()
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)

	exec(`INSERT INTO orders VALUES (3, 1, NULL, 'three', 3.00, NULL, NULL), (4, 1, 'x', 'four', 4.00, '{}', now())`)
	exec(`UPDATE orders SET qty = 4, note = NULL WHERE id = 2`)
	exec(`DELETE FROM orders WHERE id = 4`)
	var lsn string
	if err := conn.QueryRow(t.Context(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool { return d.CaughtUp(parseLSN(t, lsn)) }, done)

	if p := d.Status().Paused; len(p) > 0 {
		t.Fatalf("paused after the upgrade: %+v", p)
	}
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"mirror", "orders"})
	if err != nil {
		t.Fatal(err)
	}
	diff, err := cdcdmirror.Compare(t.Context(), conn, "public.orders", tbl)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.Equal() {
		t.Fatal(diff)
	}
	if !strings.Contains(logs.String(), "value schema moved to Debezium's envelope") {
		t.Errorf("the move was not logged:\n%s", logs.String())
	}
}

// writeLegacyRecords registers the fixture's schemas in the log's registry
// and appends its records (all but the truncate) to topic, placed and
// framed as cdcd placed them.
func writeLegacyRecords(t *testing.T, logDir, topic string, partitions int32) {
	t.Helper()
	b, err := os.ReadFile("testdata/legacy_envelope.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		KeySchema   string `json:"key_schema"`
		ValueSchema string `json:"value_schema"`
		Records     []struct{ Key, Value string }
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lg, err := log.Open(logDir, log.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	reg, err := schema.OpenRegistry(ctx, logStore{lg})
	if err != nil {
		t.Fatal(err)
	}
	kid, err := reg.Register(ctx, topic+"-key", f.KeySchema)
	if err != nil {
		t.Fatal(err)
	}
	vid, err := reg.Register(ctx, topic+"-value", f.ValueSchema)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := schema.TableFromValueSchema(f.ValueSchema)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range f.Records {
		if r.Key == "" {
			continue // the truncate
		}
		key, _ := hex.DecodeString(r.Key)
		value, _ := hex.DecodeString(r.Value)
		env, err := schema.DecodeEnvelope(tbl, value)
		if err != nil {
			t.Fatal(err)
		}
		rec := log.Record{
			Key: schema.AppendFrame(nil, kid), Value: schema.AppendFrame(nil, vid), Partition: log.PartitionFor(key, partitions),
			Headers: []log.Header{{Key: schema.HeaderPosition, Value: env.Source.Position},
				{Key: schema.HeaderTxID, Value: fmt.Appendf(nil, "%d", env.Source.TxID)}},
		}
		rec.Key, rec.Value = append(rec.Key, key...), append(rec.Value, value...)
		if err := lg.Produce(ctx, topic, []log.Record{rec}); err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}
