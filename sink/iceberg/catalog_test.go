package iceberg

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/internal/restcatalog"
	"github.com/cdcd-dev/cdcd/schema"
)

func TestMain(m *testing.M) {
	poisonWindows = true // every window handed back is overwritten (windows.go)
	pgtest.Main(m)
}

// openTest opens cfg and closes the catalog when the test ends.
func openTest(t *testing.T, cfg CatalogConfig) catalog.Catalog {
	t.Helper()
	cat, err := OpenCatalog(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cat.(catalog.Closer).Close(); err != nil {
			t.Errorf("close catalog: %v", err)
		}
	})
	return cat
}

// randomizedUpsert runs TestUpsertRandomized's workload on cat: random
// inserts, updates (some with unchanged columns), deletes, a restart every
// six rounds; then the table, read back with iceberg-go's scan, must equal
// the model, and (v3) hold at most one live deletion vector per data file.
// It returns the table's identifier.
func randomizedUpsert(t *testing.T, cat catalog.Catalog, version, rounds int) table.Identifier {
	t.Helper()
	ident := table.Identifier{"ns", fmt.Sprintf("kv_v%d", version)}
	open := func(indexDir string) *tableWriter {
		w := upsertWriter(t, cat, version, 1)
		w.cfg.Ident = ident
		if indexDir != "" {
			w.s.cfg.IndexDir = indexDir
		}
		return w
	}
	w := open("")
	rng := rand.New(rand.NewPCG(uint64(version), 11))
	want := model{}
	var off int64
	for round := range rounds {
		w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if round%6 == 5 {
			w.close()
			w = open(w.s.cfg.IndexDir)
			if err := w.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			if w.next[0] != off {
				t.Fatalf("resumed at %d, want %d", w.next[0], off)
			}
		}
	}
	w.close()
	compareModel(t, want, scanTable(t, cat, ident))
	if version == 3 {
		checkInvariants(t, cat, ident)
	}
	return ident
}

// TestPostgresCatalog runs the upsert workload on iceberg-go's SQL
// catalog in a real PostgreSQL, and checks that a second OpenCatalog on
// the same database sees the same tables and continues them.
func TestPostgresCatalog(t *testing.T) {
	dsn := pgtest.NewDB(t)
	cfg := CatalogConfig{Type: "sql", URI: dsn, Name: "pg", Warehouse: "file://" + t.TempDir()}
	cat := openTest(t, cfg)
	var idents []table.Identifier
	for _, version := range []int{3, 2} {
		idents = append(idents, randomizedUpsert(t, cat, version, 25))
	}

	other := openTest(t, cfg)
	for _, ident := range idents {
		a, err := cat.LoadTable(t.Context(), ident)
		if err != nil {
			t.Fatal(err)
		}
		b, err := other.LoadTable(t.Context(), ident)
		if err != nil {
			t.Fatal(err)
		}
		if a.MetadataLocation() != b.MetadataLocation() {
			t.Errorf("%v: the second catalog sees %s, the first %s", ident, b.MetadataLocation(), a.MetadataLocation())
		}
	}
	n := 0
	for ident, err := range other.ListTables(t.Context(), table.Identifier{"ns"}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		_ = ident
	}
	if n != len(idents) {
		t.Errorf("the second catalog lists %d tables, want %d", n, len(idents))
	}
	// A commit through the second catalog is seen by the first.
	w := upsertWriter(t, other, 3, 1)
	w.cfg.Ident = idents[0]
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	before := scanTable(t, cat, idents[0])
	w.buf = []change{kvInsert(1000, "from the second catalog", w.next[0])}
	w.next[0]++
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.close()
	before[1000] = "from the second catalog|∅"
	compareModel(t, before, scanTable(t, cat, idents[0]))
}

