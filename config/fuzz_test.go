package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse. It must never panic; a failure
// must be Errors whose every line names the file; a success must render
// (String) to YAML that parses back to the same Config.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		full, "", "~", "- a", "a: [1", "a: &x {b: *x}", "x: *nope", "<<: {a: 1}",
		"pipeline: &p shop\nsource: {postgres: {dsn: *p, tables: &t [*t]}}",
		"pipeline: !!str yes\nlog: {partitions: !!int 3}", "pipeline: \"\\x00\\u2028\"",
		"log:\n\tpartitions: 1", "? [a]\n: b", "--- a\n--- b", "pipeline: ${", "pipeline: $${X}${PGPASSWORD}",
		"log: {partitions: 0x10, retention: 10}", "sink: {iceberg: {commit_interval: 7d, format_version: 2.0}}",
		"pipeline: shop\nsource: {postgres: {dsn: 'host=h password=x', tables: [a, b.c, public.b_c]}}\nsink: {iceberg: {mode: append}}",
		// The file's bytes: a byte order mark, UTF-16, invalid UTF-8, a long key.
		"\uFEFF" + full, "\uFEFF", "\uFEFF\uFEFFpipeline: shop", "\xff\xfep\x00", "pipeline: sh\xc3op",
		"a: \xed\xa0\x80", "# \xff\nlog: {partitions: 1}", strings.Repeat("k", 1<<20) + ": 1",
		"log:\n  " + strings.Repeat("partitionz", 1<<14) + ": 8",
		full + "  auth: {token: 0123456789abcdef0123, protect_reads: true}\n  hosts: [cdcd.internal]\n",
		full + "  tls: {cert: /x.pem, key: /x.key}\n  auth: {token_file: /nonexistent}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml", testEnv)
		if err != nil {
			checkErrors(t, err)
			return
		}
		if redact(c.Source.Postgres.DSN) != c.Source.Postgres.DSN ||
			redact(c.Sink.Iceberg.Catalog.URI) != c.Sink.Iceberg.Catalog.URI ||
			redact(c.Sink.Iceberg.Warehouse) != c.Sink.Iceberg.Warehouse ||
			c.Admin.Auth != nil && c.Admin.Auth.Token != "" {
			return // redacted output cannot round-trip
		}
		back, err := Parse([]byte(c.String()), "rendered.yaml", testEnv)
		if err != nil {
			t.Fatalf("rendered config does not parse: %v\ninput:\n%q\nrendered:\n%s", err, data, c)
		}
		if !sameConfig(c, back) {
			t.Fatalf("round trip changed the config:\n%s\n%s", c, back)
		}
	})
}

func checkErrors(t *testing.T, err error) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
	}
	for _, e := range errs {
		if e.Err == nil || e.Msg == "" || !strings.HasPrefix(e.Error(), "fuzz.yaml") {
			t.Fatalf("incomplete problem: %#v", e)
		}
		if strings.ContainsAny(e.Error(), "\n\r") {
			t.Fatalf("problem spans lines: %q", e.Error())
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(errs) {
		t.Fatalf("%d lines for %d problems", n, len(errs))
	}
}
