package schema

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
)

// Avro schemas for a table version.
//
// The key schema is a record of the primary-key columns. The value schema is
// Debezium's envelope (envelope.go) around a row record of all columns, in
// which a NOT NULL column is a required field and any other column a
// ["null", T] union with default null. Column fields carry the table model
// in properties so a consumer with only the value schema can rebuild the
// table:
//
//	field props:  "cdcd.kind" (Kind name), "cdcd.source_type", "cdcd.column"
//	              (original name when it had to be sanitized for Avro),
//	              "cdcd.initial_default" (Column.Default's text, default.go)
//	record props on the row record: "cdcd.namespace", "cdcd.table",
//	              "cdcd.key" (key column names in key order), "cdcd.dropped"
//	              (Table.Dropped, only when there are any)
//
// A required field has a default, its type's zero (fillValue), so a NOT
// NULL column added later keeps the subject BACKWARD compatible.
//
// Record names are derived from the topic only, so they stay stable across
// table versions (a requirement of Avro schema resolution).

// Property names carried in the Avro schemas.
const (
	propKind       = "cdcd.kind"
	propSourceType = "cdcd.source_type"
	propColumn     = "cdcd.column"
	propNamespace  = "cdcd.namespace"
	propTable      = "cdcd.table"
	propKey        = "cdcd.key"
	propDropped    = "cdcd.dropped"
	// propNotNull marked NOT NULL columns in the legacy layout, whose row
	// fields were all nullable.
	propNotNull = "cdcd.not_null"
)

type jsonField struct {
	Name    string `json:"name"`
	Type    any    `json:"type"`
	Default any    `json:"default,omitempty"`
	// HasNullDefault forces "default": null, which omitempty would drop.
	HasNullDefault bool              `json:"-"`
	Props          map[string]any    `json:"-"`
	Extra          map[string]string `json:"-"`
}

// MarshalJSON writes name, type, default (including an explicit null) and props.
func (f jsonField) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteString(`{"name":`)
	writeJSON(&b, f.Name)
	b.WriteString(`,"type":`)
	writeJSON(&b, f.Type)
	if f.HasNullDefault {
		b.WriteString(`,"default":null`)
	} else if f.Default != nil {
		b.WriteString(`,"default":`)
		writeJSON(&b, f.Default)
	}
	writeProps(&b, f.Props)
	b.WriteByte('}')
	return []byte(b.String()), nil
}

type jsonRecord struct {
	Name      string
	Namespace string
	Fields    []jsonField
	Props     map[string]any
}

// fullName is the record's name with its namespace.
func (r jsonRecord) fullName() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "." + r.Name
}

func (r jsonRecord) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteString(`{"type":"record","name":`)
	writeJSON(&b, r.Name)
	if r.Namespace != "" {
		b.WriteString(`,"namespace":`)
		writeJSON(&b, r.Namespace)
	}
	b.WriteString(`,"fields":`)
	writeJSON(&b, r.Fields)
	writeProps(&b, r.Props)
	b.WriteByte('}')
	return []byte(b.String()), nil
}

func writeJSON(b *strings.Builder, v any) {
	buf, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own types are marshalled
	}
	b.Write(buf)
}

