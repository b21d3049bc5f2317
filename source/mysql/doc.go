// Package mysql reads a MySQL (8.0, 8.4) or MariaDB (10.6+) server's
// changes from its binlog, as a replica does (go-mysql's BinlogSyncer,
// GTID mode), into the table model of package schema.
//
// # Positions
//
// Every transaction in the binlog has an ordinal: the checkpoint's ordinal
// plus one for each transaction read after it, counting every transaction
// (of captured tables or not, DDL included). A pipeline's first start takes
// the server's current GTID position and gives its last transaction the
// ordinal startOrdinal: the number of transactions in a MySQL GTID set, the
// sum of the domains' sequence numbers of a MariaDB position. A change's
// position is
//
//	+-----------------------------+---------------------------+
//	| ordinal uint64 big-endian   | index in transaction u32  |
//	+-----------------------------+---------------------------+
//
// (frozen layout, 12 bytes), so positions compare as bytes in binlog order.
// Every row of a transaction takes an index, also rows of tables the
// pipeline does not capture, and a key change takes two (a delete of the
// old key, then an insert of the new one); so a transaction read again
// gives each change the same position, whatever tables are captured.
//
// # Exactly once into the log
//
// The checkpoint is the GTID set of every transaction all of whose changes
// the Emitter has returned (durable in the log), with its ordinal; it is
// saved in the State every CheckpointInterval, only at transaction ends
// (an XID event, a COMMIT statement, a DDL statement). A restart streams
// from it (the server sends every transaction not in the set, in binlog
// order); the same transactions get the same ordinals, so the Emitter
// drops, per log partition, exactly what it already holds. Positions are
// the same on another server of the topology as long as it applied the
// transactions after the checkpoint in the same order.
//
// A transaction is emitted as it is read, in batches of BatchMax, so a
// transaction of any size passes in bounded memory: MySQL writes a
// transaction to the binlog whole at commit, so nothing needs spilling.
//
// # Never skip
//
// A checkpoint the server can no longer stream from stops the reader:
// *PurgedError when the binlogs after it are gone (MySQL: gtid_purged is
// not contained in the checkpoint; both flavors: error 1236 at the dump),
// *ResumeError when the server is behind it. Both name the fix.
//
// # Tables and types
//
// A table's shape is read from each table map (binlog_row_metadata=FULL:
// names, types, signedness, character sets, enum and set labels, primary
// key), so a reader far behind decodes every row with the shape it was
// written with; a shape differing from the last is a new table version
// from that row on. The information schema, read at the start and after a
// DDL statement naming the table, adds what a table map lacks (the declared
// type's text; MariaDB's JSON, a longtext with CHECK json_valid). TRUNCATE
// of a captured table is a truncate change; other DDL is recognised only
// by its first keyword. docs/types.md has the type mapping; the load's
// SELECT text and the binlog's values decode through the same functions
// (decode.go).
package mysql
