// Package kafka is the log.Log contract on Kafka or Redpanda, through
// franz-go (kgo for the wire, kadm for administration). Topics, keys,
// partitions (the caller's, or log.PartitionFor's murmur2), headers and
// timestamps are Kafka's own, so any Kafka consumer reads what cdcd writes
// byte for byte as it reads the embedded log's.
//
// # The contract on Kafka
//
//   - Fetch is a Fetch request to the partition's leader, read_committed,
//     decoded with kgo.ProcessFetchPartition. Offsets that hold no record a
//     reader may see — transaction markers, records of aborted
//     transactions — are stepped over inside Fetch, so it returns records
//     after a gap instead of nothing. MaxBytes is applied to the decoded
//     records (Kafka returns whole batches).
//   - A fetch below the partition's log start offset means those records
//     are gone (retention, DeleteRecords): Fetch returns an error that is a
//     *log.DataLossError for [offset, start) and also log.ErrOffsetOutOfRange.
//   - PartitionInfo.End is the last stable offset (what read_committed
//     readers can reach), Start the log start offset; Bytes is 0 (Kafka
//     does not say per partition without DescribeLogDirs).
//   - TopicInfo.ID is Kafka's topic ID (base64, as Kafka prints it): new
//     for every topic created, also under a name used before.
//   - CommitOffsets and CommittedOffsets are Kafka's group offsets
//     (OffsetCommit with no generation: a group nobody is a member of).
//
// # Producing
//
// Without Options.TransactionalID, Produce is an idempotent producer's
// (acks=all): a partition holds a gapless, ordered prefix of what was
// produced to it, so the last record of a partition says how far a
// producer got. With it, every record goes through Kafka transactions (see
// txn.go): concurrent Produce calls are committed together, each
// transaction also carries one progress record in Options.ProgressTopic,
// and Produce returns only once the transaction committed.
package kafka
