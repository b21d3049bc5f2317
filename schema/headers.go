package schema

// Record headers of the change records on the log (frozen wire names).
// The emitter (daemon) writes them; the sink and other consumers read them.
const (
	// HeaderPosition is the source position of the change (sortable bytes).
	HeaderPosition = "cdcd.pos"
	// HeaderTxID is the source transaction id, decimal.
	HeaderTxID = "cdcd.txid"
	// HeaderKeyChange ("1") marks the delete half of a primary-key change
	// whose insert, at the next position, takes unchanged values from the
	// deleted key's row.
	HeaderKeyChange = "cdcd.key-change"
	// HeaderKeySchema and HeaderValueSchema carry a held record's schemas
	// (a paused table's records have no registry id yet).
	HeaderKeySchema   = "cdcd.key-schema"
	HeaderValueSchema = "cdcd.value-schema"
	// HeaderOp is a held record's op letter (source.Op).
	HeaderOp = "cdcd.op"
	// HeaderFault marks a fault record (a change held because one of its
	// values could not be read or encoded); its value is the fault as JSON.
	HeaderFault = "cdcd.fault"
	// HeaderSkippedAt is when a fault record was moved to the table's
	// dead-letter topic (RFC 3339, UTC).
	HeaderSkippedAt = "cdcd.skipped-at"
	// HeaderReset marks a truncate (op 't') that begins a load or
	// re-snapshot replacing a table's contents; its value identifies that
	// snapshot run. It is the same change (one source position, greater
	// than any the table's topic holds before it) produced into every
	// partition of the table's topic. A consumer truncates the table there
	// like at any truncate, and it is the one point where a consumer that
	// cannot trust what it read before (a replaced log, lost offsets) may
	// resume.
	HeaderReset = "cdcd.reset"
)