// TestRESTCatalog runs the upsert workload through iceberg-go's REST
// client against restcatalog over HTTP, authenticated with OAuth2 client
// credentials; every table change is a REST commit.
func TestRESTCatalog(t *testing.T) {
	wh := "file://" + t.TempDir()
	srv := restcatalog.New(restcatalog.Options{Warehouse: wh, Token: "t0ken", ClientID: "cdcd", ClientSecret: "s3cret"})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cfg := CatalogConfig{Type: "rest", URI: hs.URL, Name: "rest", Warehouse: wh, Credential: "cdcd:s3cret"}
	cat := openTest(t, cfg)
	for _, version := range []int{3, 2} {
		ident := randomizedUpsert(t, cat, version, 25)
		tbl, err := cat.LoadTable(t.Context(), ident)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(tbl.Location(), wh+"/ns.db/") {
			t.Errorf("table at %s, not under the warehouse %s", tbl.Location(), wh)
		}
	}
	calls := srv.Calls()
	if calls["POST /v1/oauth/tokens"] == 0 || calls["POST /v1/namespaces/{ns}/tables"] != 2 || calls["POST /v1/namespaces/{ns}/tables/{table}"] < 50 {
		t.Errorf("the client did not go through the REST server as expected: %v", calls)
	}
	// A bearer token works as well, and sees the same tables.
	tokenCat := openTest(t, CatalogConfig{Type: "rest", URI: hs.URL, Name: "rest", Warehouse: wh, Token: "t0ken"})
	if ok, err := tokenCat.CheckTableExists(t.Context(), table.Identifier{"ns", "kv_v3"}); err != nil || !ok {
		t.Fatalf("table exists: %t, %v", ok, err)
	}
}

// TestOpenCatalogErrors: each way of failing to open a catalog is caught by
// OpenCatalog, quickly, with its class and a message saying what to do,
// and without showing secrets.
func TestOpenCatalogErrors(t *testing.T) {
	pg := pgtest.Server(t)
	wh := "file://" + t.TempDir()
	srv := restcatalog.New(restcatalog.Options{Warehouse: wh, Token: "t0ken", ClientID: "cdcd", ClientSecret: "s3cret"})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	closed := httptest.NewServer(nil)
	closed.Close() // a port nobody listens on

	cases := []struct {
		name  string
		cfg   CatalogConfig
		class error
		says  []string
	}{
		{"postgres unreachable", CatalogConfig{URI: "postgres://cdcd:s3cret@" + closed.Listener.Addr().String() + "/x"},
			ErrCatalogUnreachable, []string{"cannot reach PostgreSQL at postgres://cdcd@127.0.0.1:", "check the host and port in sink.iceberg.catalog.uri"}},
		{"postgres unknown role", CatalogConfig{URI: strings.Replace(pg.DSN("postgres"), "://postgres@", "://nobody:s3cret@", 1)},
			ErrCatalogAuth, []string{"refused the login", `role "nobody" does not exist`, "check the user and password in sink.iceberg.catalog.uri"}},
		{"postgres no database", CatalogConfig{URI: pg.DSN("no_such_db")},
			ErrCatalog, []string{`database "no_such_db" does not exist`, `CREATE DATABASE "no_such_db"`}},
		{"sql bad scheme", CatalogConfig{URI: "mysql://h/db"},
			ErrCatalog, []string{"a sql catalog needs a sqlite:// or postgres:// URI, got mysql://h/db"}},
		{"rest unreachable", CatalogConfig{Type: "rest", URI: closed.URL},
			ErrCatalogUnreachable, []string{"cannot reach the REST catalog at " + closed.URL, "that the catalog server is running"}},
		{"rest wrong credential", CatalogConfig{Type: "rest", URI: hs.URL, Credential: "cdcd:wrong-s3cret"},
			ErrCatalogAuth, []string{"refused the credentials", "invalid_client", "check sink.iceberg.catalog.credential"}},
		{"rest wrong token", CatalogConfig{Type: "rest", URI: hs.URL, Token: "wrong-s3cret"},
			ErrCatalogAuth, []string{"refused the credentials", "NotAuthorizedException", "sink.iceberg.catalog.token"}},
		{"rest no credentials", CatalogConfig{Type: "rest", URI: hs.URL},
			ErrCatalogAuth, []string{"refused the credentials"}},
		{"rest unknown warehouse", CatalogConfig{Type: "rest", URI: hs.URL, Token: "t0ken", Warehouse: "elsewhere"},
			ErrCatalog, []string{`unknown warehouse "elsewhere"`, "the warehouse is one it knows"}},
		{"rest not a catalog", CatalogConfig{Type: "rest", URI: hs.URL + "/v1", Token: "t0ken"},
			ErrCatalog, []string{"answered with an error", "base URL (without /v1)"}},
		{"unknown type", CatalogConfig{Type: "hive"}, ErrCatalog, []string{`catalog type "hive": use sql or rest`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Type != "rest" && tc.cfg.Warehouse == "" {
				tc.cfg.Warehouse = wh
			}
			start := time.Now()
			cat, err := OpenCatalog(t.Context(), tc.cfg)
			if err == nil {
				cat.(catalog.Closer).Close()
				t.Fatal("opened")
			}
			checkOpenError(t, err, start, tc.class, tc.says)
		})
	}
}

