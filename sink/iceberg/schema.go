package iceberg

import (
	"fmt"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// Changelog (append mode) metadata columns, after the source's columns
// (frozen: doc.go, "Formats").
const (
	colOp        = "_cdc_op"        // c u d r t
	colLSN       = "_cdc_lsn"       // PostgreSQL commit LSN
	colTxID      = "_cdc_tx_id"     // source transaction id
	colCommitTS  = "_cdc_commit_ts" // source commit time
	colUnchanged = "_cdc_unchanged" // JSON array of columns whose value the source did not send
	colPartition = "_cdc_partition" // log partition
	colOffset    = "_cdc_offset"    // log offset: order per key
)

// icebergType maps a column of the table model to its Iceberg type.
func icebergType(c schema.Column) (iceberg.Type, error) {
	switch c.Kind {
	case schema.Bool:
		return iceberg.PrimitiveTypes.Bool, nil
	case schema.Int16, schema.Int32:
		return iceberg.PrimitiveTypes.Int32, nil
	case schema.Int64:
		return iceberg.PrimitiveTypes.Int64, nil
	case schema.Float32:
		return iceberg.PrimitiveTypes.Float32, nil
	case schema.Float64:
		return iceberg.PrimitiveTypes.Float64, nil
	case schema.Decimal:
		if c.Precision == 0 || c.Precision > 38 {
			// Unconstrained (or wider than Iceberg allows): exact text.
			return iceberg.PrimitiveTypes.String, nil
		}
		return iceberg.DecimalTypeOf(c.Precision, c.Scale), nil
	case schema.String, schema.JSON:
		return iceberg.PrimitiveTypes.String, nil
	case schema.Bytes:
		return iceberg.PrimitiveTypes.Binary, nil
	case schema.UUID:
		return iceberg.PrimitiveTypes.UUID, nil
	case schema.Date:
		return iceberg.PrimitiveTypes.Date, nil
	case schema.Time:
		return iceberg.PrimitiveTypes.Time, nil
	case schema.Timestamp:
		return iceberg.PrimitiveTypes.Timestamp, nil
	case schema.TimestampTZ:
		return iceberg.PrimitiveTypes.TimestampTz, nil
	case schema.Interval:
		// Iceberg has no interval: ISO 8601 text, the parts kept apart
		// (schema.IntervalValue.String).
		return iceberg.PrimitiveTypes.String, nil
	case schema.List:
		if c.Elem == nil {
			return nil, fmt.Errorf("iceberg: list column %q has no element type", c.Name)
		}
		elem, err := icebergType(*c.Elem)
		if err != nil {
			return nil, err
		}
		// ElementID is a placeholder like every field id here (see
		// changelogSchema, which makes them unique; catalogs assign their own).
		return &iceberg.ListType{Element: elem, ElementRequired: !c.Elem.Nullable}, nil
	}
	return nil, fmt.Errorf("iceberg: column %q: no Iceberg type for %s", c.Name, c.Kind)
}

// withNestedIDs returns typ with its nested fields numbered from *next on,
// so a schema of placeholder ids has no duplicates.
func withNestedIDs(typ iceberg.Type, next *int) iceberg.Type {
	l, ok := typ.(*iceberg.ListType)
	if !ok {
		return typ
	}
	id := *next
	*next++
	return &iceberg.ListType{ElementID: id, Element: withNestedIDs(l.Element, next), ElementRequired: l.ElementRequired}
}

// sameType reports whether two types are equal apart from nested field ids,
// which differ between a type built here and the one a catalog stored.
func sameType(a, b iceberg.Type) bool {
	la, okA := a.(*iceberg.ListType)
	lb, okB := b.(*iceberg.ListType)
	if okA || okB {
		return okA && okB && la.ElementRequired == lb.ElementRequired && sameType(la.Element, lb.Element)
	}
	return a.Equals(b)
}

// changelogSchema is the Iceberg schema of an append-mode table: every
// source column (optional: a delete carries only the key) and the metadata
// columns. Field ids are placeholders; the catalog assigns fresh ones.
func changelogSchema(t *schema.Table) (*iceberg.Schema, error) {
	fields := make([]iceberg.NestedField, 0, len(t.Columns)+7)
	id := 1
	for _, c := range t.Columns {
		typ, err := icebergType(c)
		if err != nil {
			return nil, fmt.Errorf("iceberg: table %s: %w", t.QualifiedName(), err)
		}
		fields = append(fields, iceberg.NestedField{ID: id, Name: c.Name, Type: typ, Doc: c.SourceType})
		id++
	}
	for _, m := range metaFields() {
		m.ID = id
		id++
		fields = append(fields, m)
	}
	for i := range fields {
		fields[i].Type = withNestedIDs(fields[i].Type, &id)
	}
	return iceberg.NewSchema(0, fields...), nil
}

func metaFields() []iceberg.NestedField {
	return []iceberg.NestedField{
		{Name: colOp, Type: iceberg.PrimitiveTypes.String, Required: true, Doc: "change kind: c insert, u update, d delete, r snapshot read, t truncate"},
		{Name: colLSN, Type: iceberg.PrimitiveTypes.Int64, Doc: "source commit LSN"},
		{Name: colTxID, Type: iceberg.PrimitiveTypes.Int64, Doc: "source transaction id"},
		{Name: colCommitTS, Type: iceberg.PrimitiveTypes.TimestampTz, Doc: "source commit time"},
		{Name: colUnchanged, Type: iceberg.PrimitiveTypes.String, Doc: "JSON array of columns the source did not send because they did not change"},
		{Name: colPartition, Type: iceberg.PrimitiveTypes.Int32, Required: true, Doc: "cdcd log partition"},
		{Name: colOffset, Type: iceberg.PrimitiveTypes.Int64, Required: true, Doc: "cdcd log offset (orders the changes of a key)"},
	}
}
