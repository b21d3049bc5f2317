// Package postgres reads a PostgreSQL database's changes through a logical
// replication slot with the pgoutput plugin (protocol version 2, binary
// tuples, streaming of large in-progress transactions, logical messages),
// after an optional consistent, parallel, resumable initial load of the
// captured tables.
//
// # Exactly-once into the log
//
// Every change has a position (package pgpos): the LSN of its
// transaction's commit record and its index in the transaction, known as
// soon as the transaction's first message arrives (Begin carries the
// commit LSN; a streamed transaction is replayed after Stream Commit), so a
// transaction of any size leaves in batches. The reader tells PostgreSQL an
// LSN is flushed only once every change of every transaction committed up
// to it is durable in the log — returned by the Emitter's Emit, or, with an
// Emitter that tracks its pipeline (source.Tracker), in a batch its Durable
// counts: the stream hands batches over and reads on while the log syncs —
// and saves that LSN in its State before telling the server. After a crash the
// server sends again from the slot's confirmed LSN; the same transactions
// decode to the same changes with the same indexes (changes of tables the
// pipeline does not capture are counted too), so the Emitter drops, per log
// partition, exactly what it already holds.
//
// # Creating the slot
//
// The pipeline's state (saved in the State before each step that depends
// on it) and the server's slot move through these states; a crash at any
// arrow leaves a state the next start recognises (session.go):
//
//	(nothing saved, no slot)
//	  │ save Creating = slot
//	  ▼
//	INTENT (Creating = slot)
//	  │ CREATE_REPLICATION_SLOT, exporting a snapshot when loading
//	  │     crash, no slot ........... create it
//	  │     crash, slot there ........ drop it (waiting for its walsender), create it
//	  ▼
//	CREATED (SlotCreated, Confirmed = consistent point, Creating cleared)
//	  │ without a load: stream from the consistent point
//	  │ with a load: save the plan, then Load.Planned
//	  │     crash before ............. drop the slot, create it (nothing emitted)
//	  ▼
//	LOADING (Load: the plan and the chunks done)
//	  │     crash .................... finish by incremental snapshots (see Initial load)
//	  │ every chunk in the log
//	  ▼
//	STREAMING (SnapshotDone; Confirmed advances)
//	        crash .................... stream from the slot's confirmed LSN
//
// A start refuses instead, with a *SlotError: SlotCreated but no slot
// (SlotMissing), a slot confirmed ahead of Confirmed (SlotAhead), a slot
// that lost WAL (SlotInvalidated), another plugin or database
// (SlotWrongPlugin), and a slot this pipeline did not create while a load
// is configured (SlotForeign). A slot made outside cdcd with no load
// configured is adopted and streamed from its confirmed LSN.
//
// # Streaming
//
// Transactions over logical_decoding_work_mem arrive in stream blocks
// before they commit. Every message of a block goes, as received, to the
// transaction's spill file (package spill has the layout); Stream Abort of a
// subtransaction marks its changes to be skipped, of the transaction
// removes the file; Stream Commit replays the file through the same code
// as a transaction sent whole. Memory is bounded for any transaction size:
// at most a batch of changes and the spill writer's buffer. Spill files
// are never read after a restart: PostgreSQL re-sends every transaction
// that had not committed.
//
// Status updates go out every StatusInterval, also during a long replay, so
// wal_sender_timeout never fires while the reader is busy. When no change
// has arrived for HeartbeatInterval, the reader writes a non-transactional
// logical message; when it arrives with nothing pending, every transaction
// committed before it has been handled and its LSN is confirmed, so the
// slot advances while the captured tables are idle.
//
// A lost connection (server restart, terminated walsender, network) ends
// the session; Run reconnects with exponential backoff and jitter and
// replication restarts from the slot. Conditions that retrying cannot fix
// stop Run with a typed error the daemon alerts on: *SlotError (the slot
// was invalidated or is gone, it is ahead of what the pipeline stored, the
// cluster's system identifier changed, a slot of unknown origin or with
// another plugin), *PublicationError, *TableError (no key, REPLICA
// IDENTITY NOTHING, a type without a mapping), *ValueError.
//
// # Change semantics
//
// A table's key is its replica identity index under REPLICA IDENTITY USING
// INDEX, its primary key otherwise; a table with neither, or with REPLICA
// IDENTITY NOTHING, is refused with a *TableError naming the fixes. An
// update's Before holds the old row as far as the replica identity sends it
// (the key under DEFAULT and INDEX, every column under FULL); a key change
// is a delete of the old key and an insert of the new one. A TOASTed value
// an update did not change arrives as schema.Unchanged, never NULL; under
// FULL the insert of a changed key takes it from the old row. A TRUNCATE of
// several tables is a truncate per captured table, in statement order. A
// Relation message (DDL, or a first change) is a new table version from
// that change on. Partitioned tables are captured by their root
// (publish_via_partition_root); a TRUNCATE of a single partition is not
// published that way, by PostgreSQL's design.
//
// Types: every built-in type maps into the table model of package schema,
// decoded from the binary send/recv format that COPY (FORMAT binary) and
// pgoutput's binary tuples share, so the load and the stream produce the
// same values; docs/types.md has the table.
//
// # Initial load
//
// The slot is created with an exported snapshot and its consistent point
// cp; every table is cut into chunks by key range (an integer key's range,
// or quantiles of a row sample), and SnapshotWorkers connections import
// the snapshot and COPY the chunks in binary, in parallel. Chunks are
// emitted strictly in plan order, as op r, with the position
//
//	(cp − 1, chunk sequence) ‖ the row's key, encoded so bytes sort as the chunk is read
//
// (integers big-endian with the sign flipped, uuids as bytes, other types
// as their text in COLLATE "C" order). These positions sort before every
// streamed change (commit LSN ≥ cp) and in emission order, so the log's
// per-partition order is the load's. After the load, streaming starts at cp
// and delivers exactly the transactions the snapshot did not see.
//
// The plan and the number of chunks done are saved in the State (the
// daemon keeps it in the log). A load that stops before its plan is saved
// has emitted nothing and starts over on a new slot. A load that stops
// later cannot go on in its snapshot, which died with its connection, and
// the stream replays every change since cp. Reading the chunks not done
// in a new snapshot S2, positioned at cp − 1, gave rows newer than the
// changes replayed after them: an update whose unchanged TOASTed value the
// sink takes from the row, for a row S2 no longer held (deleted after the
// update), left the sink nothing to take it from, and the table paused.
// So the load is finished by the incremental snapshot engine
// (package source/snapshot): the tables wholly in the log stream on, and
// every other one gets a run (origin load-resumed) queued before the load
// is marked done. A table with durable chunks goes on after the greatest
// key below the first chunk not durable (snapshot.Request.After), with no
// reset; a replayed change of a key after it that carries unchanged values
// is dropped and the key read later. A table with none gets a replacing
// run: until its reset marker, its changes that carry unchanged values are
// dropped (the marker empties the table anyway); from the marker on, the
// run reads the table in step with the stream (session.go's resumeLoad,
// snapshot.go).
package postgres