// checkOpenError checks an OpenCatalog error's class, its message, that it
// shows no secret, and that it came in well under openTimeout.
func checkOpenError(t *testing.T, err error, start time.Time, class error, says []string) {
	t.Helper()
	t.Log(err)
	if !errors.Is(err, class) {
		t.Errorf("class: %v is not %v", err, class)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q does not say %q", err, s)
		}
	}
	if strings.ContainsAny(err.Error(), "\n\t") {
		t.Errorf("message is not one line: %q", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("message shows a secret: %q", err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %s to fail", d)
	}
}

func TestSafeURI(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5/db?sslmode=require&password=x": "postgres://u@h:5/db",
		"https://tok@cat.example.com/api":                   "https://cat.example.com/api",
		"sqlite://./data/catalog.db":                        "sqlite://./data/catalog.db",
		"http://127.0.0.1:9000":                             "http://127.0.0.1:9000",
	} {
		if got := safeURI(in); got != want {
			t.Errorf("safeURI(%q) = %q, want %q", in, got, want)
		}
	}
}

// kvInsert is an insert of (id, v, null) into kv at offset off.
func kvInsert(id int64, v string, off int64) change {
	c := change{table: kv, offset: off, env: &schema.Envelope{Op: 'c', After: []any{id, v, nil}}}
	c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
	return c
}

// TestSQLiteConcurrentCreate: the table loops start together and each
// creates its table in the embedded catalog at once. A transaction that
// reads before it writes could not wait for the lock under WAL (SQLite
// returns SQLITE_BUSY at once rather than call the busy handler when it
// cannot upgrade a read to a write), so a table paused for 30 s at its
// first start (seen in the crash suite). Transactions take the write lock
// when they begin now, and wait for it.
func TestSQLiteConcurrentCreate(t *testing.T) {
	cat := testCatalog(t)
	if err := cat.CreateNamespace(t.Context(), table.Identifier{"ns"}, nil); err != nil {
		t.Fatal(err)
	}
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	const n = 16
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			id := table.Identifier{"ns", fmt.Sprintf("t%d", i)}
			if _, err := cat.CreateTable(t.Context(), id, sc); err != nil {
				errs <- fmt.Errorf("create %v: %w", id, err)
				return
			}
			for range 5 {
				tbl, err := cat.LoadTable(t.Context(), id)
				if err != nil {
					errs <- err
					return
				}
				tx := tbl.NewTransaction()
				if err := tx.SetProperties(iceberg.Properties{"k": fmt.Sprint(i)}); err != nil {
					errs <- err
					return
				}
				if _, err := tx.Commit(t.Context()); err != nil {
					errs <- fmt.Errorf("commit %v: %w", id, err)
					return
				}
			}
			errs <- nil
		}()
	}
	close(start)
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
