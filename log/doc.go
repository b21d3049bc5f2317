// Package log is cdcd's partitioned, durable log: topics split into
// partitions, each an ordered sequence of records addressed by offset, with
// consumer groups whose committed offsets give lag.
//
// The contract is the Log interface; the embedded implementation in this
// package (Open, *Embedded) stores partitions as segment files on local
// disk, and log/kafka (a later package) puts the same contract on Kafka or
// Redpanda. Keys are placed into partitions with Kafka's default partitioner
// (murmur2), so a key lands in the same partition number under both
// backends.
//
// Durability: Produce returns only once every record it was given is durable
// (fsynced under the default policy); Fetch never returns a record that is not
// durable. Callers acknowledge upstream only what Produce has returned for.
//
// # Writing
//
// Each partition has one writer at a time (its flushMu): Produce encodes
// its records into batches in the caller's goroutine, takes offsets under
// the partition's lock and queues a request with its own wait handle. The
// first producer that finds the partition idle writes the whole queue
// itself; while it (or the partition's flusher goroutine) is in fsync,
// later requests queue up and the next flush writes them all with one
// write and one fsync (group commit). Readers see a batch only after the
// fsync that covers it; long-polling fetchers are woken then.
//
// # Embedded layout
//
//	<dir>/LOCK                              exclusive flock + holder PID
//	<dir>/log.id                            the log's identity, written atomically
//	<dir>/topics/<topic>/topic.json         TopicConfig and identity, written atomically
//	<dir>/topics/<topic>/<p>/<base>.log     segment: record batches
//	<dir>/topics/<topic>/<p>/<base>.index   sparse offset index (rebuildable)
//	<dir>/topics/<topic>/<p>/<base>.timeindex  sparse time index (rebuildable)
//
// <p> is the partition number in decimal; <base> is the segment's base offset
// as 20 zero-padded decimal digits. Every file kind is named in one constant
// block in format.go. Topics whose name begins with "_" are internal; the
// log keeps consumer-group offsets in the compacted internal topic "_offsets".
//
// # Identities (frozen)
//
// log.id holds 16 lowercase hex digits (8 random bytes) and a newline,
// created with the directory. topic.json (JSON, "version": 1) carries the
// topic's own 16 hex digits as "id", created with the topic. TopicInfo.ID
// is "<log id>-<topic id>": a recreated directory or a deleted and
// re-created topic gets a new one. Directories and topics written before
// identities existed get them at the next writable Open (each file
// replaced atomically and durably); a read-only Open reports "" instead.
// A log.id that is not 16 hex digits stops Open (a silently new identity
// would make every consumer's stored offsets foreign).
//
// # Record batch format (frozen, version 1)
//
// A segment is a sequence of record batches. All integers are little-endian;
// varints are Go's encoding/binary (zig-zag for signed).
//
//	 0       4       8   9  10              18      22      26              34              42
//	 +-------+-------+---+---+---------------+-------+-------+---------------+---------------+------
//	 |length |crc32c |ver|flg| base offset   |lastΔ  |count  |first ts (ms)  | max ts (ms)   |records…
//	 +-------+-------+---+---+---------------+-------+-------+---------------+---------------+------
//
//	length  uint32  bytes after the length field (a batch is 4+length bytes)
//	crc32c  uint32  CRC-32C (Castagnoli) of bytes [8, 4+length): everything
//	                after the crc, including the base offset
//	ver     uint8   batchVersion (1)
//	flg     uint8   0 (reserved)
//	base    int64   offset of the first record
//	lastΔ   uint32  offset of the last record minus base
//	count   uint32  number of records (≥ 1)
//	first   int64   timestamp of the first record, Unix milliseconds
//	max     int64   largest record timestamp, Unix milliseconds
//
// Each record, count times:
//
//	uvarint offset delta   strictly increasing; the last equals lastΔ
//	varint  timestamp delta (ms, from first ts)
//	varint  key length     -1 for a nil key
//	bytes   key
//	varint  value length   -1 for a nil value (a tombstone)
//	bytes   value
//	uvarint header count
//	  uvarint key length, key bytes, varint value length (-1 nil), value
//
// Offsets inside a batch may have gaps only after compaction; batches of a
// partition have strictly increasing offsets.
//
// Index files (offset and time) share one layout; they are written when a
// segment is closed, are checked against the segment's size and their own
// CRC when loaded, and are rebuilt from the segment when anything is off:
//
//	0      4   5     8              16             24             32      36
//	+------+---+-----+--------------+--------------+--------------+-------+--------------+------+
//	|magic |ver|rsvd | segment size | next offset  | max ts (ms)  |count  | entries…     |crc32c|
//	+------+---+-----+--------------+--------------+--------------+-------+--------------+------+
//
// magic is "CDXO" (offset index; entries: offset int64, position uint32) or
// "CDXT" (time index; entries: max timestamp of all earlier batches int64,
// offset int64). The crc covers every preceding byte.
//
// # Consumer offsets (frozen, version 1)
//
// Each commit is a record of "_offsets" (one partition, compacted):
//
//	key:   0x01 | uvarint len | group | uvarint len | topic | partition int32 big-endian
//	value: 0x01 | next offset int64 big-endian | commit time Unix ms int64 big-endian
//
// A nil value deletes the commit. Open replays the topic into memory.
//
// # Cleanup
//
// Retention (CleanupDelete) deletes whole closed segments, oldest first,
// while their newest record is older than Retention or the partition stays
// at or above RetentionBytes without them; the active segment is never
// deleted. Compaction (CleanupCompact) rewrites closed segments keeping the
// latest record per key (tombstones until DeleteRetention has passed),
// writing "<base>.log.cleaned", fsyncing it and renaming it over the
// original; then adjacent small segments are merged the same way (renamed
// over the first, the others removed after). Offsets never change; gaps
// appear. Open removes ".cleaned" files and segments a merged segment
// already covers (a crash between a merge's rename and its removals).
//
// # Recovery
//
// Opening a partition scans its last segment (and any closed segment whose
// index is missing or stale) and truncates at the first bad batch: short,
// bad length, bad CRC, bad version or offsets not increasing. What was
// dropped is logged and kept in the RecoveryReport. Because Produce returns
// only after fsync, a batch it acknowledged is always in the valid prefix.
package log
