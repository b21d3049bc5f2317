package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

// Debezium's documented schemas, written here from the PostgreSQL and MySQL
// connector documentation ("Descriptions of change events": the value
// schema of the customers table, the source fields of each connector, the
// transaction block) and mapped to Avro the way Confluent's AvroConverter
// maps Kafka Connect schemas: int32 -> int, int64 -> long, an optional
// field -> ["null", T] with default null (T first when the Connect schema
// has a default: snapshot), a struct -> a record of the schema's name.
//
// Each entry is name and type in the notation of describeAvro.
type dbzField struct{ name, typ string }

var (
	// The envelope, in order (Debezium 2.6+: ts_us and ts_ns).
	dbzEnvelope = []dbzField{
		{"before", "?record:PostgreSQL_server.inventory.customers.Value"},
		{"after", "?record:PostgreSQL_server.inventory.customers.Value"},
		{"source", "record:io.debezium.connector.postgresql.Source"},
		{"transaction", "?record:event.block"},
		{"op", "string"},
		{"ts_ms", "?long"},
		{"ts_us", "?long"},
		{"ts_ns", "?long"},
	}
	dbzCommonSource = []dbzField{
		{"version", "string"}, {"connector", "string"}, {"name", "string"}, {"ts_ms", "long"},
		{"snapshot", "string|null=false"}, {"db", "string"}, {"sequence", "?string"},
		{"ts_us", "?long"}, {"ts_ns", "?long"},
	}
	dbzPostgresSource = append(dbzCommonSource[:len(dbzCommonSource):len(dbzCommonSource)],
		dbzField{"schema", "string"}, dbzField{"table", "string"}, dbzField{"txId", "?long"},
		dbzField{"lsn", "?long"}, dbzField{"xmin", "?long"})
	dbzMySQLSource = append(dbzCommonSource[:len(dbzCommonSource):len(dbzCommonSource)],
		dbzField{"table", "?string"}, dbzField{"server_id", "long"}, dbzField{"gtid", "?string"},
		dbzField{"file", "string"}, dbzField{"pos", "long"}, dbzField{"row", "int"},
		dbzField{"thread", "?long"}, dbzField{"query", "?string"})
	dbzTransaction = []dbzField{{"id", "string"}, {"total_order", "long"}, {"data_collection_order", "long"}}
	// CREATE TABLE customers (id SERIAL, first_name VARCHAR(255) NOT NULL,
	// last_name VARCHAR(255) NOT NULL, email VARCHAR(255) NOT NULL,
	// PRIMARY KEY(id)); plus a nullable column.
	dbzValue = []dbzField{{"id", "int"}, {"first_name", "string"}, {"last_name", "string"}, {"email", "string"}, {"note", "?string"}}
	dbzKey   = []dbzField{{"id", "int"}}
	// Debezium's allowed values of source.snapshot (SnapshotRecord).
	dbzSnapshotValues = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"
)

func customersTable() *Table {
	return &Table{Namespace: "inventory", Name: "customers", Columns: []Column{
		{Name: "id", Kind: Int32, SourceType: "int4"},
		{Name: "first_name", Kind: String, SourceType: "varchar(255)"},
		{Name: "last_name", Kind: String, SourceType: "varchar(255)"},
		{Name: "email", Kind: String, SourceType: "varchar(255)"},
		{Name: "note", Kind: String, SourceType: "text", Nullable: true},
	}, Key: []int{0}}
}

// describeAvro renders a field's type: "long", "?long" for ["null", long],
// "record:<full name>", "string|null=false" for [string, null] with
// default "false".
func describeAvro(f *avro.Field) string {
	return describeType(f.Type(), f)
}

func describeType(s avro.Schema, f *avro.Field) string {
	switch s := s.(type) {
	case *avro.RecordSchema:
		return "record:" + s.FullName()
	case *avro.RefSchema:
		return describeType(s.Schema(), nil)
	case *avro.UnionSchema:
		ts := s.Types()
		if len(ts) == 2 && ts[0].Type() == avro.Null {
			return "?" + describeType(ts[1], nil)
		}
		var parts []string
		for _, t := range ts {
			parts = append(parts, describeType(t, nil))
		}
		d := strings.Join(parts, "|")
		if f != nil && f.HasDefault() {
			if v, ok := f.Default().(string); ok {
				d += "=" + v
			}
		}
		return d
	}
	return string(s.Type())
}

func fieldsOf(t *testing.T, s avro.Schema) map[string]*avro.Field {
	t.Helper()
	rs, ok := s.(*avro.RecordSchema)
	if !ok {
		t.Fatalf("%s is not a record", s.Type())
	}
	out := map[string]*avro.Field{}
	for _, f := range rs.Fields() {
		out[f.Name()] = f
	}
	return out
}

// checkFields compares a record's fields with Debezium's, in order; extra
// fields of cdcd are allowed after Debezium's (extra lists them).
func checkFields(t *testing.T, what string, s avro.Schema, want []dbzField, extra ...string) {
	t.Helper()
	if u, ok := s.(*avro.UnionSchema); ok {
		s = u.Types()[1]
	}
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	rs := s.(*avro.RecordSchema)
	fs := rs.Fields()
	if len(fs) != len(want)+len(extra) {
		var names []string
		for _, f := range fs {
			names = append(names, f.Name())
		}
		t.Fatalf("%s: fields %v, want Debezium's %v then %v", what, names, want, extra)
	}
	for i, w := range want {
		if got := (dbzField{fs[i].Name(), describeAvro(fs[i])}); got != w {
			t.Errorf("%s field %d: %v, want %v", what, i, got, w)
		}
	}
	for i, name := range extra {
		if fs[len(want)+i].Name() != name {
			t.Errorf("%s field %d: %s, want cdcd's %s", what, len(want)+i, fs[len(want)+i].Name(), name)
		}
	}
}

