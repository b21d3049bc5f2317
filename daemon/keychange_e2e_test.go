package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// docModel is the source's doc table: id -> body, n.
type docModel struct {
	rng    *rand.Rand
	rows   map[int64]docRow
	nextID int64
}

type docRow struct {
	body string
	n    int64
}

// big returns a fresh value TOASTed out of line (> 2 kB, storage external).
func (m *docModel) big() string {
	b := make([]byte, 3000+m.rng.IntN(3000))
	for i := range b {
		b[i] = 'a' + byte(m.rng.IntN(26))
	}
	return string(b)
}

func (m *docModel) ids() []int64 {
	out := make([]int64, 0, len(m.rows))
	for id := range m.rows {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (m *docModel) pick() int64 { ids := m.ids(); return ids[m.rng.IntN(len(ids))] }

// setKey moves from's row to key to: UPDATE doc SET id = to.
func (m *docModel) setKey(ctx context.Context, tx pgx.Tx, from, to int64) error {
	if _, err := tx.Exec(ctx, `UPDATE doc SET id = $2 WHERE id = $1`, from, to); err != nil {
		return err
	}
	m.rows[to] = m.rows[from]
	delete(m.rows, from)
	return nil
}

func (m *docModel) setBody(ctx context.Context, tx pgx.Tx, id int64) error {
	r := m.rows[id]
	r.body = m.big()
	if _, err := tx.Exec(ctx, `UPDATE doc SET body = $2 WHERE id = $1`, id, r.body); err != nil {
		return err
	}
	m.rows[id] = r
	return nil
}

func (m *docModel) setN(ctx context.Context, tx pgx.Tx, id int64) error {
	r := m.rows[id]
	r.n++
	if _, err := tx.Exec(ctx, `UPDATE doc SET n = $2 WHERE id = $1`, id, r.n); err != nil {
		return err
	}
	m.rows[id] = r
	return nil
}

func (m *docModel) insert(ctx context.Context, tx pgx.Tx, id int64) error {
	r := docRow{body: m.big(), n: 1}
	if _, err := tx.Exec(ctx, `INSERT INTO doc VALUES ($1, $2, $3)`, id, r.body, r.n); err != nil {
		return err
	}
	m.rows[id] = r
	return nil
}

func (m *docModel) fresh() int64 { m.nextID++; return m.nextID }

// tx runs fn in one transaction and returns an LSN past its commit (taken
// inside it: see DESIGN.md).
func (m *docModel) tx(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) (uint64, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return 0, err
	}
	var s string
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, err
	}
	return uint64(lsn), tx.Commit(ctx)
}

