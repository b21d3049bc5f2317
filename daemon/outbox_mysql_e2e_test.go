package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/outbox"
)

// TestOutboxRelayMySQL: MariaDB's outbox table through the binlog into
// the log: rows kept and rows deleted in their own transaction, each event
// once and in order per aggregate, also across a restart that re-reads
// from the checkpoint.
func TestOutboxRelayMySQL(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	db, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	w := outbox.Writer{Table: name + ".outbox", Dialect: outbox.MySQL}
	if _, err := db.Exec(w.DDL()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE orders (id VARCHAR(20) PRIMARY KEY, n INT)`); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, `pipeline: myobx
data_dir: %q
source:
  mysql: {dsn: "mysql://%s:%s@%s/%s", server_id: %d, tables: [%s.orders], snapshot: never}
log: {partitions: 2}
sink: {iceberg: {commit_interval: 200ms}}
admin: {listen: "off"}
outbox: {table: %s.outbox, targets: [{log: {}}]}
`, dir, mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), name, mariadbtest.ServerID(t), name, name), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []outbox.Event
	write := func(n int) {
		for i := range n {
			ev, err := outbox.NewEvent("Order", fmt.Sprint(i%4), "Placed", map[string]int{"i": i})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(`INSERT INTO orders VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1`, ev.AggregateID); err != nil {
				t.Fatal(err)
			}
			wr := w
			wr.Delete = i%2 == 1
			if err := wr.Write(t.Context(), tx, ev); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			want = append(want, ev)
		}
	}
	run := func(n int) *daemon.Daemon {
		t.Helper()
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		write(n)
		waitFor(t, "every event relayed", func() bool {
			st := d.Status().Outbox
			return st != nil && st.Targets[0].Delivered+st.Targets[0].Duplicates >= int64(n)
		}, done)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		return d
	}
	d := run(20)
	d.Close()
	d = run(20)
	defer d.Close()
	got := map[string][]string{}
	for _, rec := range readAllRecords(t, d.Log(), "outbox.Order") {
		got[string(rec.Key)] = append(got[string(rec.Key)], string(rec.Header(outbox.HeaderID)))
	}
	wantBy := map[string][]string{}
	for _, ev := range want {
		wantBy[ev.AggregateID] = append(wantBy[ev.AggregateID], ev.ID)
	}
	for agg, ids := range wantBy {
		if !slices.Equal(got[agg], ids) {
			t.Errorf("aggregate %s: %v, want %v", agg, got[agg], ids)
		}
	}
	var left int
	if err := db.QueryRow("SELECT COUNT(*) FROM outbox").Scan(&left); err != nil || left != 20 {
		t.Errorf("%d rows left in the outbox table, want the 20 not deleted (%v)", left, err)
	}
}
