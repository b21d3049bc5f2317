package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestSchemaEvolution drives DDL through the whole pipeline: a column added
// and a type widened flow through (registered, the Iceberg table evolves);
// a narrowing the registry refuses pauses that table — naming the column,
// its old and new type and the position — while the other table keeps
// flowing; accepting the schema resumes it with nothing lost.
func TestSchemaEvolution(t *testing.T) {
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
	exec(`CREATE TABLE acct (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), active boolean, at timestamptz);
	      CREATE TABLE kv (k text PRIMARY KEY, v bigint, data bytea)`)
	dir := t.TempDir()
	admin := freeAddr(t)
	path := writeConfigMode(t, dir, dsn, names.Slot, admin, "upsert", 3)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		d      *daemon.Daemon
		done   chan error
		cancel context.CancelFunc
	)
	start := func() {
		t.Helper()
		var err error
		if d, err = daemon.New(t.Context(), cfg, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))); err != nil {
			t.Fatal(err)
		}
		var ctx context.Context
		ctx, cancel = context.WithCancel(t.Context())
		done = make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
	}
	stop := func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Error(err)
		}
		d.Close()
	}
	start()
	defer func() { stop() }()

	// want mirrors acct as "id|owner|balance|active|at[|extra]".
	want := map[string]string{}
	kvWant := map[string]string{}
	mark := func() uint64 {
		t.Helper()
		var lsn string
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), `INSERT INTO kv VALUES ($1, 1, '\x00') ON CONFLICT (k) DO UPDATE SET v = kv.v + 1`, "mark"); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(t.Context(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		var v int64
		conn.QueryRow(t.Context(), `SELECT v FROM kv WHERE k = 'mark'`).Scan(&v)
		kvWant["kv/mark"] = fmt.Sprintf("mark|%d|00", v)
		return parseLSN(t, lsn)
	}
	at := int64(1_700_000_000_000_000)
	for i := 1; i <= 5; i++ {
		exec(`INSERT INTO acct VALUES ($1, $2, $3, true, $4)`, i, fmt.Sprint("o", i), fmt.Sprintf("%d.50", i), time.UnixMicro(at))
		want[fmt.Sprint("acct/", i)] = fmt.Sprintf("%d|o%d|%d.50|true|%d", i, i, i, at)
	}
	m1 := mark()
	waitFor(t, "caught up", func() bool { return d.CaughtUp(m1) }, done)

	// 1. A column added: compatible; the Iceberg table grows the column.
	exec(`ALTER TABLE acct ADD COLUMN note text`)
	exec(`INSERT INTO acct VALUES (6, 'o6', 6.50, false, $1, 'hello')`, time.UnixMicro(at))
	for k, v := range want {
		want[k] = v + "|∅"
	}
	want["acct/6"] = fmt.Sprintf("6|o6|6.50|false|%d|hello", at)
	// 2. A type widened: numeric(12,2) -> numeric(16,2); compatible.
	exec(`ALTER TABLE acct ALTER COLUMN balance TYPE numeric(16,2)`)
	exec(`UPDATE acct SET balance = 12345678901234.25 WHERE id = 1`)
	want["acct/1"] = fmt.Sprintf("1|o1|12345678901234.25|true|%d|∅", at)
	m2 := mark()
	waitFor(t, "caught up after compatible DDL", func() bool { return d.CaughtUp(m2) }, done)
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	compareMirror(t, "acct", want, mirror(t, cat, table.Identifier{"mirror", "acct"}, "acct/"))

	// 3. A narrowing (numeric(16,2) -> numeric(8,2)): the registry refuses
	// it at BACKWARD; acct pauses, kv keeps flowing.
	exec(`UPDATE acct SET balance = 1.25 WHERE id = 1`)
	want["acct/1"] = fmt.Sprintf("1|o1|1.25|true|%d|∅", at)
	exec(`ALTER TABLE acct ALTER COLUMN balance TYPE numeric(8,2)`)
	exec(`INSERT INTO acct VALUES (7, 'o7', 7.25, true, $1, 'paused')`, time.UnixMicro(at))
	exec(`UPDATE acct SET owner = 'o2b' WHERE id = 2`)
	want["acct/7"] = fmt.Sprintf("7|o7|7.25|true|%d|paused", at)
	want["acct/2"] = strings.Replace(want["acct/2"], "|o2|", "|o2b|", 1)
	exec(`INSERT INTO kv VALUES ('flowing', 42, '\x01')`)
	kvWant["kv/flowing"] = "flowing|42|01"
	var paused daemon.PausedTable
	waitFor(t, "acct paused, its refused change held", func() bool {
		st := d.Status()
		if len(st.Paused) == 1 && st.Paused[0].Held >= 1 {
			paused = st.Paused[0]
			return true
		}
		return false
	}, done)
	for _, w := range []string{"public.acct", "balance", "decimal(16,2) to decimal(8,2)", "incompatibly"} {
		if !strings.Contains(paused.Reason, w) {
			t.Errorf("pause reason %q lacks %q", paused.Reason, w)
		}
	}
	if paused.Position == "" || paused.Held < 1 || !strings.Contains(paused.Resolve, "cdcd schema accept e2e.public.acct-value") {
		t.Errorf("paused = %+v", paused)
	}
	// kv is not held up.
	lsn := mark()
	waitFor(t, "kv flowing while acct is paused", func() bool {
		st := d.Status()
		for _, tb := range st.Tables {
			if strings.HasSuffix(tb.Table, "kv") && tb.Lag != 0 {
				return false
			}
		}
		return st.Source.Flushed >= lsn
	}, done)
	compareMirror(t, "kv", kvWant, mirror(t, cat, table.Identifier{"mirror", "kv"}, "kv/"))

	// The pause survives a restart, with what it holds.
	stop()
	exec(`INSERT INTO acct VALUES (8, 'o8', 8.25, true, $1, 'still paused')`, time.UnixMicro(at))
	want["acct/8"] = fmt.Sprintf("8|o8|8.25|true|%d|still paused", at)
	start()
	waitFor(t, "acct still paused after a restart", func() bool {
		st := d.Status()
		return len(st.Paused) == 1 && st.Paused[0].Held >= paused.Held+1
	}, done)

	// 4. The operator sees the refused schema (`cdcd schema rejected`; the
	// registry learns it again from the restarted daemon's first retry) and
	// accepts it: acct resumes where it stopped.
	waitFor(t, "the refusal listed again after the restart", func() bool {
		resp, err := http.Get("http://" + admin + "/cdcd/rejected")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return strings.Contains(string(b), "e2e.public.acct-value")
	}, done)
	resp, err := http.Post("http://"+admin+"/cdcd/subjects/e2e.public.acct-value/accept", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("accept: %s %s", resp.Status, body)
	}
	waitFor(t, "acct resumed", func() bool { return len(d.Status().Paused) == 0 }, done)
	m3 := mark()
	waitFor(t, "caught up after resume", func() bool { return d.CaughtUp(m3) }, done)
	compareMirror(t, "acct", want, mirror(t, cat, table.Identifier{"mirror", "acct"}, "acct/"))
	checkTableInvariants(t, cat, table.Identifier{"mirror", "acct"})
}

func parseLSN(t *testing.T, s string) uint64 {
	t.Helper()
	var hi, lo uint64
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		t.Fatal(err)
	}
	return hi<<32 | lo
}
