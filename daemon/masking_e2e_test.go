package daemon_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/mask"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

const maskSalt = "test-salt-0123456789abcdef"

// TestMaskingNeverReachesDisk captures a table with an excluded, a hashed
// and a redacted column, through the initial load and streaming (inserts,
// updates, a delete), and checks that no plaintext of those columns is in
// any file under data_dir (the log, the key index, the catalog, the
// warehouse), nor in any value the Iceberg table returns; the hashed
// column holds HMAC-SHA256(salt, value). The unmasked column's text is
// found in the log's files, so the byte search can see plaintext.
func TestMaskingNeverReachesDisk(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE people (id bigint PRIMARY KEY, email text, ssn text, phone text, note text)`); err != nil {
		t.Fatal(err)
	}
	var secrets []string
	emails := map[int64]string{}
	put := func(id int64, gen int) {
		email := fmt.Sprintf("person%d.g%d@plain-email.example", id, gen)
		ssn := fmt.Sprintf("SSN-%03d-%02d-PLAINTEXT", id, gen)
		phone := fmt.Sprintf("+1-555-%04d-PLAINPHONE", id*10+int64(gen))
		secrets = append(secrets, email, ssn, phone)
		emails[id] = email
		if _, err := conn.Exec(t.Context(), `INSERT INTO people VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, ssn = EXCLUDED.ssn, phone = EXCLUDED.phone, note = EXCLUDED.note`,
			id, email, ssn, phone, fmt.Sprintf("visible-note-%d", id)); err != nil {
			t.Fatal(err)
		}
	}
	for id := int64(1); id <= 10; id++ { // through the initial load
		put(id, 0)
	}

	dir := t.TempDir()
	path := writeOperatorConfig(t, dir, dsn, names.Slot, "off", "upsert", "public.people", `masking:
  salt: ${MASK_SALT}
  tables:
    - table: people
      exclude: [ssn]
      hash: [email]
      redact: [phone]
`)
	cfg, err := config.Load(path, config.WithLookupEnv(func(name string) (string, bool) {
		if name == "MASK_SALT" {
			return maskSalt, true
		}
		return "", false
	}))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
	for id := int64(5); id <= 20; id++ { // updates of loaded rows, then new rows
		put(id, 1)
	}
	// The last transaction, with a WAL position inside it (see DESIGN.md:
	// the source confirms commit LSNs).
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if _, err := tx.Exec(t.Context(), `DELETE FROM people WHERE id = 3`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(t.Context(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	delete(emails, 3)
	lsn := mustLSN(t, s)
	waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// No plaintext anywhere under data_dir; the visible note is in the log.
	noteSeen := false
	err = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || filepath.Base(p) == "cdcd.yaml" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, sec := range append(secrets, "PLAINTEXT", "PLAINPHONE", "plain-email") {
			if bytes.Contains(b, []byte(sec)) {
				t.Errorf("%s holds the plaintext %q", p, sec)
			}
		}
		if strings.Contains(p, string(filepath.Separator)+"log"+string(filepath.Separator)) && bytes.Contains(b, []byte("visible-note-7")) {
			noteSeen = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !noteSeen {
		t.Error("the unmasked note is in no log file: the byte search proves nothing")
	}

	// The table: no ssn column, email = HMAC, phone = ***.
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"mirror", "people"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tbl.Schema().FindFieldByName("ssn"); ok {
		t.Error("the excluded column ssn is in the Iceberg schema")
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	rows := 0
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) *array.String {
			return rec.Column(rec.Schema().FieldIndices(name)[0]).(*array.String)
		}
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			rows++
			id := ids.Value(i)
			if got, want := col("email").Value(i), mask.Hash([]byte(maskSalt), []byte(emails[id])); got != want {
				t.Errorf("id %d: email %q, want HMAC %q", id, got, want)
			}
			if got := col("phone").Value(i); got != mask.Redacted {
				t.Errorf("id %d: phone %q, want %q", id, got, mask.Redacted)
			}
			if got := col("note").Value(i); got != fmt.Sprintf("visible-note-%d", id) {
				t.Errorf("id %d: note %q", id, got)
			}
		}
	}
	if rows != len(emails) {
		t.Errorf("%d rows, want %d", rows, len(emails))
	}
}

func mustLSN(t *testing.T, s string) uint64 {
	t.Helper()
	var hi, lo uint64
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		t.Fatal(err)
	}
	return hi<<32 | lo
}

// TestHardStopThenRestart: a graceful stop that cannot finish (an append
// is held) turns hard at the shutdown deadline, and a second signal turns
// it hard at once; after each, a new daemon on the same data resumes and
// the changelog holds every change exactly once.
func TestHardStopThenRestart(t *testing.T) {
	t.Parallel()
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
	dir := t.TempDir()
	const deadline = 700 * time.Millisecond
	cfg, err := config.Load(writeOperatorConfig(t, dir, dsn, names.Slot, "off", "append", "public.acct, public.kv",
		fmt.Sprintf("shutdown:\n  deadline: %s\n", deadline)))
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(51)
	for _, secondSignal := range []bool{false, true} {
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		hard, hardStop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx, daemon.WithHardStop(hard)) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		if _, err := m.run(t.Context(), conn, 50, 0); err != nil {
			t.Fatal(err)
		}
		resume, held := d.PauseIntake()
		if _, err := m.run(t.Context(), conn, 5, 0); err != nil { // held in the intake
			t.Fatal(err)
		}
		select {
		case <-held:
		case <-time.After(30 * time.Second):
			t.Fatal("the source never tried to append the held changes")
		}
		began := time.Now()
		cancel()
		if secondSignal {
			hardStop()
		}
		err = <-done
		took := time.Since(began)
		if !errors.Is(err, daemon.ErrHardStop) {
			t.Fatalf("Run returned %v, want ErrHardStop", err)
		}
		limit := deadline + 2*time.Second
		if secondSignal {
			limit = 2 * time.Second
		}
		if took > limit {
			t.Errorf("the hard stop took %s", took)
		}
		t.Logf("second signal %v: %v after %s", secondSignal, err, took.Round(time.Millisecond))
		resume()
		hardStop()
		if err := d.Close(); err != nil {
			t.Logf("close after a hard stop: %v", err)
		}
	}
	// A restart resumes and catches up.
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	lsn, err := m.run(t.Context(), conn, 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool { return d.CaughtUp(lsn) }, done)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	verify(t, dir, m)
}
