package log

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors of the package.
var (
	// ErrUnknownTopic: the topic does not exist.
	ErrUnknownTopic = errors.New("log: unknown topic")
	// ErrTopicExists: CreateTopic was called for a topic that already exists.
	ErrTopicExists = errors.New("log: topic already exists")
	// ErrUnknownPartition: the partition number is outside the topic's range.
	ErrUnknownPartition = errors.New("log: unknown partition")
	// ErrOffsetOutOfRange: the fetch offset is below the partition's start
	// offset (removed by retention or compaction) or above its end offset.
	ErrOffsetOutOfRange = errors.New("log: offset out of range")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("log: closed")

	// ErrInvalidTopic: a topic name or TopicConfig is not acceptable; the
	// wrapping error says which field and why.
	ErrInvalidTopic = errors.New("log: invalid topic")
	// ErrReservedTopic: the topic is reserved for the log's own use (the
	// consumer-offsets topic) and cannot be created, deleted or produced to.
	ErrReservedTopic = errors.New("log: reserved topic")
	// ErrRecordTooLarge: one record does not fit in a batch (see MaxRecordBytes).
	ErrRecordTooLarge = errors.New("log: record too large")
	// ErrLocked: another process holds the data directory for writing; the
	// *LockError that wraps it names the directory and the holder's PID.
	ErrLocked = errors.New("log: data directory locked")
	// ErrReadOnly: a write was attempted on a log opened read-only.
	ErrReadOnly = errors.New("log: opened read-only")
	// ErrCorrupt: stored data failed its checks; the *CorruptionError that
	// wraps it names the file, position and reason.
	ErrCorrupt = errors.New("log: corrupt data")
	// ErrDataLost: Fetch was asked for offsets the log knows it lost (a
	// damaged range found at recovery); the *DataLossError that wraps it
	// names the topic, partition and the lost range. A consumer must not
	// skip past it silently.
	ErrDataLost = errors.New("log: data lost")
)

// Header is a key/value pair attached to a record.
type Header struct {
	Key   string
	Value []byte
}

// Record is one entry of a partition.
type Record struct {
	// Key decides the partition when Partition is negative; nil is allowed.
	Key []byte
	// Value is the payload; nil marks a tombstone in a compacted topic.
	Value   []byte
	Headers []Header
	// Timestamp is the producer's time (Kafka's CreateTime); Produce fills in
	// the current time when it is zero.
	Timestamp time.Time
	// Partition is set by the producer to choose a partition explicitly, or
	// to -1 to place the record by its key. Produce and Fetch fill it in.
	Partition int32
	// Offset is assigned by Produce and returned by Fetch.
	Offset int64
}

