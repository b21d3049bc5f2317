package config

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestDefaultsGolden loads the smallest valid config and compares the
// effective config, every default written out, with a golden file. The
// working directory is written as $CWD (the warehouse is made absolute).
func TestDefaultsGolden(t *testing.T) {
	c, err := Load("testdata/minimal.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.ReplaceAll(c.String(), filepath.ToSlash(cwd), "$CWD")
	const golden = "testdata/minimal.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("effective config differs from %s (go test -update to accept):\n%s", golden, got)
	}
	ic := c.Sink.Iceberg
	if ns, table := ic.TableIdent(c.Source.Postgres.Tables[1]); ns+"."+table != "cdc.sales_invoices" {
		t.Errorf("sales.invoices lands in %s.%s", ns, table)
	}
}

// TestExampleFile loads the example from DESIGN.md kept in testdata.
func TestExampleFile(t *testing.T) {
	c, err := Load("testdata/cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Pipeline != "shop" || len(c.Source.Postgres.Tables) != 2 || c.Sink.Iceberg.Mode != "append" {
		t.Errorf("loaded %s", c)
	}
	cwd, _ := os.Getwd()
	if want := "file://" + filepath.ToSlash(cwd) + "/cdcd-data/warehouse"; c.Sink.Iceberg.Warehouse != want {
		t.Errorf("warehouse %q, want %q (relative file:// made absolute)", c.Sink.Iceberg.Warehouse, want)
	}
}

func TestDefaultsFollowDataDir(t *testing.T) {
	src := "pipeline: shop\ndata_dir: /var/lib/cdcd\nsource: {postgres: {dsn: 'host=h', tables: [t]}}\nsink: {iceberg: {mode: append}}\n"
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	ic := c.Sink.Iceberg
	if ic.Catalog.URI != "sqlite:///var/lib/cdcd/catalog.db" || ic.Warehouse != "file:///var/lib/cdcd/warehouse" {
		t.Errorf("catalog %q, warehouse %q", ic.Catalog.URI, ic.Warehouse)
	}
	src = strings.Replace(src, "/var/lib/cdcd", "state", 1)
	if c, err = Parse([]byte(src), "cdcd.yaml", testEnv); err != nil {
		t.Fatal(err)
	}
	if c.Sink.Iceberg.Catalog.URI != "sqlite://./state/catalog.db" {
		t.Errorf("catalog %q", c.Sink.Iceberg.Catalog.URI)
	}
}

func TestRedact(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://cdc:s3cret@127.0.0.1:5432/shop", "postgres://cdc:***@127.0.0.1:5432/shop"},
		{"postgresql://cdc@db/shop", "postgresql://cdc@db/shop"},
		{"postgres://db/shop", "postgres://db/shop"},
		{"postgres://cdc:p@ss:w/rd@db/shop", "postgres://cdc:***@db/shop"},
		{"postgres://cdc@db/shop?sslmode=require&password=s3cret&x=1", "postgres://cdc@db/shop?sslmode=require&password=***&x=1"},
		{"postgres://cdc:a@db/shop?sslpassword=s3cret", "postgres://cdc:***@db/shop?sslpassword=***"},
		{"host=db user=cdc password=s3cret dbname=shop", "host=db user=cdc password=*** dbname=shop"},
		{"host=db password = 's3 cr\\'et' dbname=shop", "host=db password = *** dbname=shop"},
		{"host=db PASSWORD='unterminated secret", "host=db PASSWORD=***"},
		{"host=db sslpassword=s3cret", "host=db sslpassword=***"},
		{"https://token@catalog.example.com/api", "https://***@catalog.example.com/api"},
		{"https://catalog.example.com/api", "https://catalog.example.com/api"},
		{"sqlite://./cdcd-data/catalog.db", "sqlite://./cdcd-data/catalog.db"},
		{"s3://bucket/path", "s3://bucket/path"},
	}
	for _, tc := range cases {
		if got := redact(tc.in); got != tc.want {
			t.Errorf("redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestStringRedacts checks that no way of printing a Config shows a secret.
func TestStringRedacts(t *testing.T) {
	src := edit(t, "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
		"    catalog: {type: sql, uri: 'postgres://iceberg:${PGPASSWORD}@db/catalog'}")
	for _, dsn := range []string{
		"postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop",
		"'host=127.0.0.1 user=cdc password=${PGPASSWORD} dbname=shop'",
	} {
		c, err := Parse([]byte(strings.Replace(src, "postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", dsn, 1)), "cdcd.yaml", testEnv)
		if err != nil {
			t.Fatal(err)
		}
		var js bytes.Buffer
		slog.New(slog.NewJSONHandler(&js, nil)).Info("loaded", "config", c)
		for _, out := range []string{c.String(), fmt.Sprint(c), fmt.Sprint(*c), fmt.Sprintf("%+v", *c), js.String()} {
			if strings.Contains(out, "s3cret") {
				t.Errorf("secret shown:\n%s", out)
			}
			if !strings.Contains(out, "***") {
				t.Errorf("nothing redacted:\n%s", out)
			}
		}
	}
}

// TestStringRoundTrip checks that the rendered config parses back to the
// same Config, quoting and $${ escapes included.
func TestStringRoundTrip(t *testing.T) {
	src := edit(t, "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop",
		`    dsn: "host=db user=cdc application_name='$${x}' options=yes"`)
	src = strings.Replace(src, "namespace: cdc", `namespace: "2024"`, 1)
	src = strings.Replace(src, "listen: 127.0.0.1:8089", `listen: ""`, 1)
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse([]byte(c.String()), "rendered.yaml", testEnv)
	if err != nil {
		t.Fatalf("%v\nrendered:\n%s", err, c)
	}
	if !sameConfig(c, back) {
		t.Errorf("round trip changed the config:\n%s\n%s", c, back)
	}
}

// sameConfig compares two configs, ignoring where they came from.
func sameConfig(a, b *Config) bool {
	x, y := *a, *b
	x.origin, y.origin = nil, nil
	return reflect.DeepEqual(x, y)
}

func TestFormatDuration(t *testing.T) {
	for in, want := range map[string]string{"168h": "168h", "90m": "90m", "1h30m": "90m", "10s": "10s", "1.5s": "1.5s", "0s": "0s", "-5s": "-5s"} {
		d, err := time.ParseDuration(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %s, want %s", in, got, want)
		}
	}
}
