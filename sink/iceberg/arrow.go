package iceberg

import (
	"encoding/json"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// change is one log record bound for a table. Its rows stay encoded until
// a commit needs them, so a buffered change costs little more than its
// bytes: info is what the envelope says without its rows.
type change struct {
	table     *schema.Table
	info      schema.EnvelopeInfo
	key       []byte           // Avro key body (nil for truncates)
	body      []byte           // Avro envelope body
	env       *schema.Envelope // decoded envelope, when set by a test
	partition int32
	offset    int64
	skip      bool // consumed but makes no row (a truncate's extra copies)
	// keyChange: the record is marked HeaderKeyChange (the delete half of
	// a key change whose insert takes values from it).
	keyChange bool
	// placed: the change is in the partition the log's partitioner gives
	// its key body among the topic's partitions (placedByKey), found when
	// the record is decoded, its key at hand (partBounds).
	placed bool
	// keyIsInt: the key body is one zigzag varint and nothing else, whose
	// value is keyInt, read by the fetcher's decode while the key's bytes
	// are at hand (int64KeyValue).
	keyIsInt bool
	keyInt   int64
}

// envelope decodes the change's envelope.
func (c *change) envelope() (*schema.Envelope, error) {
	if c.env != nil {
		return c.env, nil
	}
	env, err := schema.DecodeEnvelope(c.table, c.body)
	if err != nil {
		return nil, err
	}
	return &env, nil
}

// op is the change's op letter.
func (c *change) op() byte {
	if c.env != nil {
		return c.env.Op
	}
	return c.info.Op
}

// insert reports whether the change makes a row and inserts it (a snapshot
// read or a create): a buffer of inserts only lands in flight (pipelines).
func (c *change) insert() bool {
	op := c.op()
	return !c.skip && (op == 'r' || op == 'c')
}

// position is the change's source position.
func (c *change) position() []byte {
	if c.env != nil {
		return c.env.Source.Position
	}
	return c.info.Position
}

// changelogBuilder turns changes into an Arrow record in the table's
// current Iceberg schema.
type changelogBuilder struct {
	sc     *iceberg.Schema
	asc    *arrow.Schema
	rb     *array.RecordBuilder
	fields map[string]int // column name -> arrow field index
	rows   int
}

func newChangelogBuilder(sc *iceberg.Schema) (*changelogBuilder, error) {
	asc, err := table.SchemaToArrowSchema(sc, nil, false, false)
	if err != nil {
		return nil, fmt.Errorf("iceberg: arrow schema: %w", err)
	}
	b := &changelogBuilder{sc: sc, asc: asc, rb: array.NewRecordBuilder(memory.DefaultAllocator, asc), fields: map[string]int{}}
	for i, f := range asc.Fields() {
		b.fields[f.Name] = i
	}
	return b, nil
}

func (b *changelogBuilder) release() { b.rb.Release() }

// add appends one changelog row. Columns of the table version that the
// Iceberg schema lacks are an error: the caller evolves the schema first.
func (b *changelogBuilder) add(c *change) error {
	env, err := c.envelope()
	if err != nil {
		return err
	}
	row := env.After
	if row == nil {
		row = env.Before
	}
	set := make([]bool, len(b.asc.Fields()))
	var unchanged []string
	for i, col := range c.table.Columns {
		fi, ok := b.fields[col.Name]
		if !ok {
			return fmt.Errorf("iceberg: column %q of %s is not in the table schema", col.Name, c.table.QualifiedName())
		}
		var v any
		if row != nil {
			v = row[i]
		}
		if schema.IsUnchanged(v) {
			unchanged = append(unchanged, col.Name)
			v = nil
		}
		if err := appendValue(b.rb.Field(fi), col, v); err != nil {
			return fmt.Errorf("iceberg: %s column %q: %w", c.table.QualifiedName(), col.Name, err)
		}
		set[fi] = true
	}
	meta := map[string]any{
		colOp:        string([]byte{env.Op}),
		colLSN:       optInt64(int64(env.Source.CommitLSN()), env.Source.CommitLSN() != 0),
		colTxID:      optInt64(int64(env.Source.TxID), env.Source.TxID != 0),
		colCommitTS:  env.Source.TsMs * 1000,
		colPartition: c.partition,
		colOffset:    c.offset,
	}
	if len(unchanged) > 0 {
		js, _ := json.Marshal(unchanged)
		meta[colUnchanged] = string(js)
	}
	for name, v := range meta {
		fi := b.fields[name]
		if err := appendMeta(b.rb.Field(fi), v); err != nil {
			return fmt.Errorf("iceberg: %s: %w", name, err)
		}
		set[fi] = true
	}
	for fi, ok := range set {
		if !ok { // a column the row's version lacks: added later, or dropped
			f := b.sc.Field(fi)
			var v any
			if !c.table.WasDropped(f.Name) {
				v = initialValue(f)
			}
			if err := appendValue(b.rb.Field(fi), schema.Column{Name: f.Name}, v); err != nil {
				return fmt.Errorf("iceberg: %s column %q: initial-default: %w", c.table.QualifiedName(), f.Name, err)
			}
		}
	}
	b.rows++
	return nil
}

func optInt64(v int64, ok bool) any {
	if !ok {
		return nil
	}
	return v
}

func appendMeta(fb array.Builder, v any) error {
	if v == nil {
		fb.AppendNull()
		return nil
	}
	switch fb := fb.(type) {
	case *array.StringBuilder:
		fb.Append(v.(string))
	case *array.Int64Builder:
		fb.Append(v.(int64))
	case *array.Int32Builder:
		fb.Append(v.(int32))
	case *array.TimestampBuilder:
		fb.Append(arrow.Timestamp(v.(int64)))
	default:
		return fmt.Errorf("unexpected builder %T", fb)
	}
	return nil
}

// appendValue appends v (cdcd's Go representation of col's kind) to fb.
func appendValue(fb array.Builder, col schema.Column, v any) error {
	if v == nil {
		fb.AppendNull()
		return nil
	}
	switch fb := fb.(type) {
	case *array.BooleanBuilder:
		fb.Append(v.(bool))
	case *array.Int32Builder:
		fb.Append(int32(v.(int64)))
	case *array.Int64Builder:
		fb.Append(v.(int64))
	case *array.Float32Builder:
		fb.Append(v.(float32))
	case *array.Float64Builder:
		fb.Append(v.(float64))
	case *array.StringBuilder:
		switch s := v.(type) {
		case string:
			fb.Append(s)
		case schema.IntervalValue:
			fb.Append(s.String())
		default:
			return fmt.Errorf("value %T for a string column", v)
		}
	case *array.ListBuilder:
		l, ok := v.([]any)
		if !ok || col.Elem == nil {
			return fmt.Errorf("value %T for a list column", v)
		}
		fb.Append(true)
		for _, e := range l {
			if err := appendValue(fb.ValueBuilder(), *col.Elem, e); err != nil {
				return err
			}
		}
	case *array.BinaryBuilder:
		fb.Append(v.([]byte))
	case *array.Decimal128Builder:
		dt := fb.Type().(*arrow.Decimal128Type)
		if v == "NaN" {
			return fmt.Errorf("NaN cannot be stored in Iceberg's %s; declare the source column as unconstrained numeric "+
				"(it then maps to exact text) or keep NaN out of it", dt)
		}
		n, err := decimal128.FromString(v.(string), dt.Precision, dt.Scale)
		if err != nil {
			return err
		}
		fb.Append(n)
	case *array.Date32Builder:
		fb.Append(arrow.Date32(v.(int32)))
	case *array.Time64Builder:
		fb.Append(arrow.Time64(v.(int64)))
	case *array.TimestampBuilder:
		fb.Append(arrow.Timestamp(v.(int64)))
	case *extensions.UUIDBuilder:
		fb.AppendBytes(v.([16]byte))
	default:
		return fmt.Errorf("no conversion of %s to %T", col.Kind, fb)
	}
	return nil
}

// record returns the built rows as one Arrow record.
func (b *changelogBuilder) record() arrow.RecordBatch { return b.rb.NewRecordBatch() }
