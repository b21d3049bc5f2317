package restcatalog_test

import (
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/internal/restcatalog"
)

func start(t *testing.T, opts restcatalog.Options) (*restcatalog.Server, string) {
	t.Helper()
	if opts.Warehouse == "" {
		opts.Warehouse = "file://" + t.TempDir()
	}
	srv := restcatalog.New(opts)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

func client(t *testing.T, uri string, opts ...rest.Option) *rest.Catalog {
	t.Helper()
	cat, err := rest.NewCatalog(t.Context(), "test", uri, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	return cat
}

var schema = iceberg.NewSchemaWithIdentifiers(1, []int{1},
	iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String},
)

func TestNamespaces(t *testing.T) {
	_, uri := start(t, restcatalog.Options{})
	cat := client(t, uri)
	ctx := t.Context()
	if err := cat.CreateNamespace(ctx, table.Identifier{"a"}, iceberg.Properties{"owner": "cdcd"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"a", "b"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"a"}, nil); !errors.Is(err, catalog.ErrNamespaceAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if ok, err := cat.CheckNamespaceExists(ctx, table.Identifier{"a", "b"}); err != nil || !ok {
		t.Fatalf("a.b exists: %t %v", ok, err)
	}
	if ok, err := cat.CheckNamespaceExists(ctx, table.Identifier{"zz"}); err != nil || ok {
		t.Fatalf("zz exists: %t %v", ok, err)
	}
	props, err := cat.LoadNamespaceProperties(ctx, table.Identifier{"a"})
	if err != nil || props["owner"] != "cdcd" {
		t.Fatalf("props %v %v", props, err)
	}
	top, err := cat.ListNamespaces(ctx, nil)
	if err != nil || len(top) != 1 || !slices.Equal(top[0], table.Identifier{"a"}) {
		t.Fatalf("top level: %v %v", top, err)
	}
	sub, err := cat.ListNamespaces(ctx, table.Identifier{"a"})
	if err != nil || len(sub) != 1 || !slices.Equal(sub[0], table.Identifier{"a", "b"}) {
		t.Fatalf("under a: %v %v", sub, err)
	}
	if _, err := cat.CreateTable(ctx, table.Identifier{"a", "b", "t"}, schema); err != nil {
		t.Fatal(err)
	}
	if err := cat.DropNamespace(ctx, table.Identifier{"a", "b"}); !errors.Is(err, catalog.ErrNamespaceNotEmpty) {
		t.Fatalf("drop non-empty: %v", err)
	}
	if err := cat.DropTable(ctx, table.Identifier{"a", "b", "t"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.DropNamespace(ctx, table.Identifier{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := cat.CheckNamespaceExists(ctx, table.Identifier{"a", "b"}); ok {
		t.Fatal("a.b still exists")
	}
}

// TestTablesAndCommits: create, load, list, commit (a new metadata file
// each, with the previous one in the metadata log), stale commits refused
// as conflicts, staged creates, drops.
func TestTablesAndCommits(t *testing.T) {
	dir := t.TempDir()
	srv, uri := start(t, restcatalog.Options{Warehouse: "file://" + dir})
	cat := client(t, uri)
	ctx := t.Context()
	ident := table.Identifier{"ns", "t"}
	if _, err := cat.CreateTable(ctx, ident, schema); !errors.Is(err, catalog.ErrNoSuchNamespace) {
		t.Fatalf("create in a missing namespace: %v", err)
	}
	if err := cat.CreateNamespace(ctx, table.Identifier{"ns"}, nil); err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.CreateTable(ctx, ident, schema, catalog.WithProperties(iceberg.Properties{"format-version": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Location() != "file://"+dir+"/ns.db/t" || tbl.Metadata().Version() != 3 {
		t.Fatalf("location %s, version %d", tbl.Location(), tbl.Metadata().Version())
	}
	if _, err := cat.CreateTable(ctx, ident, schema); !errors.Is(err, catalog.ErrTableAlreadyExists) {
		t.Fatalf("second create: %v", err)
	}
	if fields := tbl.Schema().IdentifierFieldIDs; len(fields) != 1 {
		t.Fatalf("identifier fields %v", fields)
	}

	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{"k": "v1"}); err != nil {
		t.Fatal(err)
	}
	tbl2, err := tx.Commit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tbl2.Properties()["k"] != "v1" || !strings.Contains(tbl2.MetadataLocation(), "/metadata/00001-") {
		t.Fatalf("after commit: %v at %s", tbl2.Properties(), tbl2.MetadataLocation())
	}
	if log := slices.Collect(tbl2.Metadata().PreviousFiles()); len(log) != 1 || log[0].MetadataFile != tbl.MetadataLocation() {
		t.Fatalf("metadata log %v", log)
	}
	if _, err := os.Stat(strings.TrimPrefix(tbl2.MetadataLocation(), "file://")); err != nil {
		t.Fatal(err)
	}
	loaded, err := cat.LoadTable(ctx, ident)
	if err != nil || loaded.MetadataLocation() != tbl2.MetadataLocation() {
		t.Fatalf("load: %v %v", loaded, err)
	}

	// A stale requirement is a conflict (409), which the client reports
	// as a retryable commit failure; nothing changes.
	_, _, err = cat.CommitTable(ctx, ident, []table.Requirement{table.AssertTableUUID(uuid.New())},
		[]table.Update{table.NewSetPropertiesUpdate(iceberg.Properties{"k": "lost"})})
	if !errors.Is(err, table.ErrCommitFailed) {
		t.Fatalf("stale commit: %v", err)
	}
	if loaded, _ := cat.LoadTable(ctx, ident); loaded.Properties()["k"] != "v1" {
		t.Fatal("a refused commit changed the table")
	}
	if _, _, err := cat.CommitTable(ctx, table.Identifier{"ns", "nope"}, nil, nil); !errors.Is(err, catalog.ErrNoSuchTable) {
		t.Fatalf("commit to a missing table: %v", err)
	}

	// A staged create is committed with assert-create.
	staged := table.Identifier{"ns", "staged"}
	st, err := cat.CreateTable(ctx, staged, schema, catalog.WithStagedUpdates(table.NewSetPropertiesUpdate(iceberg.Properties{"s": "1"})))
	if err != nil {
		t.Fatal(err)
	}
	if st.Properties()["s"] != "1" || filepath.Base(filepath.Dir(st.MetadataLocation())) != "metadata" {
		t.Fatalf("staged: %v at %s", st.Properties(), st.MetadataLocation())
	}

	var names []string
	for id, err := range cat.ListTables(ctx, table.Identifier{"ns"}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, id[len(id)-1])
	}
	if !slices.Equal(names, []string{"staged", "t"}) {
		t.Fatalf("tables %v", names)
	}
	if err := cat.DropTable(ctx, ident); err != nil {
		t.Fatal(err)
	}
	if ok, err := cat.CheckTableExists(ctx, ident); err != nil || ok {
		t.Fatalf("dropped table exists: %t %v", ok, err)
	}
	if n := srv.Calls()["POST /v1/namespaces/{ns}/tables/{table}"]; n != 4 {
		t.Errorf("%d commits served, want 4", n)
	}
}

func TestAuth(t *testing.T) {
	_, uri := start(t, restcatalog.Options{Token: "tok", ClientID: "id", ClientSecret: "secret"})
	client(t, uri, rest.WithOAuthToken("tok"))
	client(t, uri, rest.WithCredential("id:secret"))
	for _, opt := range []rest.Option{rest.WithOAuthToken("bad"), rest.WithCredential("id:bad"), rest.WithCredential("other:secret")} {
		if _, err := rest.NewCatalog(t.Context(), "test", uri, opt); !errors.Is(err, rest.ErrUnauthorized) && !errors.Is(err, rest.ErrOAuthError) {
			t.Errorf("bad credentials: %v", err)
		}
	}
	if _, err := rest.NewCatalog(t.Context(), "test", uri); !errors.Is(err, rest.ErrUnauthorized) {
		t.Errorf("no credentials: %v", err)
	}
}
