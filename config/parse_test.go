package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// testEnv is the environment every test parses with; the process
// environment is never read or changed.
var testEnv = WithLookupEnv(func(name string) (string, bool) {
	v, ok := map[string]string{
		"PGPASSWORD": "s3cret",
		"PGHOST":     "db.internal",
		"EMPTY":      "",
		"INTERVAL":   "30s",
	}[name]
	return v, ok
})

// full is a valid config with every key set; cases edit one line of it, so
// their line numbers are the ones shown here.
const full = `pipeline: shop
data_dir: ./cdcd-data
source:
  postgres:
    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop
    slot: cdcd_shop
    publication: cdcd_shop
    tables: [public.orders, public.customers]
    snapshot: initial
log:
  backend: embedded
  partitions: 8
  retention: 168h
sink:
  iceberg:
    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}
    warehouse: file:///var/lib/cdcd/warehouse
    namespace: cdc
    format_version: 3
    mode: append
    commit_interval: 10s
admin:
  listen: 127.0.0.1:8089
`

// edit returns full with the line old replaced by new.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if !strings.Contains(full, old+"\n") {
		t.Fatalf("no line %q in the base config", old)
	}
	return strings.Replace(full, old+"\n", new+"\n", 1)
}

// want describes one expected problem.
type want struct {
	path      string
	line, col int // col 0: not checked
	class     error
	substr    string
}

// problems parses src as cdcd.yaml, which must fail, and returns the list.
func problems(t *testing.T, src string) Errors {
	t.Helper()
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err == nil {
		t.Fatalf("parsed without error:\n%s\ngot:\n%s", src, c)
	}
	if c != nil {
		t.Errorf("a Config came back with an error")
	}
	var errs Errors
	if !errors.As(err, &errs) || len(errs) == 0 {
		t.Fatalf("error %T %v is not a non-empty Errors", err, err)
	}
	return errs
}

// expect asserts that src fails with a problem matching w, and that its
// text starts with cdcd.yaml:LINE:COL: PATH:.
func expect(t *testing.T, src string, w want) {
	t.Helper()
	errs := problems(t, src)
	for _, e := range errs {
		if e.Path != w.path || !strings.Contains(e.Msg, w.substr) {
			continue
		}
		if e.Line != w.line || w.col != 0 && e.Column != w.col {
			t.Errorf("%s: at %d:%d, want %d:%d", e.Path, e.Line, e.Column, w.line, w.col)
		}
		if !errors.Is(e, w.class) || !errors.Is(errs, w.class) {
			t.Errorf("%v: class %v, want %v", e, e.Err, w.class)
		}
		prefix := fmt.Sprintf("cdcd.yaml:%d:%d: %s: ", e.Line, e.Column, w.path)
		if w.path == "" {
			prefix = fmt.Sprintf("cdcd.yaml:%d:%d: ", e.Line, e.Column)
		}
		if !strings.HasPrefix(e.Error(), prefix) {
			t.Errorf("%q does not start with %q", e.Error(), prefix)
		}
		return
	}
	t.Errorf("no problem at %s containing %q; got:\n%v", w.path, w.substr, errs)
}

