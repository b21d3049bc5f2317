package failpoint_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestReleaseBuildIgnoresFailpoints builds ./cmd/cdcd as make build does
// (no build tags) and runs it with every point a first start passes armed:
// it must load and commit a table and keep running, and the binary must
// not even hold the variable's name.
func TestReleaseBuildIgnoresFailpoints(t *testing.T) {
	dir := t.TempDir()
	bin, err := cdcdtest.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(exe, []byte(failpoint.Env)) {
		t.Errorf("the default build holds %q: failpoints are compiled in", failpoint.Env)
	}

	dsn, names := pgtest.NewDB(t), pgtest.Names(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE kv (id int PRIMARY KEY, v text); INSERT INTO kv SELECT g, 'v' FROM generate_series(1, 3) g"); err != nil {
		t.Fatal(err)
	}
	admin := cdcdtest.FreeAddr(t)
	cfg := fmt.Sprintf(`pipeline: fp
data_dir: %q
source:
  postgres: {dsn: %q, slot: %s, publication: %s, tables: [kv]}
sink:
  iceberg: {commit_interval: 200ms}
admin:
  listen: %q
`, filepath.Join(dir, "data"), dsn, names.Slot, names.Publication, admin)
	cfgPath := filepath.Join(dir, "cdcd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "cdcd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	armed := "source.after-slot-created,sink.after-data-file,sink.before-catalog-commit,sink.after-catalog-commit"
	c := cdcdtest.Start(t, bin, cfgPath, admin, logFile, failpoint.Env+"="+armed)
	c.WaitUntil(t, "the table's rows committed", 2*time.Minute, func() bool {
		st, err := c.Status()
		return err == nil && len(st.Tables) == 1 && st.Tables[0].Rows == 3
	})
	if c.Exited() {
		t.Fatalf("cdcd exited: %v", c.ExitErr())
	}
}
