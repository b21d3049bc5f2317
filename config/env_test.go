package config

import (
	"slices"
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "1", "B": "two", "EMPTY": "", "DOLLAR": "${A}"}[name]
		return v, ok
	}
	cases := []struct {
		in, out  string
		problems []string
	}{
		{"plain", "plain", nil},
		{"${A}", "1", nil},
		{"x${A}y${B}z", "x1ytwoz", nil},
		{"${EMPTY}", "", nil},
		{"$${A}", "${A}", nil},
		{"pa$$word$A", "pa$$word$A", nil},
		{"$$${A}", "$${A}", nil},
		{"${DOLLAR}", "${A}", nil}, // values are not expanded again
		{"${NOPE}", "", []string{"environment variable NOPE is not set (referenced as ${NOPE})"}},
		{"${NOPE}${ALSO}", "", []string{"NOPE is not set", "ALSO is not set"}},
		{"${A:-x}", "", []string{"invalid reference ${A:-x}"}},
		{"${}", "", []string{"invalid reference ${}"}},
		{"${A", "${A", []string{"unterminated ${"}},
	}
	for _, tc := range cases {
		out, problems := expandEnv(tc.in, lookup)
		if out != tc.out && tc.problems == nil {
			t.Errorf("expandEnv(%q) = %q, want %q", tc.in, out, tc.out)
		}
		if len(problems) != len(tc.problems) {
			t.Errorf("expandEnv(%q) problems %q, want %q", tc.in, problems, tc.problems)
			continue
		}
		for i, p := range tc.problems {
			if !strings.Contains(problems[i], p) {
				t.Errorf("expandEnv(%q) problem %q, want %q", tc.in, problems[i], p)
			}
		}
	}
}

func TestEnvInConfig(t *testing.T) {
	src := edit(t, "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop",
		"    dsn: postgres://cdc:${PGPASSWORD}@${PGHOST}:5432/shop?application_name=$${literal}")
	src = strings.Replace(src, "commit_interval: 10s", "commit_interval: ${INTERVAL}", 1)
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Source.Postgres.DSN, "postgres://cdc:s3cret@db.internal:5432/shop?application_name=${literal}"; got != want {
		t.Errorf("dsn %q, want %q", got, want)
	}
	if c.Sink.Iceberg.CommitInterval.String() != "30s" {
		t.Errorf("commit_interval %v", c.Sink.Iceberg.CommitInterval)
	}
}

func TestEnvUnset(t *testing.T) {
	src := edit(t, "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop",
		"    dsn: postgres://${PGUSER}:${PGPASSWORD}@127.0.0.1:5432/${PGDATABASE}")
	expect(t, src, want{"source.postgres.dsn", 5, 5, ErrEnv, "environment variable PGUSER is not set (referenced as ${PGUSER})"})
	expect(t, src, want{"source.postgres.dsn", 5, 5, ErrEnv, "environment variable PGDATABASE is not set"})
	// The dsn's own "required" check adds nothing and is left out.
	if n := len(problems(t, src)); n != 2 {
		t.Errorf("got %d problems, want 2:\n%v", n, problems(t, src))
	}
	src = edit(t, "    slot: cdcd_shop", "    slot: ${SLOT:-cdcd_shop}")
	expect(t, src, want{"source.postgres.slot", 6, 5, ErrEnv, "defaults like ${A:-b} are not supported"})
	src = edit(t, "    tables: [public.orders, public.customers]", "    tables:\n      - public.orders\n      - ${EXTRA_TABLE}")
	expect(t, src, want{"source.postgres.tables[1]", 10, 9, ErrEnv, "EXTRA_TABLE is not set"})
}

// TestEnvDefaultLookup checks that Parse reads the process environment by
// default (t.Setenv, so the test is not parallel).
func TestEnvDefaultLookup(t *testing.T) {
	t.Setenv("CDCD_CONFIG_TEST_PW", "from-env")
	src := strings.Replace(full, "${PGPASSWORD}", "${CDCD_CONFIG_TEST_PW}", 1)
	c, err := Parse([]byte(src), "cdcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(c.Source.Postgres.DSN, ":from-env@") {
		t.Errorf("dsn %q", c.Source.Postgres.DSN)
	}
	if !slices.Contains(c.Source.Postgres.Tables, "public.orders") {
		t.Errorf("tables %q", c.Source.Postgres.Tables)
	}
}
