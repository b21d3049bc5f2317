package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	const catalogLine = "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}"
	long := strings.Repeat("a", 59)
	cases := []struct {
		name, old, new string
		w              want
	}{
		{"pipeline missing", "pipeline: shop", "# no pipeline",
			want{"pipeline", 2, 1, ErrInvalid, "required: name the pipeline"}},
		{"pipeline uppercase", "pipeline: shop", "pipeline: Shop",
			want{"pipeline", 1, 1, ErrInvalid, "lowercase letters, digits and _"}},
		{"pipeline dash", "pipeline: shop", "pipeline: my-shop",
			want{"pipeline", 1, 1, ErrInvalid, `"my-shop" is not a valid pipeline name`}},
		{"pipeline too long", "pipeline: shop", "pipeline: " + long,
			want{"pipeline", 1, 1, ErrInvalid, "too long (59 bytes): the slot name cdcd_<pipeline> must fit PostgreSQL's 63-byte limit, so use at most 58 bytes"}},
		{"data_dir empty", "data_dir: ./cdcd-data", `data_dir: ""`,
			want{"data_dir", 2, 1, ErrInvalid, "must not be empty"}},
		{"dsn empty", "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", `    dsn: ""`,
			want{"source.postgres.dsn", 5, 5, ErrInvalid, "required: a libpq URL"}},
		{"dsn scheme", "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", "    dsn: mysql://cdc:${PGPASSWORD}@db/shop",
			want{"source.postgres.dsn", 5, 5, ErrInvalid, "must start with postgres:// or postgresql://, got mysql://"}},
		{"dsn garbage", "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", "    dsn: localhost",
			want{"source.postgres.dsn", 5, 5, ErrInvalid, "not a DSN"}},
		{"slot", "    slot: cdcd_shop", "    slot: Cdcd-Shop",
			want{"source.postgres.slot", 6, 5, ErrInvalid, `"Cdcd-Shop" is not a valid PostgreSQL replication slot name`}},
		{"slot too long", "    slot: cdcd_shop", "    slot: " + long + "abcde",
			want{"source.postgres.slot", 6, 5, ErrInvalid, "at most 63 bytes"}},
		{"publication", "    publication: cdcd_shop", `    publication: "1pub"`,
			want{"source.postgres.publication", 7, 5, ErrInvalid, "not a valid PostgreSQL publication name"}},
		{"no tables", "    tables: [public.orders, public.customers]", "    tables: []",
			want{"source.postgres.tables", 8, 5, ErrInvalid, "at least one table is required"}},
		{"bad table", "    tables: [public.orders, public.customers]", "    tables: [public.orders, a.b.c]",
			want{"source.postgres.tables[1]", 8, 29, ErrInvalid, `"a.b.c" is not a table name`}},
		{"duplicate table", "    tables: [public.orders, public.customers]", "    tables: [public.orders, orders]",
			want{"source.postgres.tables[1]", 8, 29, ErrInvalid, "public.orders is listed twice (also as tables[0] at line 8)"}},
		{"iceberg collision", "    tables: [public.orders, public.customers]", "    tables: [public.a_b, a.b]",
			want{"source.postgres.tables[1]", 8, 26, ErrInvalid, "a.b and public.a_b (tables[0] at line 8) both map to the Iceberg table cdc.a_b"}},
		{"snapshot", "    snapshot: initial", "    snapshot: sometimes",
			want{"source.postgres.snapshot", 9, 5, ErrInvalid, `must be initial, incremental or never, got "sometimes"`}},
		{"backend", "  backend: embedded", "  backend: redis",
			want{"log.backend", 11, 3, ErrInvalid, `must be embedded or kafka, got "redis"`}},
		{"compression", "  partitions: 8", "  partitions: 8\n  compression: zstd",
			want{"log.compression", 13, 3, ErrInvalid, `must be s2 or none, got "zstd"`}},
		{"partitions low", "  partitions: 8", "  partitions: -1",
			want{"log.partitions", 12, 3, ErrInvalid, "must be from 1 to 1024, got -1"}},
		{"partitions high", "  partitions: 8", "  partitions: 1025",
			want{"log.partitions", 12, 3, ErrInvalid, "must be from 1 to 1024, got 1025"}},
		{"retention", "  retention: 168h", "  retention: -1s",
			want{"log.retention", 13, 3, ErrInvalid, "must not be negative, got -1s"}},
		{"catalog type", catalogLine, "    catalog: {type: hive, uri: thrift://h:9083}",
			want{"sink.iceberg.catalog.type", 16, 15, ErrInvalid, `must be sql or rest, got "hive"`}},
		{"sql catalog uri", catalogLine, "    catalog: {type: sql, uri: 'https://cat.example.com'}",
			want{"sink.iceberg.catalog.uri", 16, 26, ErrInvalid, "a sql catalog needs a sqlite:// or postgres:// URI, got https://"}},
		{"rest catalog uri", catalogLine, "    catalog: {type: rest, uri: postgres://u:pw@h/cat}",
			want{"sink.iceberg.catalog.uri", 16, 27, ErrInvalid, "a rest catalog needs an http:// or https:// URI, got postgres://"}},
		{"rest catalog without uri", catalogLine, "    catalog: {type: rest}",
			want{"sink.iceberg.catalog.uri", 16, 5, ErrInvalid, "a rest catalog needs an http:// or https:// URI, got nothing"}},
		{"catalog name", catalogLine, "    catalog: {name: ''}",
			want{"sink.iceberg.catalog.name", 16, 15, ErrInvalid, "must not be empty"}},
		{"warehouse scheme", "    warehouse: file:///var/lib/cdcd/warehouse", "    warehouse: gs://bucket/wh",
			want{"sink.iceberg.warehouse", 17, 5, ErrInvalid, "must be a file:// or s3:// URL, got gs://"}},
		{"warehouse bucket", "    warehouse: file:///var/lib/cdcd/warehouse", "    warehouse: s3:///wh",
			want{"sink.iceberg.warehouse", 17, 5, ErrInvalid, "needs a bucket"}},
		{"namespace", "    namespace: cdc", `    namespace: "c d c"`,
			want{"sink.iceberg.namespace", 18, 5, ErrInvalid, `"c d c" is not a namespace`}},
		{"format version", "    format_version: 3", "    format_version: 1",
			want{"sink.iceberg.format_version", 19, 5, ErrInvalid, "must be 3 (deletion vectors) or 2 (position delete files), got 1"}},
		{"mode", "    mode: append", "    mode: merge",
			want{"sink.iceberg.mode", 20, 5, ErrInvalid, `must be upsert or append, got "merge"`}},
		{"commit interval zero", "    commit_interval: 10s", "    commit_interval: 0s",
			want{"sink.iceberg.commit_interval", 21, 5, ErrInvalid, "must be positive, got 0s"}},
		{"commit interval negative", "    commit_interval: 10s", "    commit_interval: -5s",
			want{"sink.iceberg.commit_interval", 21, 5, ErrInvalid, "must be positive, got -5s"}},
		{"retry interval short", "    commit_interval: 10s", "    commit_interval: 10s\n    retry_interval: 100ms",
			want{"sink.iceberg.retry_interval", 22, 5, ErrInvalid, "must be at least 1s (each look loads the table from the catalog), got 100ms"}},
		{"listen", "  listen: 127.0.0.1:8089", "  listen: localhost",
			want{"admin.listen", 23, 3, ErrInvalid, `"localhost" is not host:port (e.g. 127.0.0.1:8089); write "off" to disable`}},
		{"listen port", "  listen: 127.0.0.1:8089", "  listen: 127.0.0.1:99999",
			want{"admin.listen", 23, 3, ErrInvalid, `port "99999" is not a number from 0 to 65535`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { expect(t, edit(t, tc.old, tc.new), tc.w) })
	}
}

