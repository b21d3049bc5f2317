package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// IcebergTable overrides sink settings for one source table.
type IcebergTable struct {
	// Source is the source table, "schema.table" (a bare name means public).
	// It must be one of source.postgres.tables. Required.
	Source string `yaml:"source"`
	// PartitionBy is the partition spec of the Iceberg table when cdcd
	// creates it (an existing table keeps its spec): a list of
	// "column" or "identity(column)", "bucket(N, column)",
	// "truncate(W, column)", "year(column)", "month(column)", "day(column)",
	// "hour(column)". Default: unpartitioned.
	PartitionBy []string `yaml:"partition_by"`
}

// PartitionField is one parsed partition_by entry.
type PartitionField struct {
	// Transform is identity, bucket, truncate, year, month, day or hour.
	Transform string
	// Param is N of bucket[N] or W of truncate[W]; 0 otherwise.
	Param  int
	Column string
}

var partitionExpr = regexp.MustCompile(`^\s*(?:([a-z]+)\s*\(\s*(?:(\d+)\s*,\s*)?([^()\s,]+)\s*\)|([^()\s,]+))\s*$`)

// ParsePartitionField parses one partition_by entry.
func ParsePartitionField(s string) (PartitionField, error) {
	m := partitionExpr.FindStringSubmatch(s)
	if m == nil {
		if strings.Count(s, "(") != strings.Count(s, ")") {
			return PartitionField{}, fmt.Errorf("%q is half a partition field: in a [a, b] list YAML splits at every comma, so quote entries with one: \"bucket(16, id)\"", s)
		}
		return PartitionField{}, fmt.Errorf("%q is not a partition field: write column, or transform(column) with transform identity, year, month, day or hour, or bucket(N, column) / truncate(W, column)", s)
	}
	if m[4] != "" {
		return PartitionField{Transform: "identity", Column: m[4]}, nil
	}
	f := PartitionField{Transform: m[1], Column: m[3]}
	switch f.Transform {
	case "identity", "year", "month", "day", "hour":
		if m[2] != "" {
			return f, fmt.Errorf("%q: %s takes only a column", s, f.Transform)
		}
	case "bucket", "truncate":
		if m[2] == "" {
			return f, fmt.Errorf("%q: %s needs a number first, e.g. %s(16, %s)", s, f.Transform, f.Transform, f.Column)
		}
		n, err := strconv.Atoi(m[2])
		if err != nil || n < 1 || n > 1<<20 {
			return f, fmt.Errorf("%q: %s's number must be between 1 and 1048576", s, f.Transform)
		}
		f.Param = n
	default:
		return f, fmt.Errorf("%q: unknown transform %s (use identity, bucket, truncate, year, month, day or hour)", s, f.Transform)
	}
	return f, nil
}

// PartitionSpec returns the parsed partition_by of sourceTable, or nil.
func (ic *Iceberg) PartitionSpec(sourceTable string) []PartitionField {
	name := normalizeTable(sourceTable)
	for _, t := range ic.Tables {
		if normalizeTable(t.Source) != name {
			continue
		}
		var out []PartitionField
		for _, e := range t.PartitionBy {
			if f, err := ParsePartitionField(e); err == nil {
				out = append(out, f)
			}
		}
		return out
	}
	return nil
}

// icebergTables validates sink.iceberg.tables.
func (v *validator) icebergTables(ic *Iceberg) {
	known := map[string]bool{}
	if pg := v.c.Source.Postgres; pg != nil {
		for _, t := range pg.Tables {
			known[normalizeTable(t)] = true
		}
	}
	seen := map[string]int{}
	for i, t := range ic.Tables {
		p := fmt.Sprintf("sink.iceberg.tables[%d]", i)
		name := normalizeTable(t.Source)
		switch {
		case strings.TrimSpace(t.Source) == "":
			v.fail(p+".source", ErrInvalid, "required: the source table these settings are for")
			continue
		case !known[name]:
			v.fail(p+".source", ErrInvalid, "%s is not in source.postgres.tables", shortQuote(t.Source))
			continue
		}
		if j, dup := seen[name]; dup {
			v.fail(p+".source", ErrInvalid, "%s already has settings at sink.iceberg.tables[%d]%s; merge them", name, j, v.where(fmt.Sprintf("sink.iceberg.tables[%d]", j)))
			continue
		}
		seen[name] = i
		cols := map[string]bool{}
		for j, e := range t.PartitionBy {
			ep := fmt.Sprintf("%s.partition_by[%d]", p, j)
			f, err := ParsePartitionField(e)
			if err != nil {
				v.fail(ep, ErrInvalid, "%s", err.Error())
				continue
			}
			k := f.Transform + ":" + f.Column
			if cols[k] {
				v.fail(ep, ErrInvalid, "%s repeats a partition field", shortQuote(e))
			}
			cols[k] = true
		}
	}
}
