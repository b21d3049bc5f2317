// Package reconcile proves, on the user's own data and while the pipeline
// runs, that each Iceberg mirror equals its source table — or says which
// keys differ and how — and repairs what differs (cdcd reconcile).
//
// # One pass, hashes on both sides
//
// The source is read in chunks of ChunkRows rows by primary-key range
// (bounds compared by the database, as `(k1, k2) > ($1, $2) ORDER BY k1,
// k2 LIMIT n`), each chunk in one short REPEATABLE READ transaction. The
// database itself hashes every row (PostgreSQL each column by itself,
// from its binary value where that is exact, and mixes the columns'
// hashes: rowhash.go; MySQL the row's canonical text) and sums the hashes
// per block of BlockRows consecutive keys: only a count, a sum and the
// block's last key leave the database. Values compare as their canonical
// texts do (canon.go: one text per value, following docs/types.md, so
// 1.50 and 1.5 in a numeric(p,2) differ, a timestamp by its
// microseconds, json by its bytes); a column hashed from its binary value
// tells apart exactly the values its text does. cdcd reads the mirror's live
// rows (data files minus deletion vectors or position deletes) beside the
// source's reads of a segment of SegmentRows rows, keeping up to twice
// that many (later segments use the rows kept past the last one's end;
// over the budget, each segment reads the mirror after its source reads),
// computes the same hash of each row, and adds it to the block its key
// falls in. Blocks whose count
// and sum agree are equal; the others are read again key by key (a hash
// per column), so only the keys that differ are listed, each with its
// columns. A matching table costs one read of each side.
//
// # Ranges read in parallel
//
// The source's hashing is the bound of a reconcile (about twice COPY's
// CPU a row), so Config.Parallel connections (default 2) read at once.
// Keys sampled from about 500 of the table's pages (TABLESAMPLE SYSTEM)
// cut it into ranges of about equal rows, four a connection in each
// segment; each connection takes the segment's next range when done with
// one and reads it in chunks up to its bound, the last range of the
// table open above. Each chunk is still one read with its own positions
// and Gap, and each block names its read, so the rules below hold per
// read as they did for reads one after another; a sample's uneven ranges
// cost time, never soundness. MaxRowsPerSecond paces all connections
// together; MySQL reads one range at a time (mysql.go).
//
// The hashes are PostgreSQL's own 64-bit hash functions (lookup3:
// hashtextextended, hashint4extended, hashint8extended, hashfloat8extended,
// computed in Go by the same functions, hash.go and rowhash.go) or MD5's
// first 64 bits on MySQL; a block compares its count and the sum modulo
// 2^64, so a difference goes unseen only when two different blocks
// collide (about 2^-64 per block).
//
// # Sound while changes flow
//
// A source read and the mirror show a key at different moments unless
// care is taken, and a difference found that way would be a race, not a
// fault. The rules, per read R (postgres_read.go, settle in reconcile.go):
//
//  1. Positions. Low is pg_current_wal_insert_lsn() read before R's
//     transaction takes its snapshot; High the same read by the statement
//     that takes it. Gap is the snapshot's in-progress transactions plus
//     every transaction holding its xid's lock (pg_locks) between the two
//     reads. A transaction that commits at or after High is invisible to
//     R: its commit record was written after the snapshot was taken. One
//     that committed before Low and is not in Gap is visible: it had
//     committed and left the proc array when the snapshot was taken. The
//     snapshot's list alone is not enough: a transaction whose xid is at
//     or after the snapshot's xmax (no newer one had completed) is absent
//     from it, yet invisible while it has not left the proc array, which
//     it leaves after its commit record is written — before Low,
//     possibly. It holds its xid's lock from its first write until after
//     it left the proc array, so the lock read between Low and the
//     snapshot finds it (a reconcile under load in CI once called a row
//     extra this way). On a standby the replay position plays both parts:
//     a standby's snapshot sees what it replayed.
//  2. The log covers R. The pipeline's slot confirms a position only once
//     every change before it is durable in the log (DESIGN.md, stage 1),
//     so once confirmed_flush_lsn ≥ High, the log holds every change R
//     could see. cdcd writes a non-transactional logical message after the
//     read so an idle pipeline confirms past it. With the daemon stopped
//     the slot does not move: the changes it holds up to High are peeked
//     (pg_logical_slot_peek_binary_changes, which consumes nothing) and
//     their keys are left out (rule 4).
//  3. The mirror at known offsets. The table's current snapshot reflects
//     exactly the records below its cdcd.offsets (the sink commits offsets
//     with the data; compaction changes no row). With the pipeline
//     running, cdcd waits (up to SettleTimeout) for them to reach the
//     partitions' ends as they were once the log covered R (the ends move
//     on while writes go on; chasing them would never end); a stopped
//     pipeline's mirror is not waited for. Either way cdcd then reads the
//     ends E (after the mirror).
//  4. Unsettled keys are left out of the round: the key of every record
//     at or after the mirror's offsets (not applied yet), of every record
//     whose position is at or after Low (it may or may not be in R), and
//     every key of a table truncated there. Each partition is in position
//     order, so those records are found by bisection from the end. The
//     keys left out are compared again, each alone, in a later read
//     (Config.Retries times), and counted as unchecked when they keep
//     changing.
//  5. Gap. After E was read, cdcd asks the database which transactions of
//     R's Gap have committed. One that committed may have committed before
//     Low and still not be visible to R (PostgreSQL flushes a commit
//     record before the transaction leaves the proc array, and a
//     synchronous standby stretches that), so none of R's rows is trusted:
//     its blocks are read again key by key — unless the transaction's
//     records in the table's log lie at or after Low, where rule 4 leaves
//     its keys out already (under a steady workload most do: a running
//     transaction usually commits after the read began). One still
//     running or aborted has no record below E (a commit after the check is appended after E
//     was read), so it cannot have reached the mirror.
//
// On MySQL and MariaDB (mysql.go) positions are the pipeline's ordinals:
// Low is one past the ordinal of the pipeline's checkpoint read before R
// began, High R's GTID position, and the log covers R once the checkpoint
// contains it; there is no Gap.
//
// What remains is a key whose every change in the log is visible to R and
// below the mirror's offsets, and (rule 2) every change R sees is in the
// log: the mirror of a correct pipeline holds exactly R's row. A
// difference reported is a real one. Changes of one key are serialised by
// the database (a row lock, or the unique index for a key inserted
// again), so their log order is their visibility order and checking the
// window from Low is enough.
//
// # Keys in order
//
// A mirror row falls into the block whose range holds its key by cdcd's
// own comparison of keys (keys.go), which is the database's for integers,
// numerics, dates and times, uuids, bytea, booleans and text under a
// byte-order collation (C, POSIX). For other text collations the blocks
// still compare soundly (a block matches only when both sides hold the same
// rows), and a key the mirror holds that the key-by-key read did not find
// is looked up by itself before it is called extra.
//
// # Values
//
// The Iceberg side's values are read with the sink's own reader
// (sink/iceberg.LiveSnapshot), in cdcd's Go representation of each
// schema.Kind; the source's are rendered by the database's own functions
// (send functions and output functions under fixed session settings:
// TimeZone UTC, DateStyle ISO, IntervalStyle iso_8601). So a value that
// reached the mirror other than docs/types.md says shows as a difference,
// whatever decoded it on the way.
package reconcile
