// Package snapshot is the incremental snapshot engine (Netflix's DBLog)
// that database sources share: it re-reads tables by primary-key chunks
// while their changes stream, and puts every chunk into the change stream
// at a point where it is consistent with it.
//
// # One chunk
//
//  1. The engine writes a low watermark into the change stream.
//  2. It reads the next chunk: up to ChunkRows rows with keys after the
//     last key read and at most the run's upper bound (the greatest key
//     when the run started, fixed from then on), in key order. Bounds are
//     compared by the database, so collations are its own.
//  3. It writes a high watermark.
//  4. The source's stream meets the low watermark: from there on, every
//     change of the table records its key (the window). At the high
//     watermark, the chunk's rows whose keys changed in the window are
//     dropped (the stream's version is newer, and is already emitted); the
//     rest are emitted right there, as op r, with positions
//     (the high watermark's position) ‖ the row's index in the chunk, so
//     they sort after everything streamed before the watermark and before
//     everything after it.
//
// A change the stream delivered before the low watermark must be visible
// to the read, or the chunk would emit an older row after it. A database
// may make a transaction durable (and decodable) before new snapshots see
// it (PostgreSQL: between the commit record's flush and the end of the
// transaction in the proc array, which a synchronous standby stretches);
// the source checks that (Chunk.Consistent) and the chunk is read again.
// A chunk is read again too when the table changed shape in its window.
//
// # Runs, resets and resumption
//
// A run snapshots one table (a Request): queued in order, one chunk at a
// time, up to the greatest key when it started (keys above it arrive by
// the stream). A run that replaces the table's contents (Request.Replace:
// a table added to the pipeline, the incremental initial load, `cdcd
// snapshot --replace`) first writes a reset watermark; where the stream
// meets it the engine emits a reset marker (a truncate with
// source.Change.Reset set), so the sink empties the table and the chunks
// fill it again. Such a run reads its upper bound only after the marker,
// in a read checked like a chunk's against the marker's position: a key
// inserted before the marker and above the bound would be truncated and
// never read.
//
// The engine's state — the queue, each run's upper bound, last durable key,
// rows, reset id — is saved under Config.StateKey by Checkpoint, which the
// source calls with the position up to which everything is durable before
// it confirms that position to the database. So after a crash the saved
// progress never claims more than the log holds: chunks whose rows were not
// durable are read again (their rows may reach the log twice, each time
// the row as of its read, both in order); watermarks of an earlier session
// are recognised by their session id and ignored. A reset marker is the
// exception: it must reach every partition exactly once at one position, so
// its id is saved before its watermark is written, and the first
// watermark of that id the stream delivers (an old one re-sent after a
// crash, or the one written again) emits it.
//
// A run may also go on after a key (Request.After: an interrupted COPY
// initial load whose first chunks are durable): no reset marker, the range
// starts after that key, and the keys after it are treated as a replacing
// run treats the keys it has not read (below).
//
// # Unchanged values
//
// After a reset (or after a Request.After key) the sink has no row for keys
// not read yet. A streamed
// update that carries a value as schema.Unchanged (PostgreSQL's TOASTed
// values) then has nothing to take it from. While a replacing run is
// active, Observe drops such a change when the row it needs is not in the
// table yet — its key is after the last key read (a later chunk reads the
// row with the change in it), or it is in the re-read set — and, when the
// key has been read already or a window is open, puts the key in the run's
// re-read set: keys read again by point chunks (with their own watermarks)
// after the range. Without a key order (Table.Compare nil) every such
// change is dropped and its key re-read; where the source cannot re-read a
// key (Table.KeyText fails) the change is kept, and the sink stops the table
// loudly rather than invent the value.
//
// # What a source implements
//
// A source implements Database (describe a table, compute its upper bound,
// read a chunk, write a watermark) for the engine's goroutine, Run, and
// calls the stream side from its stream's goroutine: Watermark when it
// decodes one of its watermarks, Observe for every change it is about to
// emit, Checkpoint before it confirms a position. source/postgres writes
// watermarks with pg_logical_emit_message; source/mysql writes them into a
// watermark table.
package snapshot