// TestDebeziumValueSchema: the value and key schemas of a table match
// Debezium's documented ones, for both connectors.
func TestDebeziumValueSchema(t *testing.T) {
	const topic = "PostgreSQL_server.inventory.customers"
	for _, tc := range []struct {
		connector string
		source    []dbzField
	}{{ConnectorPostgres, dbzPostgresSource}, {ConnectorMySQL, dbzMySQLSource}} {
		t.Run(tc.connector, func(t *testing.T) {
			vs, err := ValueSchemaFor(customersTable(), topic, tc.connector)
			if err != nil {
				t.Fatal(err)
			}
			env := avro.MustParse(vs)
			if env.(*avro.RecordSchema).FullName() != topic+".Envelope" {
				t.Errorf("envelope named %s", env.(*avro.RecordSchema).FullName())
			}
			want := dbzEnvelope
			if tc.connector == ConnectorMySQL {
				want = append([]dbzField(nil), dbzEnvelope...)
				want[2].typ = "record:io.debezium.connector.mysql.Source"
			}
			checkFields(t, "envelope", env, want, "unchanged", "absent", "position")
			fs := fieldsOf(t, env)
			checkFields(t, "source", fs["source"].Type(), tc.source)
			checkFields(t, "transaction", fs["transaction"].Type(), dbzTransaction)
			checkFields(t, "after", fs["after"].Type(), dbzValue)
			checkFields(t, "before", fs["before"].Type(), dbzValue)

			snap := fieldsOf(t, fs["source"].Type())["snapshot"]
			first := snap.Type().(*avro.UnionSchema).Types()[0].(*avro.PrimitiveSchema)
			if first.Prop("connect.name") != "io.debezium.data.Enum" ||
				first.Prop("connect.parameters").(map[string]any)["allowed"] != dbzSnapshotValues {
				t.Errorf("snapshot is not Debezium's Enum: %v", first)
			}
			ks, _ := KeySchema(customersTable(), topic)
			key := avro.MustParse(ks)
			if key.(*avro.RecordSchema).FullName() != topic+".Key" {
				t.Errorf("key named %s", key.(*avro.RecordSchema).FullName())
			}
			checkFields(t, "key", key, dbzKey)
		})
	}
}

// TestDebeziumEnvelopeValues: a change encoded by cdcd, decoded by hamba
// with the schema alone, carries Debezium's values where a consumer reads
// them: source.snapshot "false" by default, NOT NULL values without a
// union, Debezium's placeholder for an unchanged text value.
func TestDebeziumEnvelopeValues(t *testing.T) {
	tbl := customersTable()
	vs, _ := ValueSchema(tbl, "dbserver1.inventory.customers")
	env := Envelope{
		Before: []any{int64(1001), nil, nil, nil, nil}, // REPLICA IDENTITY DEFAULT: the key only
		Op:     'd', TsMs: 1700000000001,
		Source: SourceInfo{Version: "0.1.0", Connector: ConnectorPostgres, Name: "dbserver1", TsMs: 1700000000000,
			DB: "postgres", Schema: "inventory", Table: "customers", TxID: 555, LSN: 24023128, Position: []byte{1}},
	}
	buf, err := AppendEnvelope(nil, tbl, &env)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(vs), buf, &got); err != nil {
		t.Fatal(err)
	}
	src := got["source"].(map[string]any)
	if src["snapshot"] != "false" || src["txId"] != int64(555) || src["schema"] != "inventory" {
		t.Errorf("source %v", src)
	}
	before := got["before"].(map[string]any)["dbserver1.inventory.customers.Value"].(map[string]any)
	if before["id"] != 1001 || before["first_name"] != "" || before["note"] != nil {
		t.Errorf("before %v", before)
	}
	if absent := got["absent"].([]any); len(absent) != 3 || absent[0] != "first_name" {
		t.Errorf("absent %v", absent)
	}
	back, err := DecodeEnvelope(tbl, buf)
	if err != nil || back.Before[1] != nil || back.Before[0] != int64(1001) {
		t.Errorf("decoded before %v: %v", back.Before, err)
	}

	// An unchanged NOT NULL text value: Debezium's placeholder, listed.
	env = Envelope{After: []any{int64(1001), Unchanged, "Doe", "a@b", Unchanged}, Op: 'u', Source: env.Source}
	buf, err = AppendEnvelope(nil, tbl, &env)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := avro.Unmarshal(avro.MustParse(vs), buf, &got); err != nil {
		t.Fatal(err)
	}
	after := got["after"].(map[string]any)["dbserver1.inventory.customers.Value"].(map[string]any)
	if after["first_name"] != UnavailableValue || after["note"] != UnavailableValue {
		t.Errorf("after %v", after)
	}
	if back, err := DecodeEnvelope(tbl, buf); err != nil || !IsUnchanged(back.After[1]) || !IsUnchanged(back.After[4]) {
		t.Errorf("decoded after %v: %v", back.After, err)
	}

	// A NOT NULL column without a value in after is refused, never zero.
	env = Envelope{After: []any{int64(1), nil, "x", "y", nil}, Op: 'c', Source: env.Source}
	var ce *ColumnError
	if _, err := AppendEnvelope(nil, tbl, &env); !errorsAs(err, &ce) || ce.Column != "first_name" {
		t.Errorf("NULL in a NOT NULL after column: %v", err)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
