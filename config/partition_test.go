package config

import (
	"strings"
	"testing"
	"time"
)

func TestParsePartitionField(t *testing.T) {
	for in, want := range map[string]PartitionField{
		"id":                  {Transform: "identity", Column: "id"},
		"identity(region)":    {Transform: "identity", Column: "region"},
		"bucket(16, id)":      {Transform: "bucket", Param: 16, Column: "id"},
		" day( created_at ) ": {Transform: "day", Column: "created_at"},
		"truncate(4,sku)":     {Transform: "truncate", Param: 4, Column: "sku"},
		"hour(ts)":            {Transform: "hour", Column: "ts"},
	} {
		got, err := ParsePartitionField(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"bucket(id)", "day(3, ts)", "week(ts)", "bucket(0, id)", "a b", "f(g(x))", ""} {
		if _, err := ParsePartitionField(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestIcebergTablesValidation(t *testing.T) {
	doc := `pipeline: shop
source:
  postgres:
    dsn: postgres://localhost/shop
    tables: [orders, public.items]
sink:
  iceberg:
    tables:
      - source: public.orders
        partition_by: [day(created_at), "bucket(16, id)"]
      - source: ghost
      - source: orders
      - source: items
        partition_by: [week(ts)]
`
	_, err := Parse([]byte(doc), "cdcd.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"cdcd.yaml:11:9: sink.iceberg.tables[1].source: \"ghost\" is not in source.postgres.tables",
		"cdcd.yaml:12:9: sink.iceberg.tables[2].source: public.orders already has settings at sink.iceberg.tables[0] at line 9",
		"cdcd.yaml:14:24: sink.iceberg.tables[3].partition_by[0]:",
		"unknown transform week",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	ok := strings.Replace(doc, "      - source: ghost\n      - source: orders\n", "", 1)
	ok = strings.Replace(ok, "week(ts)", "hour(ts)", 1)
	c, err := Parse([]byte(ok), "cdcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec := c.Sink.Iceberg.PartitionSpec("orders")
	if len(spec) != 2 || spec[0].Transform != "day" || spec[1].Param != 16 {
		t.Fatalf("spec %+v", spec)
	}
	if c.Sink.Iceberg.PartitionSpec("public.other") != nil {
		t.Fatal("spec for an unconfigured table")
	}
	// Printing and parsing the effective config keeps the table settings.
	back, err := Parse([]byte(c.String()), "rendered.yaml")
	if err != nil {
		t.Fatalf("%v\n%s", err, c.String())
	}
	if got := back.Sink.Iceberg.PartitionSpec("orders"); len(got) != 2 || got[1].Column != "id" {
		t.Fatalf("round trip lost partition_by: %+v\n%s", got, c.String())
	}
}

func TestUnquotedCommaHint(t *testing.T) {
	_, err := ParsePartitionField("bucket(16")
	if err == nil || !strings.Contains(err.Error(), "quote entries") {
		t.Fatalf("%v", err)
	}
}

func TestCompactionValidation(t *testing.T) {
	doc := `pipeline: shop
source:
  postgres:
    dsn: postgres://localhost/shop
    tables: [orders]
sink:
  iceberg:
    compaction:
      enabled: false
      min_files: 1
      orphan_age: 5m
`
	_, err := Parse([]byte(doc), "cdcd.yaml")
	for _, want := range []string{
		"cdcd.yaml:10:7: sink.iceberg.compaction.min_files: must be between 2 and 10000, got 1",
		"cdcd.yaml:11:7: sink.iceberg.compaction.orphan_age: must be at least 1h",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	c, err := Parse([]byte(strings.Replace(strings.Replace(doc, "min_files: 1", "min_files: 3", 1), "orphan_age: 5m", "orphan_age: 48h", 1)), "cdcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cc := c.Sink.Iceberg.Compaction
	if cc.Enabled || cc.MinFiles != 3 || cc.OrphanAge != 48*time.Hour || cc.TargetFileSizeMB != 128 {
		t.Fatalf("compaction %+v", cc)
	}
}