// Header returns the value of the first header named key, or nil.
func (r *Record) Header(key string) []byte {
	for _, h := range r.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// CleanupPolicy says how old records of a topic are removed.
type CleanupPolicy string

const (
	// CleanupDelete removes whole segments older than the retention time or
	// beyond the retention size.
	CleanupDelete CleanupPolicy = "delete"
	// CleanupCompact keeps the latest record of every key and removes
	// tombstones after DeleteRetention.
	CleanupCompact CleanupPolicy = "compact"
)

// TopicConfig configures a topic at creation.
type TopicConfig struct {
	// Partitions is the number of partitions; at least 1.
	Partitions int32
	// Retention is the age after which closed segments are deleted under
	// CleanupDelete; 0 keeps records forever.
	Retention time.Duration
	// RetentionBytes bounds each partition's size under CleanupDelete; 0 is
	// unbounded.
	RetentionBytes int64
	// Cleanup is the cleanup policy; the default is CleanupDelete.
	Cleanup CleanupPolicy
	// DeleteRetention is how long tombstones survive compaction; default 24h.
	DeleteRetention time.Duration
}

// PartitionInfo describes one partition of a topic.
type PartitionInfo struct {
	Partition int32
	// Start is the first offset still held; End is the offset the next
	// produced record will get (Kafka's log-end offset / high watermark).
	Start, End int64
	// Bytes is the size on disk (0 where a backend cannot tell).
	Bytes int64
	// Lost are offset ranges the log knows it lost (damage found in synced
	// data), sorted; Fetch returns a *DataLossError for them. Shared: do
	// not modify.
	Lost []LostRange
}

// TopicInfo describes a topic.
type TopicInfo struct {
	Name string
	// ID is the identity of this incarnation of the topic in this log:
	// created with the topic, stable across restarts, and new when the topic
	// is deleted and created again or when the log itself is new (a removed
	// and recreated data directory). Offsets are meaningful only together
	// with the ID they were read under: a consumer that stored offsets
	// elsewhere compares the ID before trusting them. The embedded log gives
	// "" only when opened read-only on a directory no writer has given
	// identities yet.
	ID         string
	Config     TopicConfig
	Partitions []PartitionInfo
}

// FetchOptions bounds one Fetch.
type FetchOptions struct {
	// MaxBytes is a soft cap on the total size of returned records; at least
	// one record is returned if any is available. 0 means 1 MiB.
	MaxBytes int
	// MaxWait is how long Fetch waits for a record to arrive when none is
	// available at the offset (long poll). 0 returns at once.
	MaxWait time.Duration
	// Into, when not nil, is a slice the log may return the records in
	// (appended to Into[:0] while its capacity lasts), so that a reader
	// that fetches in a loop and is done with each fetch's records before
	// the next reuses one slice. After the call Into's earlier contents are
	// gone. A log may ignore it (the Kafka backend does).
	Into []Record
	// Buffers, when not nil, lends the fetch memory its caller reuses from
	// fetch to fetch (see FetchBuffers). A log may ignore it (the Kafka
	// backend does).
	Buffers *FetchBuffers
}

// FetchBuffers is memory a reader lends its fetches, one fetch at a time,
// so that a reader fetching in a loop needs little new memory a fetch:
//
//   - Window, when not nil, makes the buffers a fetch reads records into:
//     a slice of length n (its capacity may be larger) that the log may
//     overwrite. The records' keys, values and header values alias it, so
//     the caller may hand it out again only once nothing refers to any
//     record read into it (the Iceberg sink: once their changes are
//     committed). Without it the log allocates a buffer per read.
//   - The records' Headers slices are cut from a slab kept here that the
//     next fetch with the same FetchBuffers reuses: a fetch's Headers
//     slices are valid only until then (their keys and values stay).
//
// The zero value is ready to use. Not safe for concurrent fetches.
type FetchBuffers struct {
	Window func(n int) []byte
	// headers is the slab the last fetch cut its records' headers from;
	// keys are the header keys seen, each made once.
	headers []Header
	keys    [8]string
	nkeys   int
}

// AsyncProducer is an optional ability of a Log (found by type assertion):
// an append in two steps, so a producer with many records and no need to
// wait for each append (an initial load) can hand the log its next records
// while the earlier ones are being synced, and one fsync makes several
// appends durable.
type AsyncProducer interface {
	// StartProduce appends recs to topic as Produce does, in the order of
	// the calls, but returns once the log has taken them — copied: recs may
	// be reused at once — and before they are durable. The returned wait
	// returns once they are, or with the error that means none of them may
	// be assumed durable. Records' Partition is filled in, Offset is not.
	StartProduce(ctx context.Context, topic string, recs []Record) (wait func(context.Context) error, err error)
}

// LastReader is an optional ability of a Log (found by type assertion)
// whose offsets below a partition's End are not all records a reader gets
// (Kafka: transaction markers, records of aborted transactions). Use
// ReadLast, which falls back to LastReadable and Fetch.
type LastReader interface {
	// LastRecord returns the newest record of partition p (as described by
	// DescribeTopic) that a reader gets, and false if there is none.
	LastRecord(ctx context.Context, topic string, p PartitionInfo) (Record, bool, error)
}

// ReadLast returns the newest readable record of partition p of topic, and
// false if it holds none: where a producer that resumes finds how far it
// got.
func ReadLast(ctx context.Context, l Log, topic string, p PartitionInfo) (Record, bool, error) {
	if lr, ok := l.(LastReader); ok {
		return lr.LastRecord(ctx, topic, p)
	}
	off, ok := LastReadable(p) // past a lost tail
	if !ok {
		return Record{}, false, nil
	}
	recs, err := l.Fetch(ctx, topic, p.Partition, off, FetchOptions{MaxBytes: 1})
	if err != nil || len(recs) == 0 {
		return Record{}, false, err
	}
	return recs[len(recs)-1], true, nil
}

// Log is the contract every backend implements.
type Log interface {
	// CreateTopic creates a topic; ErrTopicExists if it exists.
	CreateTopic(ctx context.Context, name string, cfg TopicConfig) error
	// DescribeTopic returns a topic's configuration and partitions.
	DescribeTopic(ctx context.Context, name string) (TopicInfo, error)
	// ListTopics returns the names of all topics, sorted.
	ListTopics(ctx context.Context) ([]string, error)
	// DeleteTopic removes a topic and its data.
	DeleteTopic(ctx context.Context, name string) error

	// Produce appends recs to topic. A record whose Partition is negative is
	// placed by PartitionFor(Key); records keep their order within each
	// partition. It returns once all of them are durable, with Partition and
	// Offset filled in. On error, none of the records may be assumed durable.
	Produce(ctx context.Context, topic string, recs []Record) error

	// Fetch returns records of one partition from offset on, in offset order
	// (offsets may have gaps in compacted topics). With no record at offset
	// it waits up to opts.MaxWait and may return an empty slice.
	Fetch(ctx context.Context, topic string, partition int32, offset int64, opts FetchOptions) ([]Record, error)
	// OffsetForTime returns the first offset whose timestamp is at or after
	// ts, or the end offset if there is none.
	OffsetForTime(ctx context.Context, topic string, partition int32, ts time.Time) (int64, error)

	// CommitOffsets stores a consumer group's next offsets to read.
	CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error
	// CommittedOffsets returns a group's committed offsets for topic
	// (partitions without a commit are absent).
	CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error)

	// Close flushes and releases everything; later calls return ErrClosed.
	Close() error
}
