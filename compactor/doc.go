// Package compactor keeps an Iceberg table's files and metadata in shape
// for the writer that owns it (the sink): it rewrites small or
// delete-heavy data files, expires snapshots and removes the files they
// leave, merges manifests, and sweeps orphan files. It knows no source and
// no log: everything it needs of the table and its writer comes through
// the narrow Table interface the writer offers — the table's current
// state, a commit slot between the writer's own commits, and the key-index
// moves of a rewrite.
//
// The writer's loop drives it, between two of its commits:
//
//	AfterCommit  after each of the writer's commits: expiry, manifest
//	             merge, orphan sweep, when due
//	Poll         start a rewrite when one is due: plan (pick the files,
//	             take their deleted rows), then merge them in a goroutine
//	Done/Finish  when the rewrite is done: diff the rows deleted since the
//	             plan, and commit through Table.CommitRewrite
//
// A rewrite plans the files of one partition: delete-heavy files (at least
// DeleteRatio of their rows deleted) on their own, small files (under
// SmallFileRatio of the target size) in size tiers, up to MaxBytes and
// MaxRows of input (pick). The merge is a k-way merge of the files' live
// rows — each file is sorted by key — into new files, remembering each old
// row's new place. Its commit, in the writer's commit slot, deletes in the
// new files the rows the writer deleted in the old ones meanwhile, and
// moves every copied key still live to its new place in the writer's key
// index, atomically with the REPLACE snapshot (the writer keeps an intent
// record for a crash in between).
package compactor
