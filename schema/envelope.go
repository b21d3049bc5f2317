package schema

import "strings"

// Debezium's envelope, as its connectors write it through Confluent's Avro
// converter (Debezium 2.6 and later):
//
//	<topic>.Envelope {
//	  before       ["null", <topic>.Value]     the row before (update, delete)
//	  after        ["null", <topic>.Value]     the row after (create, update, read)
//	  source       io.debezium.connector.postgresql.Source | io.debezium.connector.mysql.Source
//	  transaction  ["null", event.block]       {id, total_order, data_collection_order}
//	  op           string                      c u d r t
//	  ts_ms, ts_us, ts_ns  ["null", long]      when cdcd processed the change
//	  unchanged    array<string>   cdcd: after's columns the source did not send (unchanged TOASTed values)
//	  absent       array<string>   cdcd: before's NOT NULL columns the source did not send
//	  position     bytes           cdcd: the change's sortable source position
//	}
//
// Optional Connect fields become ["null", T] with default null, required
// ones T; the snapshot field is Debezium's io.debezium.data.Enum, a string
// that defaults to "false". In <topic>.Value a NOT NULL column is a
// required field, as in Debezium. A value the source did not send still
// needs one there: before's columns outside the replica identity hold
// their type's zero and are named in absent (Debezium writes the same zero
// without saying so); an unchanged TOASTed text or bytes value holds
// Debezium's placeholder UnavailableValue, other kinds null or zero, and is
// named in unchanged. A consumer that reads cdcd's three extra fields gets
// the rows exactly; one that does not sees what Debezium would send.

// The connectors, as source.connector names them.
const (
	ConnectorPostgres = "postgresql"
	ConnectorMySQL    = "mysql"
)

// UnavailableValue is Debezium's placeholder for a value the source did not
// send because it did not change (unavailable.value.placeholder's default):
// cdcd writes it into unchanged text, JSON and bytes columns and names the
// column in the envelope's unchanged list.
const UnavailableValue = "__debezium_unavailable_value"

// Values of source.snapshot (Debezium's SnapshotRecord, lower case): where
// a row read by a snapshot lies in it. Streamed changes are SnapshotFalse.
const (
	SnapshotTrue        = "true"
	SnapshotFirst       = "first"
	SnapshotFirstInColl = "first_in_data_collection"
	SnapshotLastInColl  = "last_in_data_collection"
	SnapshotLast        = "last"
	SnapshotFalse       = "false"
	SnapshotIncremental = "incremental"
)

// snapshotField is source.snapshot: Debezium's Enum logical type (a
// string, null last so that "false" can be the default).
func snapshotField() jsonField {
	enum := map[string]any{
		"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Enum", "connect.default": SnapshotFalse,
		"connect.parameters": map[string]any{"allowed": strings.Join([]string{SnapshotTrue, SnapshotFirst,
			SnapshotFirstInColl, SnapshotLastInColl, SnapshotLast, SnapshotFalse, SnapshotIncremental}, ",")},
	}
	return jsonField{Name: "snapshot", Type: []any{enum, "null"}, Default: SnapshotFalse}
}

func optional(name, typ string) jsonField {
	return jsonField{Name: name, Type: []any{"null", typ}, HasNullDefault: true}
}

// sourceFields are the fields every Debezium connector's source record
// starts with (AbstractSourceInfoStructMaker).
func sourceFields() []jsonField {
	return []jsonField{
		{Name: "version", Type: "string"},
		{Name: "connector", Type: "string"},
		{Name: "name", Type: "string"},
		{Name: "ts_ms", Type: "long"},
		snapshotField(),
		{Name: "db", Type: "string"},
		optional("sequence", "string"),
		optional("ts_us", "long"),
		optional("ts_ns", "long"),
	}
}

// sourceRecord is the source record of connector (PostgreSQL's unless it
// is ConnectorMySQL).
func sourceRecord(connector string) jsonRecord {
	if connector == ConnectorMySQL {
		return jsonRecord{Name: "Source", Namespace: "io.debezium.connector.mysql", Fields: append(sourceFields(),
			optional("table", "string"),
			jsonField{Name: "server_id", Type: "long"},
			optional("gtid", "string"),
			jsonField{Name: "file", Type: "string"},
			jsonField{Name: "pos", Type: "long"},
			jsonField{Name: "row", Type: "int"},
			optional("thread", "long"),
			optional("query", "string"),
		)}
	}
	return jsonRecord{Name: "Source", Namespace: "io.debezium.connector.postgresql", Fields: append(sourceFields(),
		jsonField{Name: "schema", Type: "string"},
		jsonField{Name: "table", Type: "string"},
		optional("txId", "long"),
		optional("lsn", "long"),
		optional("xmin", "long"),
	)}
}

// transactionBlock is the envelope's transaction field (Debezium's
// event.block).
var transactionBlock = jsonRecord{Name: "block", Namespace: "event", Props: map[string]any{"connect.version": 1}, Fields: []jsonField{
	{Name: "id", Type: "string"},
	{Name: "total_order", Type: "long"},
	{Name: "data_collection_order", Type: "long"},
}}

// envelopeFields are the envelope's fields around the row record row.
func envelopeFields(row jsonRecord, connector string) []jsonField {
	names := map[string]any{"type": "array", "items": "string"}
	return []jsonField{
		{Name: "before", Type: []any{"null", row}, HasNullDefault: true},
		{Name: "after", Type: []any{"null", row.fullName()}, HasNullDefault: true},
		{Name: "source", Type: sourceRecord(connector)},
		{Name: "transaction", Type: []any{"null", transactionBlock}, HasNullDefault: true},
		{Name: "op", Type: "string"},
		optional("ts_ms", "long"),
		optional("ts_us", "long"),
		optional("ts_ns", "long"),
		{Name: "unchanged", Type: names, Default: []string{}},
		{Name: "absent", Type: names, Default: []string{}},
		{Name: "position", Type: "bytes", Default: ""},
	}
}

// envelopeLayout says how a value schema's records are laid out; a Table
// from TableFromValueSchema carries the layout of its schema.
type envelopeLayout uint8

const (
	// layoutPostgres and layoutMySQL: Debezium's envelope with that
	// connector's source record. The zero value: tables built by the
	// sources are encoded in the current layout.
	layoutPostgres envelopeLayout = iota
	layoutMySQL
	// layoutLegacy: cdcd's envelope before Debezium's (legacy.go).
	layoutLegacy
)

func layoutOf(connector string) envelopeLayout {
	if connector == ConnectorMySQL {
		return layoutMySQL
	}
	return layoutPostgres
}

// TxBlock is the envelope's transaction block: the transaction's id and
// the change's place in it, counted from 1.
type TxBlock struct {
	ID string
	// TotalOrder counts the transaction's changes, CollectionOrder those
	// of the change's table.
	TotalOrder, CollectionOrder int64
}
