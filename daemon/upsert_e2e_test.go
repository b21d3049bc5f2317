package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/cdcd-dev/cdcd/internal/icebergcheck"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/internal/s3test"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// mirror reads an upsert table with iceberg-go's scan: key -> the row
// rendered "col|col|...", failing on a key seen twice.
func mirror(t *testing.T, cat catalog.Catalog, ident table.Identifier, keyPrefix string) map[string]string {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatalf("load %v: %v", ident, err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatalf("scan %v: %v", ident, err)
	}
	defer at.Release()
	out := map[string]string{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			vals := make([]string, rec.NumCols())
			for j := range vals {
				vals[j] = render(rec.Column(j), i)
			}
			k := keyPrefix + vals[0]
			if _, dup := out[k]; dup {
				t.Fatalf("%v: key %s appears twice", ident, k)
			}
			out[k] = strings.Join(vals, "|")
		}
	}
	return out
}

// expected renders the model's live rows like mirror does.
func (m *model) expected() (acct, kv map[string]string) {
	acct, kv = map[string]string{}, map[string]string{}
	for id, row := range m.acct {
		acct[fmt.Sprint("acct/", id)] = fmt.Sprint(id) + "|" + strings.Join(row, "|")
	}
	for k, row := range m.kv {
		kv["kv/"+k] = k + "|" + strings.Join(row, "|")
	}
	return acct, kv
}

func compareMirror(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			bad++
			if bad <= 5 {
				t.Errorf("%s %s: got %q, want %q", what, k, g, w)
			}
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			bad++
			if bad <= 5 {
				t.Errorf("%s %s: in Iceberg (%q) but not in the source", what, k, g)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d rows differ (source has %d, Iceberg %d)", what, bad, len(want), len(got))
	}
}

// checkTableInvariants: at most one live deletion vector per data file,
// none referencing a removed file, and cdcd.offsets never moving backwards
// along the snapshot history.
func checkTableInvariants(t *testing.T, cat catalog.Catalog, ident table.Identifier) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return
	}
	problems, err := icebergcheck.FileProblems(t.Context(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%v: %s", ident, p)
	}
	// Offsets along the ancestry, newest first: each older one <= newer.
	var newer map[string]int64
	meta := tbl.Metadata()
	for s := snap; s != nil; {
		if off, ok := s.Summary.Properties[sinkice.PropOffsets]; ok {
			cur := map[string]int64{}
			if err := json.Unmarshal([]byte(off), &cur); err != nil {
				t.Fatal(err)
			}
			for p, o := range cur {
				if newer != nil && o > newer[p] {
					t.Errorf("%v: offsets went backwards: %s then %v", ident, off, newer)
				}
			}
			newer = cur
		}
		if s.ParentSnapshotID == nil {
			break
		}
		s = meta.SnapshotByID(*s.ParentSnapshotID)
	}
}

func TestEndToEndUpsert(t *testing.T) {
	for _, tc := range []struct {
		version int
		s3      bool
	}{{3, false}, {2, false}, {3, true}} {
		version := tc.version
		name := fmt.Sprintf("v%d", version)
		if tc.s3 {
			name += "-s3"
		}
		t.Run(name, func(t *testing.T) {
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
			m := newModel(uint64(10 + version))
			if _, err := m.run(t.Context(), conn, 30, 0); err != nil { // loaded by the initial snapshot
				t.Fatal(err)
			}
			dir := t.TempDir()
			path := writeConfigMode(t, dir, dsn, names.Slot, "off", "upsert", version)
			var store *s3test.Server
			if tc.s3 {
				// The warehouse on an S3 server (gofakes3) the test runs.
				store = s3test.New(t, "lake")
				b, _ := os.ReadFile(path)
				conf := strings.Replace(string(b), "    namespace: mirror\n", fmt.Sprintf(
					"    namespace: mirror\n    warehouse: s3://lake/wh\n    s3: {endpoint: %q, region: %s, access_key_id: %s, secret_access_key: %s}\n",
					store.URL, s3test.Region, s3test.AccessKeyID, s3test.SecretAccessKey), 1)
				if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
					t.Fatal(err)
				}
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
			run(200)
			run(200) // a clean restart resumes from the table's offsets
			cc := *openCatalog(t, dir)
			if tc.s3 {
				cc.Warehouse = "s3://lake/wh"
				cc.S3 = sinkice.S3Config{Endpoint: store.URL, Region: s3test.Region, PathStyle: true,
					AccessKeyID: s3test.AccessKeyID, SecretAccessKey: s3test.SecretAccessKey}
			}
			cat, err := sinkice.OpenCatalog(t.Context(), cc)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.(interface{ Close() error }).Close()
			if tc.s3 {
				keys, err := store.Keys("lake", "wh/")
				if err != nil || len(keys) < 10 {
					t.Fatalf("%d objects in the bucket: %v", len(keys), err)
				}
				if entries, _ := os.ReadDir(filepath.Join(dir, "warehouse")); len(entries) > 0 {
					t.Errorf("files landed in the local warehouse with the warehouse on S3")
				}
			}
			acct, kv := m.expected()
			compareMirror(t, "acct", acct, mirror(t, cat, table.Identifier{"mirror", "acct"}, "acct/"))
			compareMirror(t, "kv", kv, mirror(t, cat, table.Identifier{"mirror", "kv"}, "kv/"))
			checkTableInvariants(t, cat, table.Identifier{"mirror", "acct"})
			checkTableInvariants(t, cat, table.Identifier{"mirror", "kv"})
			checkIndexes(t, cfg, map[string]int{"mirror.acct": len(acct), "mirror.kv": len(kv)})
			t.Logf("v%d: %d acct rows, %d kv rows, %d truncates", version, len(acct), len(kv), m.truncates)
		})
	}
}