func TestValidateMissingSections(t *testing.T) {
	src := "pipeline: shop\nsink:\n  iceberg:\n    mode: append\n"
	expect(t, src, want{"source", 1, 1, ErrInvalid, "exactly one source is required: add source.postgres"})
	src = "pipeline: shop\nsource:\n  postgres:\n    tables: [orders]\nsink: {iceberg: {mode: append}}\n"
	expect(t, src, want{"source.postgres.dsn", 3, 3, ErrInvalid, "required"})
}

func TestValidateAccepts(t *testing.T) {
	for _, edit1 := range [][2]string{
		{"  listen: 127.0.0.1:8089", `  listen: "off"`},
		{"  listen: 127.0.0.1:8089", "  listen: ':0'"},
		{"    format_version: 3", "    format_version: 2"},
		{"    snapshot: initial", "    snapshot: never"},
		{"    warehouse: file:///var/lib/cdcd/warehouse", "    warehouse: s3://bucket/path"},
		{"    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			"    catalog: {type: rest, uri: 'https://catalog.example.com/api', name: prod}"},
		{"    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			"    catalog: {type: sql, uri: 'postgresql://u:${PGPASSWORD}@h/cat'}"},
		{"    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop",
			"    dsn: host=127.0.0.1 user=cdc password=${PGPASSWORD} dbname=shop"},
		{"    tables: [public.orders, public.customers]", "    tables: [public.orders, sales.orders, Sales.Orders2]"},
	} {
		if _, err := Parse([]byte(edit(t, edit1[0], edit1[1])), "cdcd.yaml", testEnv); err != nil {
			t.Errorf("%s: %v", edit1[1], err)
		}
	}
}

// TestUpsertIsTheDefault: a config without mode, or without a sink at
// all, mirrors the source in upsert mode.
func TestUpsertIsTheDefault(t *testing.T) {
	for _, doc := range []string{
		edit(t, "    mode: append", "    # no mode"),
		"pipeline: shop\nsource:\n  postgres: {dsn: 'host=h', tables: [t]}\n",
	} {
		c, err := Parse([]byte(doc), "cdcd.yaml", testEnv)
		if err != nil {
			t.Fatal(err)
		}
		if c.Sink.Iceberg == nil || c.Sink.Iceberg.Mode != "upsert" {
			t.Fatalf("mode = %+v", c.Sink.Iceberg)
		}
	}
}

func TestTableIdent(t *testing.T) {
	ic := &Iceberg{Namespace: "cdc"}
	cases := []struct{ in, ns, table string }{
		{"public.orders", "cdc", "orders"},
		{"orders", "cdc", "orders"},
		{"sales.orders", "cdc", "sales_orders"},
		{"public.a_b", "cdc", "a_b"},
		{"a.b", "cdc", "a_b"},
		{"Sales.Orders", "cdc", "Sales_Orders"},
	}
	for _, tc := range cases {
		if ns, table := ic.TableIdent(tc.in); ns != tc.ns || table != tc.table {
			t.Errorf("TableIdent(%q) = %s.%s, want %s.%s", tc.in, ns, table, tc.ns, tc.table)
		}
	}
}

// TestValidateInGo checks a Config built in Go: defaults from
// ApplyDefaults, and problems without file positions.
func TestValidateInGo(t *testing.T) {
	c := &Config{
		Pipeline: "shop",
		Source:   Source{Postgres: &Postgres{DSN: "host=db", Tables: []string{"orders", "public.orders"}}},
		Sink:     Sink{Iceberg: &Iceberg{Mode: "append", FormatVersion: 4}},
	}
	c.ApplyDefaults()
	before := c.String()
	c.ApplyDefaults()
	if c.String() != before {
		t.Errorf("ApplyDefaults is not idempotent:\n%s\n%s", before, c.String())
	}
	err := c.Validate()
	want := "source.postgres.tables[1]: public.orders is listed twice (also as tables[0]): remove one\n" +
		"sink.iceberg.format_version: must be 3 (deletion vectors) or 2 (position delete files), got 4"
	if err == nil || err.Error() != want {
		t.Fatalf("got:\n%v\nwant:\n%s", err, want)
	}
	if !errors.Is(err, ErrInvalid) || errors.Is(err, ErrSyntax) {
		t.Errorf("errors.Is does not see the class through Errors")
	}
	c.Sink.Iceberg.FormatVersion = 2
	c.Source.Postgres.Tables = c.Source.Postgres.Tables[:1]
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		e    Error
		want string
	}{
		{Error{File: "c.yaml", Line: 3, Column: 5, Path: "log.partitions", Msg: "bad"}, "c.yaml:3:5: log.partitions: bad"},
		{Error{File: "c.yaml", Line: 3, Msg: "bad"}, "c.yaml:3: bad"},
		{Error{File: "c.yaml", Path: "pipeline", Msg: "bad"}, "c.yaml: pipeline: bad"},
		{Error{Path: "pipeline", Msg: "bad"}, "pipeline: bad"},
		{Error{Line: 1, Column: 2, Msg: "bad"}, "1:2: bad"},
	}
	for _, tc := range cases {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	es := Errors{{Line: 9, Msg: "b"}, {Line: 2, Column: 7, Msg: "a2"}, {Line: 2, Column: 1, Msg: "a1"}}
	if err := es.err(); err.Error() != "2:1: a1\n2:7: a2\n9: b" {
		t.Errorf("not sorted by line and column: %q", err)
	}
	if Errors(nil).err() != nil {
		t.Errorf("no problems must be a nil error")
	}
}

func TestHeartbeatInterval(t *testing.T) {
	base := "pipeline: shop\nsink: {iceberg: {mode: append}}\nsource:\n  postgres:\n    dsn: postgres://h/db\n    tables: [t]\n"
	for _, tc := range []struct {
		line string
		want time.Duration
		bad  bool
	}{
		{"", 10 * time.Second, false},
		{"    heartbeat_interval: 0s\n", 0, false},
		{"    heartbeat_interval: 2s\n", 2 * time.Second, false},
		{"    heartbeat_interval: 10ms\n", 0, true},
		{"    heartbeat_interval: -1s\n", 0, true},
	} {
		c, err := Parse([]byte(base+tc.line), "cdcd.yaml")
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "source.postgres.heartbeat_interval") {
				t.Errorf("%q: error %v", tc.line, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.line, err)
		}
		if got := c.Source.Postgres.HeartbeatInterval; got != tc.want {
			t.Errorf("%q: heartbeat %v, want %v", tc.line, got, tc.want)
		}
	}
}

// TestQuotedTableNames: quoted parts hold spaces and other letters; the
// canonical form quotes what SQL needs; names whose topics or Iceberg
// tables would be one are refused.
func TestQuotedTableNames(t *testing.T) {
	base := "pipeline: shop\nsource: {postgres: {dsn: 'host=h', tables: %s}}\nsink: {iceberg: {mode: append}}\n"
	c, err := Parse([]byte(fmt.Sprintf(base, `['public."Order Items"', '"Größe"', 'Sales."Q1 Plan"', orders]`)), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`public."Order Items"`, `public."Größe"`, `"Sales"."Q1 Plan"`, "public.orders"}
	if strings.Join(c.Source.Postgres.Tables, "|") != strings.Join(want, "|") {
		t.Errorf("tables %q, want %q", c.Source.Postgres.Tables, want)
	}
	ic := c.Sink.Iceberg
	for in, want := range map[string]string{`public."Order Items"`: "Order_Items", `public."Größe"`: "Größe", `"Sales"."Q1 Plan"`: "Sales_Q1_Plan"} {
		if _, tbl := ic.TableIdent(in); tbl != want {
			t.Errorf("TableIdent(%s) = %s, want %s", in, tbl, want)
		}
	}
	for _, bad := range []struct{ tables, want string }{
		{`['public.Order Items']`, `quote a part with other characters`},
		{`['"Order Items"', 'Order_Items']`, "both map to the topic"},
		{`['"Größe"', '"Grüße"']`, "both map to the topic"},
	} {
		_, err := Parse([]byte(fmt.Sprintf(base, bad.tables)), "t.yaml")
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("tables %s: %v, want an error saying %q", bad.tables, err, bad.want)
		}
	}
}