// scripted runs the cases by name, then n random transactions mixing key
// changes with value changes, inserts and deletes.
func (m *docModel) workload(ctx context.Context, conn *pgx.Conn, n int) (uint64, error) {
	var lsn uint64
	run := func(fn func(pgx.Tx) error) error {
		l, err := m.tx(ctx, conn, fn)
		lsn = max(lsn, l)
		return err
	}
	ids := m.ids()
	a, b, c, d := ids[0], ids[1], ids[2], ids[3]
	steps := []func(pgx.Tx) error{
		// A key change alone.
		func(tx pgx.Tx) error { return m.setKey(ctx, tx, a, m.fresh()) },
		// Twice in one transaction.
		func(tx pgx.Tx) error {
			mid := m.fresh()
			if err := m.setKey(ctx, tx, b, mid); err != nil {
				return err
			}
			return m.setKey(ctx, tx, mid, m.fresh())
		},
		// The value changes, and the key in a later transaction.
		func(tx pgx.Tx) error { return m.setBody(ctx, tx, c) },
		func(tx pgx.Tx) error { return m.setKey(ctx, tx, c, m.fresh()) },
		// Both in one transaction, and the old key inserted again.
		func(tx pgx.Tx) error {
			if err := m.setBody(ctx, tx, d); err != nil {
				return err
			}
			if err := m.setKey(ctx, tx, d, m.fresh()); err != nil {
				return err
			}
			return m.insert(ctx, tx, d)
		},
		// Many keys in one statement.
		func(tx pgx.Tx) error {
			moved := map[int64]docRow{}
			for id, r := range m.rows {
				if id%3 == 0 {
					moved[id+100_000] = r
					delete(m.rows, id)
				}
			}
			for id, r := range moved {
				m.rows[id] = r
			}
			_, err := tx.Exec(ctx, `UPDATE doc SET id = id + 100000 WHERE id % 3 = 0`)
			return err
		},
	}
	for _, step := range steps {
		if err := run(step); err != nil {
			return 0, err
		}
	}
	for i := 0; i < n; i++ {
		err := run(func(tx pgx.Tx) error {
			for j := 0; j < 1+m.rng.IntN(4); j++ {
				var err error
				switch r := m.rng.IntN(10); {
				case r < 4 && len(m.rows) > 0:
					err = m.setKey(ctx, tx, m.pick(), m.fresh())
				case r < 6 && len(m.rows) > 0:
					err = m.setBody(ctx, tx, m.pick())
				case r < 8 && len(m.rows) > 0:
					err = m.setN(ctx, tx, m.pick())
				case r < 9 && len(m.rows) > 5:
					id := m.pick()
					if _, err = tx.Exec(ctx, `DELETE FROM doc WHERE id = $1`, id); err == nil {
						delete(m.rows, id)
					}
				default:
					err = m.insert(ctx, tx, m.fresh())
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
		// Sparse transactions: the fetcher hands over small batches, so the
		// halves of a key change often land in different ones.
		time.Sleep(time.Duration(m.rng.IntN(8)) * time.Millisecond)
	}
	return lsn, nil
}

// TestEndToEndKeyChangesWithToast: a table whose TOASTed text column is
// not sent when it did not change (REPLICA IDENTITY DEFAULT), whose keys
// change — alone, twice in one transaction, after a change of the value in
// an earlier transaction or the same one, many in one statement, mixed with
// everything else — mirrored through 4 log partitions, where the two
// halves of a key change usually sit in different partitions, ends equal to
// the source; the log holds the marked deletes.
func TestEndToEndKeyChangesWithToast(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE doc (id bigint PRIMARY KEY, body text, n bigint);
		ALTER TABLE doc ALTER COLUMN body SET STORAGE EXTERNAL`); err != nil {
		t.Fatal(err)
	}
	m := &docModel{rng: rand.New(rand.NewPCG(7, 11)), rows: map[int64]docRow{}}
	for i := 0; i < 20; i++ { // loaded by the initial snapshot
		if _, err := m.tx(t.Context(), conn, func(tx pgx.Tx) error { return m.insert(t.Context(), tx, m.fresh()) }); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cdcd.yaml")
	conf := fmt.Sprintf(`pipeline: e2e
data_dir: %q
source:
  postgres:
    dsn: %q
    slot: %s
    publication: %s
    tables: [public.doc]
log:
  partitions: 4
sink:
  iceberg:
    namespace: mirror
    mode: upsert
    commit_interval: 100ms
    compaction: {interval: 300ms, min_files: 3}
admin:
  listen: "off"
`, dir, dsn, names.Slot, names.Slot)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int) {
		d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		waitFor(t, "streaming", func() bool { return d.SourceStats().Streaming.Load() }, done)
		lsn, err := m.workload(t.Context(), conn, n)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, "caught up", func() bool {
			st := d.Status()
			for _, ts := range st.Tables {
				if ts.Paused {
					t.Fatalf("table %s paused: %s", ts.Table, ts.PausedReason)
				}
			}
			return st.CaughtUp(lsn)
		}, done)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(60)
	run(60) // a restart resumes from the table's offsets
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	want := map[string]string{}
	for id, r := range m.rows {
		want[fmt.Sprint(id)] = fmt.Sprintf("%d|%s|%d", id, r.body, r.n)
	}
	compareMirror(t, "doc", want, mirror(t, cat, table.Identifier{"mirror", "doc"}, ""))
	checkTableInvariants(t, cat, table.Identifier{"mirror", "doc"})

	// The key changes' deletes are marked, and their inserts are in other
	// partitions than their deletes, so the sink had pairs to keep together.
	lg, err := log.Open(filepath.Join(dir, "log"), log.Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(t.Context(), "e2e.public.doc")
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(t.Context(), "e2e.public.doc", p.Partition, off, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				if r.Header(daemon.HeaderKeyChange) != nil && r.Value != nil { // not the delete's tombstone
					marked++
				}
				off = r.Offset + 1
			}
		}
	}
	if marked < 20 {
		t.Errorf("the log holds %d marked key change deletes; the workload made more", marked)
	}
	t.Logf("%d rows, %d marked key change deletes", len(m.rows), marked)
}
