package schema

import "github.com/hamba/avro/v2"

// The envelope cdcd wrote before Debezium's, still read: records written
// with it stay in the log (and in Kafka) after an upgrade. Frozen.
//
//	<topic>.Envelope {
//	  before, after  ["null", <topic>.Value]   every row field ["null", T]; NOT NULL as "cdcd.not_null": true
//	  source         cdcd.Source {version, connector, name, ts_ms long, snapshot ["null",string],
//	                 db, schema ["null",string], table, txId, lsn, file, pos, gtid (all ["null", ...]),
//	                 position bytes}
//	  op             string
//	  ts_ms          ["null", long]
//	  unchanged      array<string>
//	}

// legacySourceName is the full name of the legacy layout's source record.
const legacySourceName = "cdcd.Source"

// envelopeLayoutOf tells the layout of an envelope schema by its source
// record.
func envelopeLayoutOf(env *avro.RecordSchema) envelopeLayout {
	for _, f := range env.Fields() {
		if f.Name() != "source" {
			continue
		}
		if rs, ok := f.Type().(*avro.RecordSchema); ok {
			switch rs.FullName() {
			case legacySourceName:
				return layoutLegacy
			case "io.debezium.connector.mysql.Source":
				return layoutMySQL
			}
		}
	}
	return layoutPostgres
}

// IsLegacyEnvelope reports whether a value schema is in cdcd's legacy
// envelope layout.
func IsLegacyEnvelope(valueSchema string) bool {
	parsed, err := avro.Parse(valueSchema)
	if err != nil {
		return false
	}
	rs, ok := parsed.(*avro.RecordSchema)
	return ok && envelopeLayoutOf(rs) == layoutLegacy
}

// legacyEnvelope reads the legacy layout.
func (r *reader) legacyEnvelope(t *Table, e *Envelope) {
	e.Before = r.row(t, true)
	e.After = r.row(t, true)
	s := &e.Source
	s.Version = r.string()
	s.Connector = r.string()
	s.Name = r.string()
	s.TsMs = r.long()
	s.Snapshot = r.optString()
	s.DB = r.string()
	s.Schema = r.optString()
	s.Table = r.string()
	tx, _ := r.optLong()
	s.TxID = uint64(tx)
	lsn, _ := r.optLong()
	s.LSN = uint64(lsn)
	s.File = r.optString()
	s.Pos, _ = r.optLong()
	s.GTID = r.optString()
	s.Position = append([]byte(nil), r.bytes()...)
	e.Op = r.op()
	e.TsMs, _ = r.optLong()
	r.unchanged(t, e)
}

// scanLegacy is ScanEnvelope for the legacy layout.
func (r *reader) scanLegacy(t *Table, e *EnvelopeInfo) {
	e.HasBefore = r.skipRow(t, true)
	e.HasAfter = r.skipRow(t, true)
	r.bytes() // version
	r.bytes() // connector
	r.bytes() // name
	e.TsMs = r.long()
	r.skipOptBytes() // snapshot
	r.bytes()        // db
	r.skipOptBytes() // schema
	r.bytes()        // table
	tx, _ := r.optLong()
	e.TxID = uint64(tx)
	lsn, _ := r.optLong()
	e.LSN = uint64(lsn)
	r.skipOptBytes() // file
	r.optLong()      // pos
	r.skipOptBytes() // gtid
	e.Position = r.bytes()
	e.Op = r.op()
	r.optLong() // ts_ms
	e.Unchanged = r.countNames()
}
