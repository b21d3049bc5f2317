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
// When a write or fsync fails (a full disk, an I/O error), nothing of that
// group is acknowledged or shown to readers. The partition reports itself
// failing (PartitionStats.WriteError), rolls back to what readers see —
// the active segment reopened and cut to its published, synced size;
// segments the failed group rolled to removed — and writes the same
// requests again at the same offsets, backing off from 50 ms to 2 s, until
// a write and its fsync succeed. Appends wait meanwhile (a caller's
// context bounds its wait); Close answers them with the *WriteError. The
// sync-point flag is set afresh on every attempt, so a batch that ended a
// failed group does not claim a sync it did not get.
//
// # The file system
//
// The embedded log reaches the disk only through Options.FS (default
// OSFS, where File.Sync is fdatasync on Linux): its tests put an
// in-memory file system under it that keeps only what was synced at a
// simulated crash (files' data as of their last Sync, directory entries as
// of their directory's last Sync), and one that fails writes on demand.
//
// # Embedded layout
//
//	<dir>/LOCK                              exclusive flock + holder PID
//	<dir>/log.id                            the log's identity, written atomically
//	<dir>/topics/<topic>/topic.json         TopicConfig and identity, written atomically
//	<dir>/topics/<topic>/<p>/<base>.log     segment: record batches
//	<dir>/topics/<topic>/<p>/<base>.index   sparse offset index (rebuildable)
//	<dir>/topics/<topic>/<p>/<base>.timeindex  sparse time index (rebuildable)
//	<dir>/topics/<topic>/<p>/synced.pos     where the partition's synced bytes end
//	<dir>/topics/<topic>/<p>/lost.ranges    offsets lost to damage, written atomically
//	<dir>/quarantine/<topic>.<p>.<base>.<time>.log   copy of a damaged segment
//	<dir>/quarantine/<topic>.<p>.<base>.<time>.note  what recovery found in it
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
//	flg     uint8   bit 0: sync point (the writer fsynced the segment after
//	                this batch before writing anything else); bit 1:
//	                records compressed (see Compressed batches); other
//	                bits 0
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
// # Compressed batches
//
// A batch with flag bit 1 set stores its records section (everything after
// the 42-byte header, the records as above) as one S2 block
// (github.com/klauspost/compress/s2, block format: a uvarint of the
// decoded length, then S2's elements; s2.Decode reads it). The header is
// the same as an uncompressed batch's — count, lastΔ, timestamps describe
// the records — and length and crc32c are of the batch as stored: the CRC
// covers the compressed bytes, so damage is found before anything is
// decoded. The decoded records must fill the decoded length exactly, as
// they must fill an uncompressed batch. Produce compresses a batch whose
// records take 1 KiB or more and shrink by a tenth at least
// (Options.Compression), on the producing goroutine; log compaction
// writes its batches the same way. A segment may mix both kinds; batches
// written before the flag existed have bit 1 clear and read as always.
//
// The flag is a one-way upgrade: a cdcd built before it (knownFlags
// without bit 1) refuses a compressed batch as a bad header, that is as
// damage — its recovery would quarantine the segment and cut the
// partition there. To go back to such a binary, drain the log first, or
// write with Options.Compression = CompressionNone (the config's
// log.compression: none) from the first open
// on (batches already compressed stay compressed).
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
// # Sync marker (frozen, version 1)
//
// synced.pos holds two 44-byte slots, at bytes 0 and 64; each write goes
// to the other slot than the last one, and the valid slot with the higher
// sequence number counts:
//
//	0      4   5     8          16         24         32         40     44
//	+------+---+-----+----------+----------+----------+----------+------+
//	|"CDSM"|ver|rsvd | seq      | base     | size     | next     |crc32c|
//	+------+---+-----+----------+----------+----------+----------+------+
//
// It says: the segment <base> was fsynced up to byte size, and every
// offset below next. The flusher rewrites it after every fsync of segment
// data, without syncing it (Close syncs it): after a process crash it is
// exact; after a power failure it may lag, which only makes it a smaller
// lower bound. A missing or unreadable marker counts as "nothing known".
//
// # Lost ranges (frozen, version 1)
//
// lost.ranges lists the offset ranges of a partition that recovery found
// damaged or missing although they had been synced:
//
//	0      4   5     8       12
//	+------+---+-----+-------+---------------------+------+
//	|"CDLR"|ver|rsvd |count  | entries…            |crc32c|
//	+------+---+-----+-------+---------------------+------+
//
//	entry: from int64 | to int64 | found (Unix ms) int64 | reason length uint16 | reason
//
// The ranges are sorted and disjoint; the crc covers every preceding byte.
// The file is replaced atomically and durably. Damage in it stops Open.
//
// # Recovery
//
// Opening a partition scans its last segment (and any closed segment whose
// index is missing or stale). A clean Close closes an active segment of at
// least 4 MiB that is synced whole (a new, empty one becomes the last), so
// a restart scans little; after a crash the last segment is the one that
// was written to. Past a bad batch (short, bad length, bad CRC,
// bad version or flags, offsets not increasing) the scan looks for the
// next good batch, so damage does not hide what follows it. Each bad
// stretch is then one of two things:
//
//   - A torn tail: the stretch starts at or past the last synced byte.
//     Nothing from there on was acknowledged (Produce returns only after
//     fsync), so it is dropped, with every batch after it, and reported in
//     the RecoveryReport's Truncations.
//   - Corruption: the stretch lies in bytes known synced. Those are every
//     byte of a closed segment (a segment is fsynced before the next one
//     is created); in the active segment, the bytes below the marker's size,
//     and the bytes before any sync-point batch that a good batch follows
//     (the writer wrote that batch only after the fsync returned). The
//     file is copied into quarantine with a note, the offsets of the
//     stretch (from the last good record up to the next good batch, or up
//     to the next segment or the marker's next offset at a damaged tail)
//     are recorded in lost.ranges, and the segment is rewritten without the
//     damaged bytes: every intact batch stays readable at its offsets.
//
// Offsets are missing, too, where a never-compacted topic has a gap
// between consecutive segments (a segment file removed or cut), or where
// the marker says offsets were synced past the end of the last segment.
// They are recorded the same way. A partition's next offset is never below
// a lost range's end: lost offsets are never given out again.
//
// Fetch at an offset inside a lost range returns a *DataLossError naming
// the range; a fetch before it returns the records up to it, and the next
// fetch the error. Damage found later in a closed segment (Open trusts
// those through their index, so a fetch or compaction finds it) is
// repaired the same way at that moment. A read-only Open records nothing
// and reads around the damage in place.
//
// Where nothing proves the damaged bytes synced — past the marker's size
// and in or after the last group commit that a good batch follows (without
// a marker, written before markers existed or lost in a power failure:
// about the last two group commits) — damage is taken for a torn tail.
package log