// writeProps writes props in sorted key order so schemas are byte-stable.
func writeProps(b *strings.Builder, props map[string]any) {
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		b.WriteByte(',')
		writeJSON(b, k)
		b.WriteByte(':')
		writeJSON(b, props[k])
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// AvroName makes s a valid Avro name: characters outside [A-Za-z0-9_]
// become '_', and a leading digit gets a '_' prefix.
func AvroName(s string) string {
	var b strings.Builder
	for i, r := range s {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if ok {
			b.WriteRune(r)
			continue
		}
		if i == 0 && r >= '0' && r <= '9' {
			b.WriteByte('_')
			b.WriteRune(r)
			continue
		}
		b.WriteByte('_')
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}

// avroNamespace turns a topic ("shop.public.orders") into a valid Avro
// namespace, part by part.
func avroNamespace(topic string) string {
	parts := strings.Split(topic, ".")
	for i, p := range parts {
		parts[i] = AvroName(p)
	}
	return strings.Join(parts, ".")
}

// Names of the Avro types cdcd defines besides the table's own records.
const (
	intervalRecord = "cdcd.Interval"
	propElemKind   = "cdcd.elem_kind"
)

// avroTypes builds the Avro types of one schema document; a named type
// (the interval record) is defined at its first use and referenced after.
type avroTypes struct{ defined map[string]bool }

func (a *avroTypes) named(name string, def any) any {
	if a.defined[name] {
		return name
	}
	if a.defined == nil {
		a.defined = map[string]bool{}
	}
	a.defined[name] = true
	return def
}

// columnType returns the Avro type of a column's non-null values.
func (a *avroTypes) columnType(c Column) (any, error) {
	switch c.Kind {
	case Bool:
		return "boolean", nil
	case Int16, Int32:
		return "int", nil
	case Int64:
		return "long", nil
	case Float32:
		return "float", nil
	case Float64:
		return "double", nil
	case Decimal:
		if c.Precision == 0 {
			// Unconstrained numeric: exact text, including NaN and ±Infinity.
			return map[string]any{"type": "string", "connect.name": "cdcd.VariableDecimal"}, nil
		}
		// numeric(p,s) may hold NaN, which Avro's decimal cannot: the
		// encoder refuses it with the fix rather than writing 0 or null.
		return map[string]any{"type": "bytes", "logicalType": "decimal", "precision": c.Precision, "scale": c.Scale}, nil
	case String:
		return "string", nil
	case Bytes:
		return "bytes", nil
	case JSON:
		return map[string]any{"type": "string", "connect.name": "io.debezium.data.Json"}, nil
	// connect.name: the Debezium semantic type of the same encoding, for
	// consumers that read Debezium's names (docs/types.md).
	case UUID:
		return map[string]any{"type": "string", "logicalType": "uuid", "connect.name": "io.debezium.data.Uuid"}, nil
	case Date:
		return map[string]any{"type": "int", "logicalType": "date", "connect.name": "io.debezium.time.Date"}, nil
	case Time:
		return map[string]any{"type": "long", "logicalType": "time-micros", "connect.name": "io.debezium.time.MicroTime"}, nil
	case Timestamp:
		return map[string]any{"type": "long", "logicalType": "local-timestamp-micros", "connect.name": "io.debezium.time.MicroTimestamp"}, nil
	case TimestampTZ:
		return map[string]any{"type": "long", "logicalType": "timestamp-micros"}, nil
	case Interval:
		return a.named(intervalRecord, jsonRecord{Name: "Interval", Namespace: "cdcd", Fields: []jsonField{
			{Name: "months", Type: "int"}, {Name: "days", Type: "int"}, {Name: "micros", Type: "long"},
		}}), nil
	case List:
		if c.Elem == nil {
			return nil, fmt.Errorf("schema: list column %q has no element type", c.Name)
		}
		items, err := a.columnType(*c.Elem)
		if err != nil {
			return nil, err
		}
		items = nullableUnion(items, c.Elem.Nullable)
		return map[string]any{"type": "array", "items": items, propElemKind: c.Elem.Kind.String()}, nil
	}
	return nil, fmt.Errorf("schema: column %q has no Avro mapping for kind %s", c.Name, c.Kind)
}

// nullableUnion puts "null" first in typ's union when nullable; a union
// type (a constrained decimal) is flattened into it.
func nullableUnion(typ any, nullable bool) any {
	if !nullable {
		return typ
	}
	if u, ok := typ.([]any); ok {
		return append([]any{"null"}, u...)
	}
	return []any{"null", typ}
}

// fieldNames returns the Avro field name of every column, checking that
// sanitizing did not make two columns collide.
func fieldNames(t *Table) ([]string, error) {
	names := make([]string, len(t.Columns))
	seen := make(map[string]string, len(t.Columns))
	for i, c := range t.Columns {
		n := AvroName(c.Name)
		if prev, ok := seen[n]; ok {
			return nil, fmt.Errorf("schema: table %s: columns %q and %q both become Avro field %q; rename one of them",
				t.QualifiedName(), prev, c.Name, n)
		}
		seen[n] = c.Name
		names[i] = n
	}
	return names, nil
}

// columnFields returns the fields of the columns idx: NOT NULL columns are
// required fields (with their type's zero as default when defaults is set),
// others ["null", T] with default null.
func columnFields(t *Table, idx []int, names []string, defaults bool) ([]jsonField, error) {
	fields := make([]jsonField, 0, len(idx))
	var types avroTypes
	for _, i := range idx {
		c := t.Columns[i]
		typ, err := types.columnType(c)
		if err != nil {
			return nil, fmt.Errorf("schema: table %s: %w", t.QualifiedName(), err)
		}
		f := jsonField{Name: names[i], Type: typ, Props: map[string]any{propKind: c.Kind.String()}}
		if c.SourceType != "" {
			f.Props[propSourceType] = c.SourceType
		}
		if names[i] != c.Name {
			f.Props[propColumn] = c.Name
		}
		if c.Default != nil {
			text, err := DefaultText(c, c.Default)
			if err != nil {
				return nil, fmt.Errorf("schema: table %s: %w", t.QualifiedName(), err)
			}
			f.Props[propInitialDefault] = text
		}
		switch {
		case c.Nullable:
			f.Type = nullableUnion(typ, true)
			f.HasNullDefault = true
		case defaults:
			f.Default = fillDefault(c)
		}
		fields = append(fields, f)
	}
	return fields, nil
}

func allIndexes(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// KeySchema returns the Avro key schema (JSON) of t on topic.
func KeySchema(t *Table, topic string) (string, error) {
	if len(t.Key) == 0 {
		return "", fmt.Errorf("schema: table %s has no primary key", t.QualifiedName())
	}
	names, err := fieldNames(t)
	if err != nil {
		return "", err
	}
	fields, err := columnFields(t, t.Key, names, false)
	if err != nil {
		return "", err
	}
	rec := jsonRecord{Name: "Key", Namespace: avroNamespace(topic), Fields: fields}
	buf, err := json.Marshal(rec)
	return string(buf), err
}

// ValueSchema returns the Avro envelope schema (JSON) of t on topic, with
// PostgreSQL's source record.
func ValueSchema(t *Table, topic string) (string, error) {
	return ValueSchemaFor(t, topic, ConnectorPostgres)
}

// ValueSchemaFor returns the Avro envelope schema (JSON) of t on topic with
// connector's source record (ConnectorPostgres or ConnectorMySQL).
func ValueSchemaFor(t *Table, topic, connector string) (string, error) {
	names, err := fieldNames(t)
	if err != nil {
		return "", err
	}
	fields, err := columnFields(t, allIndexes(len(t.Columns)), names, true)
	if err != nil {
		return "", err
	}
	key := make([]string, len(t.Key))
	for i, k := range t.Key {
		key[i] = t.Columns[k].Name
	}
	ns := avroNamespace(topic)
	row := jsonRecord{Name: "Value", Namespace: ns, Fields: fields, Props: map[string]any{
		propNamespace: t.Namespace, propTable: t.Name, propKey: key,
	}}
	if len(t.Dropped) > 0 {
		row.Props[propDropped] = t.Dropped
	}
	env := jsonRecord{Name: "Envelope", Namespace: ns, Fields: envelopeFields(row, connector),
		Props: map[string]any{"connect.version": 2}}
	buf, err := json.Marshal(env)
	return string(buf), err
}

// TableFromValueSchema rebuilds the table model from an envelope schema
// written by ValueSchema.
func TableFromValueSchema(s string) (*Table, error) {
	parsed, err := avro.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("schema: parse value schema: %w", err)
	}
	env, ok := parsed.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("schema: value schema is %s, not a record", parsed.Type())
	}
	var row *avro.RecordSchema
	for _, f := range env.Fields() {
		if f.Name() != "before" {
			continue
		}
		if u, ok := f.Type().(*avro.UnionSchema); ok {
			for _, ut := range u.Types() {
				if r, ok := ut.(*avro.RecordSchema); ok {
					row = r
				}
			}
		}
	}
	if row == nil {
		return nil, fmt.Errorf("schema: value schema %s has no before record", env.FullName())
	}
	t := &Table{envelope: envelopeLayoutOf(env)}
	t.Namespace, _ = row.Prop(propNamespace).(string)
	t.Name, _ = row.Prop(propTable).(string)
	if t.Name == "" {
		return nil, fmt.Errorf("schema: value schema %s lacks %q: not written by cdcd", env.FullName(), propTable)
	}
	for _, f := range row.Fields() {
		c, err := columnFromField(f, t.envelope == layoutLegacy)
		if err != nil {
			return nil, fmt.Errorf("schema: table %s: %w", t.QualifiedName(), err)
		}
		t.Columns = append(t.Columns, c)
	}
	keys, _ := row.Prop(propKey).([]any)
	for _, k := range keys {
		name, _ := k.(string)
		i := t.ColumnIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("schema: table %s: key column %q is not a column", t.QualifiedName(), name)
		}
		t.Key = append(t.Key, i)
	}
	dropped, _ := row.Prop(propDropped).([]any)
	for _, d := range dropped {
		if name, ok := d.(string); ok {
			t.Dropped = append(t.Dropped, name)
		}
	}
	return t, nil
}