// TestKillNineUpsertFailpoints kills the daemon at each dangerous point of
// the upsert commit — after a data file is written, after the Puffin file,
// just before the catalog commit, just after it (before the key index is
// updated) — and at random moments, while a workload runs; after each
// restart it resumes, and at the end the Iceberg tables equal the source.
func TestKillNineUpsertFailpoints(t *testing.T) {
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
	admin := freeAddr(t)
	cfgPath := writeConfigMode(t, dir, dsn, names.Slot, admin, "upsert", 3)
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("daemon log:\n%s", b)
		}
	}()
	m := newModel(21)
	if _, err := m.run(t.Context(), conn, 20, 0); err != nil {
		t.Fatal(err)
	}
	work := make(chan error, 1)
	var stopped atomic.Bool
	c := startChild(t, cfgPath, admin, logFile)
	waitFor(t, "first status", func() bool { st, err := c.status(); return err == nil && st.Source.Flushed > 0 }, c.done)
	go func() {
		defer close(work)
		for !stopped.Load() {
			if _, err := m.run(context.Background(), conn, 1, 2*time.Millisecond); err != nil {
				work <- err
				return
			}
		}
	}()
	points := []string{
		"sink.acct.after-data-file@2", "sink.acct.after-puffin-file@2", "sink.acct.before-catalog-commit@3",
		"sink.acct.after-catalog-commit@2", "", "sink.acct.after-compaction-commit@1", "sink.after-catalog-commit@4",
		"sink.acct.after-catalog-commit@3", "sink.acct.after-compaction-commit@1", "",
	}
	armed := ""
	for i, fp := range points {
		// The running child is killed: by its armed failpoint (given up to
		// 30 s to reach it: a slow start on a busy machine must not turn
		// the point into a random kill), or by SIGKILL after a random while.
		wait := time.Duration(400+150*i) * time.Millisecond
		if armed != "" {
			wait = 30 * time.Second
		}
		select {
		case <-c.done:
		case <-time.After(wait):
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			<-c.done
		}
		fmt.Fprintf(logFile, "---- test: daemon died; restarting with %s=%q\n", failpoint.Env, fp)
		c = startChild(t, cfgPath, admin, logFile, failpoint.Env+"="+fp)
		armed = fp
	}
	stopped.Store(true)
	if err := <-work; err != nil {
		t.Fatal(err)
	}
	select { // the last start may still die at its failpoint
	case <-c.done:
		c = startChild(t, cfgPath, admin, logFile)
	case <-time.After(2 * time.Second):
	}
	lsn, err := m.run(t.Context(), conn, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool {
		st, err := c.status()
		return err == nil && st.CaughtUp(lsn)
	}, c.done)
	// The operator surface: compact on request, and the maintenance status.
	resp, err := http.Post("http://"+admin+"/cdcd/compact/mirror.acct", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Errorf("compact request: %s", resp.Status)
	}
	var ms []daemon.TableMaintenance
	waitFor(t, "maintenance status", func() bool {
		resp, err := http.Get("http://" + admin + "/cdcd/maintenance")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		ms = nil
		if json.NewDecoder(resp.Body).Decode(&ms) != nil || len(ms) != 2 {
			return false
		}
		for _, m := range ms {
			if m.Table == "mirror.acct" && m.Files != nil && m.Files.DataFiles > 0 && m.Files.Rows > 0 {
				return true
			}
		}
		return false
	}, c.done)
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	b, _ := os.ReadFile(logFile.Name())
	if n := strings.Count(string(b), "msg=compacted"); n < 1 {
		t.Errorf("no compaction ran")
	}
	if n := strings.Count(string(b), "failpoint: killing the process at sink.acct.after-catalog-commit"); n < 1 {
		t.Errorf("the after-catalog-commit failpoint never fired on acct")
	}
	if n := strings.Count(string(b), "failpoint: killing"); n < 3 {
		t.Errorf("only %d failpoints fired", n)
	}
	cat, err := sinkice.OpenCatalog(t.Context(), *openCatalog(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer cat.(interface{ Close() error }).Close()
	acct, kv := m.expected()
	compareMirror(t, "acct", acct, mirror(t, cat, table.Identifier{"mirror", "acct"}, "acct/"))
	compareMirror(t, "kv", kv, mirror(t, cat, table.Identifier{"mirror", "kv"}, "kv/"))
	checkTableInvariants(t, cat, table.Identifier{"mirror", "acct"})
	checkTableInvariants(t, cat, table.Identifier{"mirror", "kv"})
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	checkIndexes(t, cfg, map[string]int{"mirror.acct": len(acct), "mirror.kv": len(kv)})
}

// checkIndexes runs `cdcd maintenance verify`'s check on every table of a
// stopped pipeline: each index right, with rows[table] keys.
func checkIndexes(t *testing.T, cfg *config.Config, rows map[string]int) {
	t.Helper()
	checks, err := daemon.VerifyIndexes(t.Context(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != len(rows) {
		t.Fatalf("%d indexes checked, want %d", len(checks), len(rows))
	}
	for _, c := range checks {
		for _, p := range c.Problems {
			t.Errorf("%s: key index: %s", c.Table, p)
		}
		if c.IndexKeys != int64(rows[c.Table]) {
			t.Errorf("%s: the index holds %d keys, the source %d rows", c.Table, c.IndexKeys, rows[c.Table])
		}
	}
}
