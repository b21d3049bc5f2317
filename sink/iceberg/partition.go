package iceberg

import (
	"fmt"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/schema"
)

// PartitionField is one field of a new table's partition spec.
type PartitionField struct {
	// Transform is identity, bucket, truncate, year, month, day or hour.
	Transform string
	// Param is N of bucket[N] or W of truncate[W].
	Param  int
	Column string
}

// buildSpec turns the configured fields into a partition spec over sc.
func buildSpec(sc *iceberg.Schema, fields []PartitionField) (*iceberg.PartitionSpec, error) {
	if len(fields) == 0 {
		return iceberg.UnpartitionedSpec, nil
	}
	pfs := make([]iceberg.PartitionField, 0, len(fields))
	for i, f := range fields {
		src, ok := sc.FindFieldByName(f.Column)
		if !ok {
			return nil, fmt.Errorf("iceberg: partition_by names column %q, which the table does not have", f.Column)
		}
		var tr iceberg.Transform
		name := f.Column
		switch f.Transform {
		case "identity":
			tr = iceberg.IdentityTransform{}
		case "bucket":
			tr, name = iceberg.BucketTransform{NumBuckets: f.Param}, fmt.Sprintf("%s_bucket_%d", f.Column, f.Param)
		case "truncate":
			tr, name = iceberg.TruncateTransform{Width: f.Param}, fmt.Sprintf("%s_trunc_%d", f.Column, f.Param)
		case "year":
			tr, name = iceberg.YearTransform{}, f.Column+"_year"
		case "month":
			tr, name = iceberg.MonthTransform{}, f.Column+"_month"
		case "day":
			tr, name = iceberg.DayTransform{}, f.Column+"_day"
		case "hour":
			tr, name = iceberg.HourTransform{}, f.Column+"_hour"
		default:
			return nil, fmt.Errorf("iceberg: unknown partition transform %q", f.Transform)
		}
		if !tr.CanTransform(src.Type) {
			return nil, fmt.Errorf("iceberg: partition field %s(%s): a %s column cannot be partitioned by %s", f.Transform, f.Column, src.Type, f.Transform)
		}
		pfs = append(pfs, iceberg.PartitionField{SourceIDs: []int{src.ID}, FieldID: 1000 + i, Name: name, Transform: tr})
	}
	spec := iceberg.NewPartitionSpec(pfs...)
	return &spec, nil
}

// partitioner computes a row's partition under the table's current spec.
type partitioner struct {
	spec   iceberg.PartitionSpec
	fields []partField
}

type partField struct {
	id     int
	name   string // the partition field's name (for paths)
	src    iceberg.NestedField
	srcIdx int // index of the source field in the schema's fields
	tr     iceberg.Transform
}

func newPartitioner(sc *iceberg.Schema, spec iceberg.PartitionSpec) (*partitioner, error) {
	p := &partitioner{spec: spec}
	fields := sc.Fields()
	for _, pf := range spec.Fields() {
		id := pf.SourceIDs[0]
		idx := -1
		for i, f := range fields {
			if f.ID == id {
				idx = i
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("iceberg: partition field %s: source column %d is not in the schema", pf.Name, id)
		}
		p.fields = append(p.fields, partField{id: pf.FieldID, name: pf.Name, src: fields[idx], srcIdx: idx, tr: pf.Transform})
	}
	return p, nil
}

func (p *partitioner) partitioned() bool { return len(p.fields) > 0 }

// partition returns the partition values of vals (a row in schema field
// order) keyed by partition field id, and a stable key for grouping.
func (p *partitioner) partition(vals []any) (map[int]any, string, error) {
	if len(p.fields) == 0 {
		return nil, "", nil
	}
	out := make(map[int]any, len(p.fields))
	var key strings.Builder
	for _, f := range p.fields {
		lit, err := literalOf(f.src.Type, vals[f.srcIdx])
		if err != nil {
			return nil, "", fmt.Errorf("iceberg: partition %s: %w", f.name, err)
		}
		var v any
		if lit != nil {
			if r := f.tr.Apply(iceberg.Optional[iceberg.Literal]{Valid: true, Val: lit}); r.Valid {
				v = r.Val.Any()
			}
		}
		out[f.id] = v
		fmt.Fprintf(&key, "%v\x00", v)
	}
	return out, key.String(), nil
}

// path renders a partition as name=value/... for file locations.
func (p *partitioner) path(values map[int]any) string {
	parts := make([]string, 0, len(p.fields))
	for _, f := range p.fields {
		v := values[f.id]
		s := "null"
		if v != nil {
			s = fmt.Sprint(v)
		}
		parts = append(parts, f.name+"="+strings.NewReplacer("/", "%2F", "=", "%3D", " ", "%20").Replace(s))
	}
	return strings.Join(parts, "/")
}

// literalOf converts cdcd's value of an Iceberg type to a literal.
func literalOf(t iceberg.Type, v any) (iceberg.Literal, error) {
	if v == nil {
		return nil, nil
	}
	switch t := t.(type) {
	case iceberg.BooleanType:
		return iceberg.NewLiteral(v.(bool)), nil
	case iceberg.Int32Type:
		return iceberg.NewLiteral(int32(v.(int64))), nil
	case iceberg.Int64Type:
		return iceberg.NewLiteral(v.(int64)), nil
	case iceberg.Float32Type:
		return iceberg.NewLiteral(v.(float32)), nil
	case iceberg.Float64Type:
		return iceberg.NewLiteral(v.(float64)), nil
	case iceberg.StringType:
		if iv, ok := v.(schema.IntervalValue); ok {
			return iceberg.NewLiteral(iv.String()), nil // as stored (icebergType)
		}
		return iceberg.NewLiteral(v.(string)), nil
	case iceberg.BinaryType:
		return iceberg.NewLiteral(v.([]byte)), nil
	case iceberg.DateType:
		return iceberg.NewLiteral(iceberg.Date(v.(int32))), nil
	case iceberg.TimeType:
		return iceberg.NewLiteral(iceberg.Time(v.(int64))), nil
	case iceberg.TimestampType:
		return iceberg.NewLiteral(iceberg.Timestamp(v.(int64))), nil
	case iceberg.TimestampTzType:
		return iceberg.NewLiteral(iceberg.Timestamp(v.(int64))), nil
	case iceberg.UUIDType:
		return iceberg.NewLiteral(uuid.UUID(v.([16]byte))), nil
	case iceberg.DecimalType:
		n, err := decimal128.FromString(v.(string), int32(t.Precision()), int32(t.Scale()))
		if err != nil {
			return nil, err
		}
		return iceberg.NewLiteral(iceberg.Decimal{Val: n, Scale: t.Scale()}), nil
	}
	return nil, fmt.Errorf("no literal for %s", t)
}
