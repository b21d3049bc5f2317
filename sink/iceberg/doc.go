// Package iceberg writes the log's table topics into Apache Iceberg tables,
// committing each table's consumed log offsets in the same snapshot as its
// data, so the table itself says how far it has read (exactly once).
//
// # One table, one loop
//
// Sink.Run runs a tableWriter per table (writer.go). Its load reads the
// table's offsets and checks that they belong to this log's topic
// (reset.go); a fetcher goroutine reads and decodes the topic (fetch.go);
// the loop buffers the changes and commits them every CommitInterval, or
// sooner when the buffer is full. What differs between a mirror (upsert)
// and a changelog (append) is a tableMode (mode.go); maintenance and
// compaction are the compactor package's, run by the loop between commits
// through the compactor.Table the sink offers (compaction.go, rewriter.go).
//
// One commit's path (commit.go):
//
//	commit         mode.cut: how far the buffer may go (upsert: both halves
//	               of a key change together, keychange.go)
//	commitWith     create the table if needed; the summary properties
//	               (offsets, topic id, source position, a new commit id)
//	land           attempt until it lands, within CommitBudget:
//	  attempt      evolve the schema; name the attempt's files (files.go);
//	               mode.attempt — upsert: stage (fold per key, look the keys
//	               up in the index, fill unchanged values, write the rows
//	               and the deletion vectors: upsert.go, deletes.go), commit
//	               the snapshot (producer.go), adopt it (index, live files);
//	               changelog: append through iceberg-go (changelog.go)
//	  on failure   classify (errors.go): ErrPaused returns at once; otherwise
//	               settle — reload, look for the commit id — landed: adopt;
//	               not landed: drop the attempt's files (or keep them while
//	               the catalog may still apply it), then replay (conflict) or
//	               back off (temporary)
//	committedNow   empty the buffer, move the offsets and stats, remove the
//	               files of earlier attempts that did not land, let the
//	               compactor maintain the table
//
// A failure that ends the loop pauses the table (ErrPaused: the reason and
// the fix in its stats) or restarts it after RetryInterval; either way it
// resumes from the offsets its table holds.
//
// # Formats (frozen)
//
// What the sink writes into tables, and keeps beside them, is read back by
// later versions of cdcd and by other engines: these names and layouts do
// not change. The constants are defined where they are used, each naming
// this section.
//
// Snapshot summary properties, on every data commit (sink.go):
//
//	cdcd.pipeline         the pipeline's name; a table whose newest offsets
//	                      carry another is refused (two pipelines, one table)
//	cdcd.offsets          JSON object {"<partition>": <next offset>, ...}
//	cdcd.topic-id         the log topic incarnation (log.TopicInfo.ID) the
//	                      offsets belong to; another log's are never read as
//	                      this table's (reset.go)
//	cdcd.source-position  hex of the newest source position committed
//	cdcd.commit-id        32 hex digits, unique per commit; a commit whose
//	                      outcome is unknown is settled by looking for it
//	cdcd.rows             "0" on commits that change no rows (offsets only)
//	cdcd.owner-epoch      shared tables only (Config.Shared): the epoch of
//	                      the sink process that owns the table; its claim
//	                      carries a new one, a smaller one is refused
//	                      (owner.go)
//	cdcd.compaction-id    on a compaction's REPLACE snapshot (its commit id)
//
// The newest snapshot carrying cdcd.offsets is also tagged cdcd-offsets, so
// no snapshot expiry removes it. Maintenance commits (expiry, manifest
// rewrites) carry none of these; the offsets are those of the newest
// snapshot in the current snapshot's ancestry that has them.
//
// Table properties of the tables cdcd creates: cdcd.mode ("upsert" or
// "append"), cdcd.source-table (schema.table of the source),
// format-version, read.split.target-size (32 MiB) and
// write.metadata.delete-after-commit.enabled (true). Upsert tables declare
// the primary key as identifier fields and a sort order by it.
//
// Changelog tables (append mode) have the source's columns followed by
// _cdc_op (c u d r t), _cdc_lsn, _cdc_tx_id, _cdc_commit_ts,
// _cdc_unchanged (JSON array of the columns the source did not send),
// _cdc_partition and _cdc_offset (schema.go).
//
// # The key index
//
// An upsert table's key index is a pebble database under
// <IndexDir>/<namespace>.<table>/ (index.go):
//
//	'k' key                      -> uvarint file id | uvarint row position
//	'f' file id (4B big-endian)  -> data file path
//	'm' "snap"                   -> snapshot id the index reflects (8B big-endian);
//	                                -1 while a rebuild runs
//	'm' "intent"                 -> a compaction's intent while it commits (JSON):
//	                                {"id": commit id, "old": [paths], "new": [paths]}
//
// A commit's entries for keys above every indexed key may arrive as one
// ingested table file instead (index_ingest.go), written first as
// <index dir>/ingest.sst.tmp; the layout of the entries is the same.
//
// Keys are the primary-key values encoded so that byte order is key order
// (encodeKey):
//
//	integers:                  0x01 | 8 bytes big-endian, sign bit flipped
//	strings, bytes, decimals:  0x02 | bytes, 0x00 escaped as 0x00 0xFF | 0x00 0x01
//	booleans:                  0x03 | 0 or 1
//	floats:                    0x04 | 8 bytes (float64 bits)
//	uuids:                     0x05 | 16 bytes
//
// Decimals are encoded by their unscaled integer as text, intervals by
// their ISO 8601 text (keyValue). The intent is written before a
// compaction's commit and deleted in the same batch as the index moves its
// keys; a start that finds one settles it by the commit id: landed, the
// index is rebuilt from the table; not landed, the intent's new files are
// removed.
//
// # Files
//
// A commit attempt names its files after a random 16-hex-digit write id:
// <id>-<seq>.parquet (data, v2 position deletes), <id>-<seq>.puffin
// (deletion vectors), metadata/<id>-m<seq>.avro (manifests) and
// metadata/snap-<snapshot id>-1-<id>.avro (the manifest list); a
// compaction's data files are compact-<id>-<n>.parquet.
package iceberg
