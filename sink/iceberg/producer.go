package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"math"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/compactor"
)

// The upsert commit's snapshot producer. iceberg-go's RowDelta reads every
// data manifest of the parent (to validate that the files its deletes
// reference exist) and reads and rewrites every delete manifest holding a
// replaced deletion vector; both grow with the table's history. cdcd is
// the table's only writer and keeps the table's files in memory anyway
// (the upsert state), so it writes the snapshot itself with iceberg-go's
// manifest writers:
//
//   - the new data files go into one new data manifest; every existing data
//     manifest is reused as it is, unread;
//   - the new delete files, plus the surviving entries of every delete
//     manifest that held a replaced vector (EXISTING, with their original
//     sequence numbers), go into one new delete manifest; other delete
//     manifests are reused unread;
//   - the manifest list, the snapshot and its summary are written from memory
//     and committed with a requirement that the branch still points at the
//     parent, so any other writer's commit in between fails this one.
//
// What it validates itself: every replaced vector is live in the parent
// (the state is the parent's), and no data file ends up with two vectors.

// liveDelete is one live delete file of the current snapshot.
type liveDelete struct {
	df         iceberg.DataFile
	snapshotID int64
	seq        int64
	fileSeq    int64
	manifest   string // path of the delete manifest holding it
}

// manifestState is the current snapshot's manifests, as the producer needs.
type manifestState struct {
	snapshotID int64
	data       []iceberg.ManifestFile // data manifests, reused verbatim
	deletes    map[string]iceberg.ManifestFile
	live       map[string]*liveDelete // by referenced data file (DVs) or path (position-delete files)
	// totals for the snapshot summary
	records, dataFiles, dataBytes int64
	deleteFiles, positionDeletes  int64
	deleteBytes                   int64
}

// deleteKey identifies a live delete file: the data file a deletion vector
// references, or a position-delete file's own path.
func deleteKey(df iceberg.DataFile) string {
	if table.IsDeletionVector(df) && df.ReferencedDataFile() != nil {
		return "dv:" + *df.ReferencedDataFile()
	}
	return "pd:" + df.FilePath()
}

// loadManifests reads the current snapshot's manifest list and delete
// manifests (data manifests are only listed, not read).
func loadManifests(fs icebergio.IO, tbl *table.Table) (*manifestState, error) {
	st := &manifestState{deletes: map[string]iceberg.ManifestFile{}, live: map[string]*liveDelete{}}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return st, nil
	}
	st.snapshotID = snap.SnapshotID
	mfs, err := snap.Manifests(fs)
	if err != nil {
		return nil, err
	}
	for _, mf := range mfs {
		if mf.ManifestContent() == iceberg.ManifestContentData {
			st.data = append(st.data, mf)
			continue
		}
		st.deletes[mf.FilePath()] = mf
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return nil, fmt.Errorf("iceberg: read delete manifest %s: %w", mf.FilePath(), err)
			}
			df := e.DataFile()
			ld := &liveDelete{df: df, snapshotID: e.SnapshotID(), seq: e.SequenceNum(), manifest: mf.FilePath()}
			ld.fileSeq = ld.seq
			if fsn := e.FileSequenceNum(); fsn != nil {
				ld.fileSeq = *fsn
			}
			st.live[deleteKey(df)] = ld
			st.deleteFiles++
			st.positionDeletes += df.Count()
			st.deleteBytes += df.FileSizeBytes()
		}
	}
	if snap.Summary != nil {
		p := snap.Summary.Properties
		st.records, _ = strconv.ParseInt(p["total-records"], 10, 64)
		st.dataFiles, _ = strconv.ParseInt(p["total-data-files"], 10, 64)
		total, _ := strconv.ParseInt(p["total-files-size"], 10, 64)
		st.dataBytes = total - st.deleteBytes
	}
	return st, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// produce commits plan p as a new snapshot of w.tbl. On success w.tbl is
