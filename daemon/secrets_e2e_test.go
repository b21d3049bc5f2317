package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// secretPassword holds every character that splits a URL or a key=value
// DSN; its pieces between them are distinctive enough to grep for.
const secretPassword = `zqx7k@vxw9/kpj3#lmq5%41:rtz8?ywv2 hnb6'qtfd\bsgx`

// secretFragments are the pieces of secretPassword no log line may hold.
func secretFragments() []string {
	out := []string{secretPassword, "vxw9%2Fkpj3", "%40vxw9"}
	for _, f := range strings.FieldsFunc(secretPassword, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) {
		if len(f) >= 4 {
			out = append(out, f)
		}
	}
	return out
}

// TestSecretPasswordNeverShown runs the daemon against a server that
// checks passwords (scram-sha-256) as a user whose password holds @ / # %
// : ? ' \ and a space, given as ${ENV} in a URL DSN: it must connect,
// mirror the table, and no line of its output, /status or /metrics may
// hold any piece of the password. Then it runs with a wrong password: the
// failure is reported, still without it.
func TestSecretPasswordNeverShown(t *testing.T) {
	hba := filepath.Join(sharedDir(t), "pg_hba.conf")
	rules := "local all all trust\n" +
		"host all postgres 127.0.0.1/32 trust\nhost replication postgres 127.0.0.1/32 trust\n" +
		"host all all 127.0.0.1/32 scram-sha-256\nhost replication all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"hba_file": hba}})
	superDSN := pgtest.NewDBOn(t, srv)
	pc, err := pgconn.ParseConfig(superDSN)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, superDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	quoted := "'" + strings.ReplaceAll(secretPassword, "'", "''") + "'"
	for _, sql := range []string{
		"CREATE ROLE cdc_secret LOGIN SUPERUSER REPLICATION PASSWORD " + quoted,
		"CREATE TABLE kv (id int PRIMARY KEY, v text)",
		"INSERT INTO kv SELECT g, 'v' || g FROM generate_series(1, 3) g",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	names := pgtest.Names(t)
	admin := freeAddr(t)
	dsn := fmt.Sprintf("postgres://cdc_secret:${CDCD_SECRET_TEST_PW}@127.0.0.1:%d/%s?sslmode=disable", srv.Port(), pc.Database)
	cfgPath := writeOperatorConfig(t, dir, dsn, names.Slot, admin, "upsert", "public.kv", "")
	logPath := filepath.Join(dir, "daemon.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	var outputs []string
	defer func() { // also after a t.Fatal: whatever was output is checked
		b, _ := os.ReadFile(logPath)
		for _, line := range append(outputs, strings.Split(string(b), "\n")...) {
			for _, f := range secretFragments() {
				if strings.Contains(line, f) {
					t.Errorf("output holds %q, a piece of the password: %.400s", f, line)
				}
			}
		}
	}()

	c := startChild(t, cfgPath, admin, logFile, "CDCD_SECRET_TEST_PW="+secretPassword)
	waitChild(t, c, "3 rows committed", func() bool {
		st, err := c.status()
		return err == nil && len(st.Tables) == 1 && st.Tables[0].Rows == 3
	})
	for _, path := range []string{"/status", "/metrics"} {
		_, body := get(t, "http://"+admin+path)
		outputs = append(outputs, path+": "+body)
	}
	stopChild(t, c)

	// A wrong password: authentication fails, and says so.
	fmt.Fprintln(logFile, "---- test: wrong password")
	c = startChild(t, cfgPath, admin, logFile, "CDCD_SECRET_TEST_PW="+secretPassword+"x")
	authFailed := func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "password authentication failed")
	}
	for deadline := time.Now().Add(90 * time.Second); !authFailed() && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
	}
	stopChild(t, c)
	if !authFailed() {
		t.Error("with a wrong password, the daemon's output never says that authentication failed")
	}

}

// sharedDir returns a directory the database server's OS account can read
// (t.TempDir's parent is root-only).
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdcd-secret-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// stopChild stops a child with SIGTERM, or SIGKILL after 30 s (at once
// when it has exited already).
func stopChild(t *testing.T, c *child) {
	t.Helper()
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
