package main

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// memStore is an in-memory schema.Store.
type memStore struct{ keys, values [][]byte }

func (m *memStore) Load(_ context.Context, fn func(k, v []byte) error) error {
	for i := range m.keys {
		if err := fn(m.keys[i], m.values[i]); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) Append(_ context.Context, k, v []byte) error {
	m.keys, m.values = append(m.keys, k), append(m.values, v)
	return nil
}

// registryServer serves a registry's API as the daemon's admin listener
// would, with one table's key and value registered.
func registryServer(t *testing.T) (*schema.Registry, *httptest.Server, *schema.Table) {
	t.Helper()
	ctx := context.Background()
	reg, err := schema.OpenRegistry(ctx, &memStore{})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &schema.Table{Namespace: "public", Name: "orders", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64, SourceType: "int8"},
		{Name: "qty", Kind: schema.Int64, Nullable: true, SourceType: "int8"},
	}, Key: []int{0}}
	ks, _ := schema.KeySchema(tbl, "shop.public.orders")
	vs, _ := schema.ValueSchema(tbl, "shop.public.orders")
	if _, err := reg.Register(ctx, "shop.public.orders-key", ks); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, "shop.public.orders-value", vs); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(schema.NewHandler(reg))
	t.Cleanup(srv.Close)
	return reg, srv, tbl
}

func runSchema(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := schemaCommand(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestSchemaCLI(t *testing.T) {
	reg, srv, tbl := registryServer(t)
	admin := "--admin=" + strings.TrimPrefix(srv.URL, "http://")
	must := func(stdin string, args ...string) string {
		t.Helper()
		code, out, errOut := runSchema(t, stdin, args...)
		if code != 0 {
			t.Fatalf("cdcd schema %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}

	out := must("", "list", admin)
	for _, want := range []string{"global compatibility: BACKWARD", "shop.public.orders-key", "shop.public.orders-value  1", "BACKWARD (global)"} {
		if !strings.Contains(out, want) {
			t.Errorf("list lacks %q:\n%s", want, out)
		}
	}

	out = must("", "show", "shop.public.orders-value", admin)
	if !strings.Contains(out, "version:       1") || !strings.Contains(out, "id:            2") || !strings.Contains(out, `"name": "Envelope"`) {
		t.Errorf("show:\n%s", out)
	}

	// A narrowing ALTER: the emitter's Register is refused...
	narrowed := *tbl
	narrowed.Columns = []schema.Column{tbl.Columns[0], {Name: "qty", Kind: schema.Int32, Nullable: true, SourceType: "int4"}}
	vs2, _ := schema.ValueSchema(&narrowed, "shop.public.orders")
	dir := t.TempDir()
	file := filepath.Join(dir, "v2.avsc")
	if err := os.WriteFile(file, []byte(vs2), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runSchema(t, "", "test", "--subject", "shop.public.orders-value", file, admin)
	if code != 1 || !strings.Contains(out, "INCOMPATIBLE") || !strings.Contains(out, "before.qty: type changed from long to int") {
		t.Fatalf("test: exit %d\n%s", code, out)
	}
	if _, err := reg.Register(context.Background(), "shop.public.orders-value", vs2); !errors.Is(err, schema.ErrIncompatible) {
		t.Fatal(err)
	}
	out = must("", "list", admin)
	if !strings.Contains(out, "REFUSED") || !strings.Contains(out, "cdcd schema accept shop.public.orders-value") {
		t.Errorf("list after a refusal:\n%s", out)
	}
	out = must("", "rejected", admin)
	if !strings.Contains(out, "incompatible with version 1") || !strings.Contains(out, "long to int") {
		t.Errorf("rejected:\n%s", out)
	}

	// ...and resolved, either way.
	out = must("", "set-compat", "--subject", "shop.public.orders-value", "none", admin)
	if out != "shop.public.orders-value: compatibility NONE\n" {
		t.Errorf("set-compat: %q", out)
	}
	if out := must(vs2, "test", "--subject", "shop.public.orders-value", "-", admin); !strings.Contains(out, "compatible with") {
		t.Errorf("test under NONE: %s", out)
	}
	must("", "set-compat", "--subject", "shop.public.orders-value", "--reset", admin)
	out = must("", "accept", "shop.public.orders-value", admin)
	if out != "shop.public.orders-value: accepted as version 2 (id 3)\n" {
		t.Errorf("accept: %q", out)
	}
	if id, err := reg.Register(context.Background(), "shop.public.orders-value", vs2); err != nil || id != 3 {
		t.Fatalf("the emitter's retry: %d %v", id, err)
	}
	if out := must("", "rejected", admin); out != "no refused schemas\n" {
		t.Errorf("rejected after accept: %q", out)
	}
	must("", "set-compat", "FULL_TRANSITIVE", admin)
	if l, _ := reg.Compatibility(""); l != schema.FullTransitive {
		t.Errorf("global level %s", l)
	}
	if out := must("", "show", admin, "shop.public.orders-value", "1"); !strings.Contains(out, "version:       1") {
		t.Errorf("show v1 (flags first): %s", out)
	}
}

func TestSchemaCLIAdminFromConfig(t *testing.T) {
	_, srv, _ := registryServer(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "cdcd.yaml")
	src := `pipeline: shop
data_dir: ` + dir + `
source:
  postgres:
    dsn: postgres://cdc:${CDCD_TEST_UNSET_SECRET}@127.0.0.1:5432/shop
    tables: [public.orders]
sink:
  iceberg:
    warehouse: file://` + dir + `/warehouse
    mode: append
admin:
  listen: ` + strings.TrimPrefix(srv.URL, "http://") + "\n"
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runSchema(t, "", "list", "-c", cfg)
	if code != 0 || !strings.Contains(out, "shop.public.orders-value") {
		t.Fatalf("list -c: exit %d\n%s\n%s", code, out, errOut)
	}
	off := filepath.Join(dir, "off.yaml")
	_ = os.WriteFile(off, []byte(strings.Replace(src, "listen: "+strings.TrimPrefix(srv.URL, "http://"), `listen: "off"`, 1)), 0o644)
	if code, _, errOut := runSchema(t, "", "list", "-c", off); code != 2 || !strings.Contains(errOut, "admin.listen: off") {
		t.Fatalf("admin off: exit %d %s", code, errOut)
	}
}

func TestSchemaCLIUsage(t *testing.T) {
	_, srv, _ := registryServer(t)
	admin := "--admin=" + srv.URL
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"show", admin},
		{"set-compat", "SIDEWAYS", admin},
		{"set-compat", "--reset", admin},
		{"test", "--subject", "x", admin},
		{"list", "--admin", "no-port"},
		{"list", "--bogus"},
	} {
		if code, _, _ := runSchema(t, "", args...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runSchema(t, "", "show", "nope-value", admin); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("unknown subject: exit %d %s", code, errOut)
	}
	if code, _, errOut := runSchema(t, "", "list", "--admin", "127.0.0.1:1"); code != 1 || errOut == "" {
		t.Errorf("nothing listening: exit %d %s", code, errOut)
	}
	if code, out, _ := runSchema(t, "", "--help"); code != 0 && out == "" {
		t.Errorf("help: exit %d", code)
	}
}