// the new table and w.up.ms the new snapshot's manifest state.
func (w *tableWriter) produce(ctx context.Context, p *plan, props iceberg.Properties) error {
	tbl := w.tbl
	meta := tbl.Metadata()
	fs, err := tbl.FS(ctx)
	if err != nil {
		return err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return errors.New("iceberg: the warehouse is not writable")
	}
	parent := tbl.CurrentSnapshot()
	ms := w.up.ms
	if ms == nil || (parent != nil && ms.snapshotID != parent.SnapshotID) || (parent == nil && ms.snapshotID != 0) {
		if ms, err = loadManifests(fs, tbl); err != nil {
			return err
		}
		w.up.ms = ms
	}
	snapID := newSnapshotID(meta)
	seq := meta.LastSequenceNumber() + 1
	version := meta.Version()
	var manifests []iceberg.ManifestFile

	// Data: one new manifest; the parent's are reused unread.
	if len(p.added) > 0 {
		mf, err := w.writeManifest(wfs, tbl, snapID, iceberg.ManifestContentData, func(mw *manifestFill) error {
			for _, df := range p.added {
				if err := mw.add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snapID, nil, nil, df)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		manifests = append(manifests, mf)
	}
	if len(p.removedData) > 0 {
		kept, err := w.rewriteDataManifests(fs, wfs, tbl, snapID, ms, p.removedData)
		if err != nil {
			return err
		}
		manifests = append(manifests, kept...)
	} else {
		manifests = append(manifests, ms.data...)
	}

	// Deletes: the replaced vectors' manifests are rewritten without them.
	removed := map[string]bool{}
	dirty := map[string]bool{}
	for _, old := range p.removedDVs {
		k := deleteKey(old)
		ld, ok := ms.live[k]
		if !ok {
			return fmt.Errorf("iceberg: replaced deletion vector for %s is not live in snapshot %d", k, ms.snapshotID)
		}
		removed[k] = true
		dirty[ld.manifest] = true
	}
	added := map[string]bool{}
	for _, d := range p.deletes {
		k := deleteKey(d)
		if added[k] {
			return fmt.Errorf("iceberg: two new deletion vectors for %s", k)
		}
		added[k] = true
		if _, live := ms.live[k]; live && !removed[k] && table.IsDeletionVector(d) {
			return fmt.Errorf("iceberg: new deletion vector for %s would leave two live vectors", k)
		}
	}
	// A removed data file takes its vector with it.
	for _, df := range p.removedData {
		k := "dv:" + df.FilePath()
		if ld, ok := ms.live[k]; ok && !removed[k] {
			return fmt.Errorf("iceberg: removing %s but not its deletion vector %s", df.FilePath(), ld.df.FilePath())
		}
	}
	// Many small delete manifests are merged while rewriting anyway.
	mergeAll := len(ms.deletes)-len(dirty) > w.s.cfg.Maintenance.MaxDataManifests
	survivors := 0
	for k, ld := range ms.live {
		if !removed[k] && (dirty[ld.manifest] || mergeAll) {
			survivors++
		}
	}
	if len(p.deletes) > 0 || survivors > 0 {
		mf, err := w.writeManifest(wfs, tbl, snapID, iceberg.ManifestContentDeletes, func(mw *manifestFill) error {
			for _, d := range p.deletes {
				if err := mw.add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snapID, nil, nil, d)); err != nil {
					return err
				}
			}
			for k, ld := range ms.live {
				if removed[k] || !(dirty[ld.manifest] || mergeAll) {
					continue
				}
				sid, s, f := ld.snapshotID, ld.seq, ld.fileSeq
				if err := mw.existing(iceberg.NewManifestEntry(iceberg.EntryStatusEXISTING, &sid, &s, &f, ld.df)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		manifests = append(manifests, mf)
	}
	for path, mf := range ms.deletes {
		if !dirty[path] && !mergeAll {
			manifests = append(manifests, mf)
		}
	}

	// The manifest list, the snapshot, the commit.
	lp, err := tbl.LocationProvider()
	if err != nil {
		return err
	}
	listPath := lp.NewMetadataLocation(fmt.Sprintf("snap-%d-1-%s.avro", snapID, w.writeID))
	var parentID *int64
	if parent != nil {
		id := parent.SnapshotID
		parentID = &id
	}
	firstRowID := int64(0)
	if version >= 3 {
		firstRowID = meta.NextRowID()
	}
	addedRows, err := writeManifestList(wfs, listPath, version, snapID, seq, firstRowID, parentID, manifests)
	if err != nil {
		return err
	}
	summary := w.summary(ms, p, removed, props)
	snapshot := table.Snapshot{
		SnapshotID: snapID, ParentSnapshotID: parentID, SequenceNumber: seq,
		TimestampMs:  max(time.Now().UnixMilli(), meta.LastUpdatedMillis()),
		ManifestList: listPath, Summary: &summary,
	}
	schemaID := tbl.Schema().ID
	snapshot.SchemaID = &schemaID
	if version >= 3 {
		snapshot.FirstRowID, snapshot.AddedRows = &firstRowID, &addedRows
	}
	reqs := []table.Requirement{table.AssertRefSnapshotID(table.MainBranch, parentID)}
	updates := []table.Update{
		table.NewAddSnapshotUpdate(&snapshot),
		table.NewSetSnapshotRefUpdate(table.MainBranch, snapID, table.BranchRef, -1, -1, -1),
	}
	if _, ok := props[PropOffsets]; ok {
		// The newest snapshot carrying offsets is tagged, so no expiry
		// removes it whatever comes after it.
		updates = append(updates, table.NewSetSnapshotRefUpdate(OffsetsTag, snapID, table.TagRef, -1, -1, -1))
	}
	w.failpoint("before-catalog-commit")
	newMeta, loc, err := w.s.cat.CommitTable(ctx, tbl.Identifier(), reqs, updates)
	if err != nil {
		return err
	}
	// The new table opens files through the IO this commit used, not
	// through tbl.FS: a method value of the old table would keep that table
	// (its metadata and manifest cache) alive and add one call to every
	// later file open, a chain growing with every commit
	// (TestTableFSDoesNotChain).
	w.tbl = table.New(tbl.Identifier(), newMeta, loc, fixedFS(fs), w.s.cat)
	w.failpoint("after-catalog-commit")
	w.dropOldMetadata(fs, tbl.Metadata(), newMeta)
	return w.advanceManifests(fs, ms, p, removed, dirty, mergeAll)
}

// fixedFS is a table's file-system loader that returns fs.
func fixedFS(fs icebergio.IO) table.FSysF {
	return func(context.Context) (icebergio.IO, error) { return fs, nil }
}

// dropOldMetadata removes the metadata files that fell out of the table's
// metadata log with this commit (it keeps write.metadata.previous-versions-max,
// 100 by default), when the table asks for it with
// write.metadata.delete-after-commit.enabled, as the tables cdcd creates do.
// iceberg-go's transactions do this themselves; the sink commits through
// the catalog, and without this every commit would leave its metadata.json
// until the orphan sweep, a day later. A failed removal is left to that
// sweep.
func (w *tableWriter) dropOldMetadata(fs icebergio.IO, before, after table.Metadata) {
	if !after.Properties().GetBool(table.MetadataDeleteAfterCommitEnabledKey, table.MetadataDeleteAfterCommitEnabledDefault) {
		return
	}
	keep := map[string]bool{}
	for e := range after.PreviousFiles() {
		keep[e.MetadataFile] = true
	}
	for e := range before.PreviousFiles() {
		if keep[e.MetadataFile] {
			continue
		}
		if err := fs.Remove(e.MetadataFile); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			w.logger.Debug("could not remove an old metadata file; the orphan sweep will", "file", e.MetadataFile, "err", err)
		}
	}
}

// advanceManifests makes the manifest state the new snapshot's: its list
// is read back for the descriptors the list writer completed (sequence
// numbers, first row ids).
func (w *tableWriter) advanceManifests(fs icebergio.IO, ms *manifestState, p *plan, removed, dirty map[string]bool, mergeAll bool) error {
	snap := w.tbl.CurrentSnapshot()
	mfs, err := snap.Manifests(fs)
	if err != nil {
		w.up.ms = nil // reloaded before the next commit
		return nil
	}
	next := &manifestState{snapshotID: snap.SnapshotID, deletes: map[string]iceberg.ManifestFile{}, live: map[string]*liveDelete{}}
	var newDelete string
	for _, mf := range mfs {
		if mf.ManifestContent() == iceberg.ManifestContentData {
			next.data = append(next.data, mf)
			continue
		}
		next.deletes[mf.FilePath()] = mf
		if mf.SnapshotID() == snap.SnapshotID {
			newDelete = mf.FilePath()
		}
	}
	for k, ld := range ms.live {
		if removed[k] {
			continue
		}
		c := *ld
		if dirty[ld.manifest] || mergeAll {
			c.manifest = newDelete
		}
		next.live[k] = &c
	}
	for _, d := range p.deletes {
		next.live[deleteKey(d)] = &liveDelete{df: d, snapshotID: snap.SnapshotID, seq: snap.SequenceNumber, fileSeq: snap.SequenceNumber, manifest: newDelete}
	}
	next.records, next.dataFiles, next.dataBytes = ms.records, ms.dataFiles, ms.dataBytes
	for _, df := range p.added {
		next.records += df.Count()
		next.dataFiles++
		next.dataBytes += df.FileSizeBytes()
	}
	for _, df := range p.removedData {
		next.records -= df.Count()
		next.dataFiles--
		next.dataBytes -= df.FileSizeBytes()
	}
	for _, ld := range next.live {
		next.deleteFiles++
		next.positionDeletes += ld.df.Count()
		next.deleteBytes += ld.df.FileSizeBytes()
	}
	w.up.ms = next
	return nil
}

// rewriteDataManifests returns the data manifests of the new snapshot when
// it removes files: every manifest holding one is rewritten into one new
// manifest — survivors EXISTING with their sequence numbers and row ids,
// removed files DELETED — and the others are kept unread.
func (w *tableWriter) rewriteDataManifests(fs icebergio.IO, wfs icebergio.WriteFileIO, tbl *table.Table, snapID int64, ms *manifestState, removed []iceberg.DataFile) ([]iceberg.ManifestFile, error) {
	gone := make(map[string]bool, len(removed))
	for _, df := range removed {
		gone[df.FilePath()] = true
	}
	var kept []iceberg.ManifestFile
	var entries []iceberg.ManifestEntry
	found := 0
	for _, mf := range ms.data {
		var es []iceberg.ManifestEntry
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return nil, fmt.Errorf("iceberg: read data manifest %s: %w", mf.FilePath(), err)
			}
			es = append(es, e)
		}
		touched := false
		for _, e := range es {
			if gone[e.DataFile().FilePath()] {
				touched = true
				found++
			}
		}
		if !touched {
			kept = append(kept, mf)
			continue
		}
		entries = append(entries, es...)
	}
	if found != len(removed) {
		return nil, fmt.Errorf("iceberg: %d of the %d files to remove are not live in snapshot %d", len(removed)-found, len(removed), ms.snapshotID)
	}
	mf, err := w.writeManifest(wfs, tbl, snapID, iceberg.ManifestContentData, func(mw *manifestFill) error {
		for _, e := range entries {
			sid, seq := e.SnapshotID(), e.SequenceNum()
			fseq := seq
			if f := e.FileSequenceNum(); f != nil {
				fseq = *f
			}
			if gone[e.DataFile().FilePath()] {
				if err := mw.delete(iceberg.NewManifestEntry(iceberg.EntryStatusDELETED, &snapID, &seq, &fseq, e.DataFile())); err != nil {
					return err
				}
				continue
			}
			if err := mw.existing(iceberg.NewManifestEntry(iceberg.EntryStatusEXISTING, &sid, &seq, &fseq, e.DataFile())); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(kept, mf), nil
}

// writeManifest writes one manifest with fill's entries.
func (w *tableWriter) writeManifest(wfs icebergio.WriteFileIO, tbl *table.Table, snapID int64, content iceberg.ManifestContent, fill func(*manifestFill) error) (_ iceberg.ManifestFile, err error) {
	lp, err := tbl.LocationProvider()
	if err != nil {
		return nil, err
	}
	w.fileSeq++
	path := lp.NewMetadataLocation(fmt.Sprintf("%s-m%d.avro", w.writeID, w.fileSeq))
	out, err := wfs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create manifest %s: %w", path, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	cw := &countingWriter{w: out}
	opts := []iceberg.ManifestWriterOption{}
	if content == iceberg.ManifestContentDeletes {
		opts = append(opts, iceberg.WithManifestWriterContent(content))
	}
	mw, err := iceberg.NewManifestWriter(tbl.Metadata().Version(), cw, tbl.Spec(), tbl.Schema(), snapID, opts...)
	if err != nil {
		return nil, err
	}
	f := &manifestFill{mw: mw, rec: w.compactor().Manifests().Record()}
	if err := fill(f); err != nil {
		return nil, err
	}
	if err := mw.Close(); err != nil {
		return nil, err
	}
	mf, err := mw.ToManifestFile(path, cw.n, iceberg.WithManifestFileContent(content))
	if err != nil {
		return nil, err
	}
	// The expiry's clean-up will need these entries: no need to read
	// them back then.
	f.rec.Done(path)
	return mf, nil
}

// manifestFill passes entries to a manifest writer and records them for
// the compactor's manifest cache.
type manifestFill struct {
	mw  *iceberg.ManifestWriter
	rec *compactor.ManifestRecord
}

func (f *manifestFill) add(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.Add(e)
}

func (f *manifestFill) existing(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.Existing(e)
}

func (f *manifestFill) delete(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.Delete(e)
}

// writeManifestList writes the list and returns the rows it assigned ids
// to (format v3).
func writeManifestList(wfs icebergio.WriteFileIO, path string, version int, snapID, seq, firstRowID int64, parent *int64, manifests []iceberg.ManifestFile) (added int64, err error) {
	out, err := wfs.Create(path)
	if err != nil {
		return 0, fmt.Errorf("iceberg: create manifest list %s: %w", path, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var lw *iceberg.ManifestListWriter
	switch version {
	case 2:
		lw, err = iceberg.NewManifestListWriterV2(out, snapID, seq, parent)
	case 3:
		lw, err = iceberg.NewManifestListWriterV3(out, snapID, seq, firstRowID, parent)
	default:
		return 0, fmt.Errorf("iceberg: format version %d is not supported", version)
	}
	if err != nil {
		return 0, err
	}
	if err := lw.AddManifests(manifests); err != nil {
		lw.Close()
		return 0, err
	}
	if err := lw.Close(); err != nil {
		return 0, err
	}
	if version >= 3 && lw.NextRowID() != nil {
		added = *lw.NextRowID() - firstRowID
	}
	return added, nil
}

// summary is the snapshot summary: cdcd's properties, the added and
// removed files, and the table's totals.
func (w *tableWriter) summary(ms *manifestState, p *plan, removed map[string]bool, props iceberg.Properties) table.Summary {
	out := iceberg.Properties{}
	for k, v := range props {
		out[k] = v
	}
	var addRecs, addBytes, addDelBytes, addPos, remPos, remDelBytes int64
	for _, df := range p.added {
		addRecs += df.Count()
		addBytes += df.FileSizeBytes()
	}
	for _, d := range p.deletes {
		addPos += d.Count()
		addDelBytes += d.FileSizeBytes()
	}
	for k := range removed {
		if ld := ms.live[k]; ld != nil {
			remPos += ld.df.Count()
			remDelBytes += ld.df.FileSizeBytes()
		}
	}
	set := func(k string, v int64) { out[k] = strconv.FormatInt(v, 10) }
	if len(p.added) > 0 {
		set("added-data-files", int64(len(p.added)))
		set("added-records", addRecs)
		set("added-files-size", addBytes+addDelBytes)
	}
	if len(p.deletes) > 0 {
		set("added-delete-files", int64(len(p.deletes)))
		set("added-position-delete-files", int64(len(p.deletes)))
		set("added-position-deletes", addPos)
	}
	if len(removed) > 0 {
		set("removed-delete-files", int64(len(removed)))
		set("removed-position-delete-files", int64(len(removed)))
		set("removed-position-deletes", remPos)
		set("removed-files-size", remDelBytes)
	}
	set("total-records", ms.records+addRecs)
	set("total-data-files", ms.dataFiles+int64(len(p.added)))
	set("total-delete-files", ms.deleteFiles+int64(len(p.deletes))-int64(len(removed)))
	set("total-position-deletes", ms.positionDeletes+addPos-remPos)
	set("total-equality-deletes", 0)
	set("total-files-size", ms.dataBytes+ms.deleteBytes+addBytes+addDelBytes-remDelBytes)
	op := table.OpOverwrite
	switch {
	case len(p.removedData) > 0:
		// A compaction: the same rows, in other files.
		op = table.OpReplace
		var recs, size int64
		for _, df := range p.removedData {
			recs += df.Count()
			size += df.FileSizeBytes()
		}
		set("deleted-data-files", int64(len(p.removedData)))
		set("deleted-records", recs)
		set("removed-files-size", remDelBytes+size)
		set("total-records", ms.records+addRecs-recs)
		set("total-data-files", ms.dataFiles+int64(len(p.added))-int64(len(p.removedData)))
		set("total-files-size", ms.dataBytes+ms.deleteBytes+addBytes+addDelBytes-remDelBytes-size)
	case len(p.deletes) == 0:
		op = table.OpAppend
	case len(p.added) == 0:
		op = table.OpDelete
	}
	return table.Summary{Operation: op, Properties: out}
}

// newSnapshotID returns a positive id no snapshot of meta has.
func newSnapshotID(meta table.Metadata) int64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := int64(binary.LittleEndian.Uint64(b[:]) & math.MaxInt64)
		if id != 0 && meta.SnapshotByID(id) == nil {
			return id
		}
	}
}