// columnFromField rebuilds a column; legacy: NOT NULL is the cdcd.not_null
// property of a nullable field.
func columnFromField(f *avro.Field, legacy bool) (Column, error) {
	c := Column{Name: f.Name()}
	if orig, ok := f.Prop(propColumn).(string); ok {
		c.Name = orig
	}
	kindName, _ := f.Prop(propKind).(string)
	k, ok := ParseKind(kindName)
	if !ok {
		return c, fmt.Errorf("field %q: unknown %s %q", f.Name(), propKind, kindName)
	}
	c.Kind = k
	c.SourceType, _ = f.Prop(propSourceType).(string)
	typ, nullable := nonNull(f.Type())
	c.Nullable = nullable && !(legacy && f.Prop(propNotNull) == true)
	if err := typeParams(&c, typ); err != nil {
		return c, fmt.Errorf("field %q: %w", f.Name(), err)
	}
	if text, ok := f.Prop(propInitialDefault).(string); ok {
		v, err := ParseDefault(c, text)
		if err != nil {
			return c, err
		}
		c.Default = v
	}
	return c, nil
}

// nonNull returns the first non-null type of a union (the type itself when
// it is not a union) and whether null was among the union's types.
func nonNull(typ avro.Schema) (avro.Schema, bool) {
	u, ok := typ.(*avro.UnionSchema)
	if !ok {
		return typ, false
	}
	var first avro.Schema
	nullable := false
	for _, ut := range u.Types() {
		if ut.Type() == avro.Null {
			nullable = true
		} else if first == nil {
			first = ut
		}
	}
	return first, nullable
}

// typeParams fills in a column's decimal parameters and list element from
// its Avro type.
func typeParams(c *Column, typ avro.Schema) error {
	if ls, ok := typ.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
		if d, ok := ls.Logical().(*avro.DecimalLogicalSchema); ok {
			c.Precision, c.Scale = d.Precision(), d.Scale()
		}
	}
	if c.Kind != List {
		return nil
	}
	arr, ok := typ.(*avro.ArraySchema)
	if !ok {
		return fmt.Errorf("list column has Avro type %s, not an array", typ.Type())
	}
	kindName, _ := arr.Prop(propElemKind).(string)
	k, ok := ParseKind(kindName)
	if !ok {
		return fmt.Errorf("unknown %s %q", propElemKind, kindName)
	}
	items, nullable := nonNull(arr.Items())
	c.Elem = &Column{Kind: k, Nullable: nullable}
	return typeParams(c.Elem, items)
}