func TestFullConfigParses(t *testing.T) {
	c, err := Parse([]byte(full), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Source.Postgres.DSN; got != "postgres://cdc:s3cret@127.0.0.1:5432/shop" {
		t.Errorf("dsn %q", got)
	}
	if c.Log.Partitions != 8 || c.Sink.Iceberg.CommitInterval.String() != "10s" || c.Sink.Iceberg.Catalog.Name != "cdcd" {
		t.Errorf("decoded %+v", c)
	}
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		name, old, new string
		w              want
	}{
		{"typo at top", "pipeline: shop", "pipline: shop",
			want{"pipline", 1, 1, ErrUnknownKey, "did you mean pipeline?"}},
		{"typo nested", "    commit_interval: 10s", "    comit_interval: 10s",
			want{"sink.iceberg.comit_interval", 21, 5, ErrUnknownKey, "did you mean commit_interval?"}},
		{"swapped letters", "    tables: [public.orders, public.customers]", "    tabels: [public.orders]",
			want{"source.postgres.tabels", 8, 5, ErrUnknownKey, "did you mean tables?"}},
		{"wrong level", "  listen: 127.0.0.1:8089", "  namespace: cdc",
			want{"admin.namespace", 23, 3, ErrUnknownKey, "did you mean sink.iceberg.namespace? (it belongs under sink.iceberg)"}},
		{"nothing close", "  partitions: 8", "  quota: 5GB",
			want{"log.quota", 12, 3, ErrUnknownKey, "known keys here: backend, partitions, retention"}},
		{"in a flow mapping", "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			"    catalog: {type: sql, url: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			want{"sink.iceberg.catalog.url", 16, 26, ErrUnknownKey, "did you mean uri?"}},
		{"odd key is quoted in the path", "  partitions: 8", `  "a b": 8`,
			want{`log["a b"]`, 12, 3, ErrUnknownKey, `unknown key "a b"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expect(t, edit(t, tc.old, tc.new), tc.w) })
	}
}

func TestDuplicateKeys(t *testing.T) {
	t.Run("top level", func(t *testing.T) {
		src := edit(t, "admin:", "pipeline: shop2\nadmin:")
		expect(t, src, want{"pipeline", 22, 1, ErrDuplicateKey, "already set at line 1, column 1"})
	})
	t.Run("flow mapping", func(t *testing.T) {
		src := edit(t, "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			"    catalog: {type: sql, type: rest, uri: sqlite://./cdcd-data/catalog.db}")
		expect(t, src, want{"sink.iceberg.catalog.type", 16, 26, ErrDuplicateKey, "already set at line 16, column 15"})
	})
	t.Run("sections", func(t *testing.T) {
		src := full + "log:\n  partitions: 4\n"
		expect(t, src, want{"log", 24, 1, ErrDuplicateKey, "already set at line 10, column 1"})
	})
}

func TestWrongTypes(t *testing.T) {
	cases := []struct {
		name, old, new string
		w              want
	}{
		{"mapping for a string", "  listen: 127.0.0.1:8089", "  listen: {host: localhost, port: 8089}",
			want{"admin.listen", 23, 3, ErrType, "expected a string, got a mapping"}},
		{"list for a string", "pipeline: shop", "pipeline: [shop]",
			want{"pipeline", 1, 1, ErrType, "expected a string, got a list"}},
		{"number for a string", "pipeline: shop", "pipeline: 42",
			want{"pipeline", 1, 1, ErrType, `got the number 42: quote it ("42")`}},
		{"string for an int", "  partitions: 8", "  partitions: eight",
			want{"log.partitions", 12, 3, ErrType, `expected an integer, got the string "eight"`}},
		{"quoted int", "  partitions: 8", `  partitions: "8"`,
			want{"log.partitions", 12, 3, ErrType, "write the number without quotes"}},
		{"bool for an int", "    format_version: 3", "    format_version: true",
			want{"sink.iceberg.format_version", 19, 5, ErrType, "expected an integer, got the boolean true"}},
		{"list for a mapping", "log:", "log: [embedded]\nlog_:",
			want{"log", 10, 1, ErrType, "expected a mapping, got a list"}},
		{"string for an optional section", "  postgres:", "  postgres: yes-please\n  postgres_:",
			want{"source.postgres", 4, 3, ErrType, `expected a mapping, got the string "yes-please"`}},
		{"scalar for a list", "    tables: [public.orders, public.customers]", "    tables: public.orders",
			want{"source.postgres.tables", 8, 5, ErrType, "expected a list"}},
		{"mapping in a list", "    tables: [public.orders, public.customers]", "    tables: [public.orders, {name: x}]",
			want{"source.postgres.tables[1]", 8, 0, ErrType, "expected a string, got a mapping"}},
		{"mapping for a duration", "  retention: 168h", "  retention: {days: 7}",
			want{"log.retention", 13, 3, ErrType, `expected a duration such as "10s", got a mapping`}},
		{"out of range", "  partitions: 8", "  partitions: 99999999999999999999999",
			want{"log.partitions", 12, 3, ErrInvalid, "out of range"}},
		{"number as a key", "  partitions: 8", "  8: partitions",
			want{"log.8", 12, 3, ErrUnknownKey, "unknown key 8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expect(t, edit(t, tc.old, tc.new), tc.w) })
	}
}

func TestYAML11Traps(t *testing.T) {
	for _, word := range []string{"yes", "No", "ON", "off", "y", "N", "true", "FALSE", "True"} {
		t.Run("string "+word, func(t *testing.T) {
			src := edit(t, "    slot: cdcd_shop", "    slot: "+word)
			expect(t, src, want{"source.postgres.slot", 6, 5, ErrAmbiguous, fmt.Sprintf("quote it (%q)", word)})
		})
	}
	t.Run("listen off", func(t *testing.T) {
		src := edit(t, "  listen: 127.0.0.1:8089", "  listen: off")
		expect(t, src, want{"admin.listen", 23, 3, ErrAmbiguous, `unquoted off is a boolean to YAML 1.1 parsers: quote it ("off")`})
	})
	numbers := []struct{ value, substr string }{
		{"010", "YAML 1.1 reads a leading zero as octal (8), YAML 1.2 as decimal 10; write 10"},
		{"0o10", "octal 0o10 is a string to YAML 1.1 parsers; write the decimal 8"},
		{"0x10", "hexadecimal 0x10 is ambiguous between YAML versions; write the decimal 16"},
		{"1_000", "YAML 1.1 reads _ as a digit separator, YAML 1.2 reads a string; write 1000"},
		{"0b11", "binary 0b11 is ambiguous between YAML versions; write the decimal 3"},
		{"09", "09 has a leading zero, which some YAML parsers read as octal; write 9"},
	}
	for _, n := range numbers {
		t.Run("int "+n.value, func(t *testing.T) {
			src := edit(t, "  partitions: 8", "  partitions: "+n.value)
			expect(t, src, want{"log.partitions", 12, 3, ErrAmbiguous, n.substr})
		})
	}
	for _, f := range []string{"8.0", "8.5", "1e3", ".inf"} {
		t.Run("float "+f, func(t *testing.T) {
			src := edit(t, "  partitions: 8", "  partitions: "+f)
			expect(t, src, want{"log.partitions", 12, 3, ErrType, "expected an integer, got the number " + f})
		})
	}
	t.Run("quoted word is a string", func(t *testing.T) {
		c, err := Parse([]byte(edit(t, "    slot: cdcd_shop", `    slot: "yes"`)), "cdcd.yaml", testEnv)
		if err != nil || c.Source.Postgres.Slot != "yes" {
			t.Fatalf("slot %v, %v", c, err)
		}
	})
	t.Run("number-like string", func(t *testing.T) {
		src := edit(t, "    namespace: cdc", "    namespace: 1e3")
		expect(t, src, want{"sink.iceberg.namespace", 18, 5, ErrAmbiguous, `reads as a number to other YAML parsers: quote it ("1e3")`})
	})
}

func TestDurations(t *testing.T) {
	cases := []struct {
		value  string
		class  error
		substr string
	}{
		{"10", ErrType, `a bare number is not a duration: write "10s" (or "10m", "10h")`},
		{`"10"`, ErrType, `a bare number is not a duration: write "10s"`},
		{"1.5", ErrType, `write "1.5s"`},
		{"7d", ErrInvalid, `Go durations have no d unit: write "168h" for 7 days`},
		{"soon", ErrInvalid, `"soon" is not a duration: write a Go duration such as 10s`},
		{"yes", ErrInvalid, `"yes" is not a duration`},
	}
	for _, tc := range cases {
		t.Run(tc.value, func(t *testing.T) {
			src := edit(t, "    commit_interval: 10s", "    commit_interval: "+tc.value)
			expect(t, src, want{"sink.iceberg.commit_interval", 21, 5, tc.class, tc.substr})
		})
	}
	c, err := Parse([]byte(edit(t, "  retention: 168h", `  retention: "1h30m"`)), "cdcd.yaml", testEnv)
	if err != nil || c.Log.Retention.String() != "1h30m0s" {
		t.Fatalf("quoted duration: %v, %v", c, err)
	}
}

func TestEmptyOrNotAMapping(t *testing.T) {
	cases := []struct {
		name, src string
		w         want
	}{
		{"empty", "", want{"", 1, 1, ErrEmpty, "the file is empty"}},
		{"comments only", "# nothing\n# here\n", want{"", 1, 1, ErrEmpty, "the file is empty"}},
		{"document marker only", "---\n", want{"", 1, 1, ErrEmpty, "the file is empty"}},
		{"null", "~\n", want{"", 1, 1, ErrEmpty, "the file is empty"}},
		{"list", "# a list\n- pipeline: shop\n", want{"", 2, 1, ErrType, "the top level must be a mapping of keys (pipeline: ..., source: ...), got a list"}},
		{"scalar", "shop\n", want{"", 1, 1, ErrType, `got the string "shop"`}},
		{"two documents", full + "---\npipeline: other\n", want{"", 25, 1, ErrSyntax, "a second YAML document starts here"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expect(t, tc.src, tc.w) })
	}
}

func TestSyntaxErrors(t *testing.T) {
	expect(t, edit(t, "  partitions: 8", "  partitions: 8: 9"),
		want{"", 12, 15, ErrSyntax, "invalid YAML: mapping value is not allowed in this context"})
	expect(t, "a: "+strings.Repeat("[", 100), want{"", 1, 68, ErrSyntax, "[ and { nest deeper than 64 levels"})
	deepInQuotes := edit(t, "  listen: 127.0.0.1:8089", "  listen: '"+strings.Repeat("[", 100)+"' # [[[[")
	expect(t, deepInQuotes, want{"admin.listen", 23, 3, ErrInvalid, "is not host:port"})
	src := edit(t, "  partitions: 8", "\tpartitions: 8")
	expect(t, src, want{"", 12, 1, ErrSyntax, `(indent YAML with spaces, not tabs)`})
	for _, e := range problems(t, src) {
		if strings.ContainsAny(e.Error(), "\n\t") {
			t.Errorf("message is not one line: %q", e.Error())
		}
	}
}

func TestAnchorsAliasesTags(t *testing.T) {
	src := `pipeline: &name shop
source:
  postgres:
    dsn: &dsn postgres://cdc@127.0.0.1/shop
    tables: [orders]
    slot: !!str yes
sink:
  iceberg:
    mode: append
    catalog: {type: sql, uri: *dsn}
x_unused: &later cdc
`
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err == nil || !strings.Contains(err.Error(), "x_unused") {
		t.Fatalf("want only the unknown key x_unused, got %v", err)
	}
	src = strings.Replace(src, "x_unused: &later cdc\n", "", 1)
	if c, err = Parse([]byte(src), "cdcd.yaml", testEnv); err != nil {
		t.Fatal(err)
	}
	if c.Sink.Iceberg.Catalog.URI != c.Source.Postgres.DSN || c.Source.Postgres.Slot != "yes" {
		t.Errorf("aliases or !!str not resolved: %+v %+v", c.Sink.Iceberg.Catalog, c.Source.Postgres)
	}
	cases := []struct {
		name, old, new string
		w              want
	}{
		{"unknown alias", "pipeline: shop", "pipeline: *nope",
			want{"pipeline", 1, 1, ErrSyntax, "alias *nope refers to no anchor &nope defined before it"}},
		{"list containing itself", "    tables: [public.orders, public.customers]", "    tables: &t [orders, *t]",
			want{"source.postgres.tables[1]", 8, 0, ErrType, "expected a string, got a list"}},
		{"other tags", "  partitions: 8", "  partitions: !!int 8",
			want{"log.partitions", 12, 3, ErrType, "YAML tags such as !!int are not supported"}},
		{"merge keys", "  partitions: 8", "  <<: {partitions: 8}",
			want{"log[\"<<\"]", 12, 3, ErrSyntax, "merge keys (<<) are not supported"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expect(t, edit(t, tc.old, tc.new), tc.w) })
	}
}

func TestNullMeansDefault(t *testing.T) {
	src := `pipeline: shop
data_dir:
source:
  postgres:
    dsn: host=db user=cdc
    tables: [orders]
    slot: ~
log:
sink:
  iceberg:
    mode: append
    namespace: null
`
	c, err := Parse([]byte(src), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != defaultDataDir || c.Source.Postgres.Slot != "cdcd_shop" || c.Log.Partitions != 8 || c.Sink.Iceberg.Namespace != "cdc" {
		t.Errorf("null did not take the default: %s", c)
	}
}

func TestExplicitZeroIsKept(t *testing.T) {
	expect(t, edit(t, "  partitions: 8", "  partitions: 0"),
		want{"log.partitions", 12, 3, ErrInvalid, "must be from 1 to 1024, got 0"})
	expect(t, edit(t, "    slot: cdcd_shop", `    slot: ""`),
		want{"source.postgres.slot", 6, 5, ErrInvalid, `"" is not a valid PostgreSQL replication slot name`})
	c, err := Parse([]byte(edit(t, "  retention: 168h", "  retention: 0s")), "cdcd.yaml", testEnv)
	if err != nil || c.Log.Retention != 0 {
		t.Fatalf("retention 0s (keep forever): %v, %v", c, err)
	}
	c, err = Parse([]byte(edit(t, "  listen: 127.0.0.1:8089", `  listen: ""`)), "cdcd.yaml", testEnv)
	if err != nil || c.Admin.Listen != ListenOff || c.Admin.Enabled() {
		t.Fatalf(`listen "" (off): %v, %v`, c, err)
	}
}

// TestBadFile checks that every problem of a file is reported, in order,
// and that decoding problems are not repeated by validation.
func TestBadFile(t *testing.T) {
	_, err := Load("testdata/bad.yaml", testEnv)
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want Errors, got %v", err)
	}
	wants := []string{
		"testdata/bad.yaml:2:1: pipeline: ",
		"testdata/bad.yaml:5:3: source.postgres.tables: at least one table",
		"testdata/bad.yaml:6:5: source.postgres.dsn: environment variable NO_SUCH_SECRET is not set",
		"testdata/bad.yaml:7:5: source.postgres.slot: unquoted no is a boolean",
		"testdata/bad.yaml:8:5: source.postgres.tabels: unknown key tabels; did you mean tables?",
		"testdata/bad.yaml:10:3: log.partitions: 010 is ambiguous",
		"testdata/bad.yaml:11:3: log.retention: Go durations have no d unit",
		"testdata/bad.yaml:16:7: sink.iceberg.catalog.uri: a rest catalog needs an http:// or https:// URI, got sqlite://",
		"testdata/bad.yaml:17:5: sink.iceberg.commit_interval: a bare number is not a duration",
		"testdata/bad.yaml:19:5: sink.iceberg.mode: duplicate key: mode is already set at line 18, column 5",
		"testdata/bad.yaml:21:3: admin.listen: expected a string, got a mapping",
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(wants) || len(errs) != len(wants) {
		t.Fatalf("got %d problems, want %d:\n%v", len(lines), len(wants), err)
	}
	for i, w := range wants {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("problem %d:\n got %s\nwant %s…", i, lines[i], w)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load("testdata/no-such-file.yaml")
	if err == nil || !strings.HasPrefix(err.Error(), "config: open testdata/no-such-file.yaml") {
		t.Fatalf("got %v", err)
	}
}
