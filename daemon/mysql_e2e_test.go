package daemon_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	cdcdmirror "github.com/cdcd-dev/cdcd/internal/mirror"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestMySQLEndToEnd: MariaDB → the binlog reader → the log → an Iceberg
// upsert table, equal to the source by iceberg-go's scan, also after a
// restart that resumes from the reader's checkpoint.
func TestMySQLEndToEnd(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	rootDSN := mariadbtest.NewDBOn(t, srv)
	db, err := mariadbserver.OpenDSN(rootDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var name string
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	exec := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	exec(`CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(40), amount DECIMAL(10,2), big BIGINT UNSIGNED, at DATETIME(6))`,
		`CREATE TABLE zd (d DATE PRIMARY KEY, v INT)`)

	dir := t.TempDir()
	cfgText := fmt.Sprintf(`pipeline: my
data_dir: %q
source:
  mysql:
    dsn: "mysql://%s:%s@%s/%s"
    server_id: %d
    tables: [%s.orders, %s.zd]
    snapshot: never
log:
  partitions: 2
sink:
  iceberg:
    namespace: mirror
    commit_interval: 200ms
admin:
  listen: "off"
`, dir, mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), name, mariadbtest.ServerID(t), name, name)
	path := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	run := func(workload func(), check func(*daemon.Daemon) bool) {
		t.Helper()
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		workload()
		waitFor(t, "the mirror equal to the source", func() bool { return mirrorEqual(t, dir, db, name) == "" }, done)
		waitFor(t, "a checkpoint in /status", func() bool {
			b := d.Status().Source.Binlog
			return b != nil && b.GTID != "" && b.File != "" && b.Pos > 0 && b.Ordinal > 0
		}, done)
		if check != nil {
			waitFor(t, "the check", func() bool { return check(d) }, done)
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(func() {
		for i := 0; i < 200; i += 20 {
			exec("BEGIN")
			for j := i; j < i+20; j++ {
				exec(fmt.Sprintf("INSERT INTO orders VALUES (%d, 'order %d', %d.25, 18446744073709551%03d, '2024-02-29 12:00:00.%06d')", j, j, j, j%616, j))
			}
			exec("COMMIT")
		}
		exec("UPDATE orders SET note = 'updated', amount = -1.50 WHERE id % 7 = 0",
			"DELETE FROM orders WHERE id % 11 = 0",
			"UPDATE orders SET id = 1000 WHERE id = 1")
	}, nil)
	// A restart resumes from the checkpoint: nothing lost, nothing twice. A
	// zero date in a key column pauses its table alone, naming the value.
	run(func() {
		conn, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		for _, q := range []string{"SET SESSION sql_mode = ''", "INSERT INTO zd VALUES ('0000-00-00', 1)"} {
			if _, err := conn.ExecContext(t.Context(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec("INSERT INTO orders VALUES (2000, 'after restart', 1.00, 1, NULL)",
			"UPDATE orders SET note = NULL WHERE id = 2",
			"DELETE FROM orders WHERE id = 3")
	}, func(d *daemon.Daemon) bool {
		for _, p := range d.Status().Paused {
			if p.Source == name+".zd" && p.Kind == "value" && p.Column == "d" && p.Value == "0000-00-00" {
				return true
			}
		}
		return false
	})
	if diff := mirrorEqual(t, dir, db, name); diff != "" {
		t.Fatal(diff)
	}
}

// mirrorEqual compares the source table with its Iceberg mirror; "" when
// equal, else what differs.
func mirrorEqual(t *testing.T, dir string, db *sql.DB, name string) string {
	ctx := context.Background()
	cat, err := iceberg.OpenCatalog(ctx, *openCatalog(t, dir))
	if err != nil {
		return err.Error()
	}
	defer cat.(interface{ Close() error }).Close()
	tbl, err := cat.LoadTable(ctx, table.Identifier{"mirror", name + "_orders"})
	if err != nil {
		return err.Error()
	}
	got, _, dups, _, err := cdcdmirror.IcebergRows(ctx, tbl, []string{"id"})
	if err != nil {
		return err.Error()
	}
	if len(dups) > 0 {
		return fmt.Sprintf("keys twice in the mirror: %v", dups)
	}
	rows, err := db.Query(`SELECT id, IFNULL(note, '∅'), CAST(amount AS CHAR), CAST(big AS CHAR),
		IFNULL(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', at), '∅') FROM orders`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id, note, amount, big, at string
		if err := rows.Scan(&id, &note, &amount, &big, &at); err != nil {
			return err.Error()
		}
		n++
		g := got[id]
		if g == nil {
			return fmt.Sprintf("key %s missing from the mirror", id)
		}
		want := map[string]string{"id": id, "note": note, "amount": amount, "big": big, "at": at}
		for c, w := range want {
			if g[c] != w {
				return fmt.Sprintf("key %s column %s: mirror %q, source %q", id, c, g[c], w)
			}
		}
	}
	if n != len(got) {
		return fmt.Sprintf("the source has %d rows, the mirror %d", n, len(got))
	}
	return ""
}
