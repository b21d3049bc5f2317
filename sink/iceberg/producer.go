package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
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
//
// Its API is one call: commit(ctx, tbl, plan, props, files) returns the
// new table; between calls it keeps the current snapshot's manifests.

// snapshotProducer commits upsert plans as snapshots (see above).
type snapshotProducer struct {
	cat catalog.Catalog
	// manifests is where it records the manifests it writes, for the
	// compactor's expiry.
	manifests func() *compactor.Manifests
	// mergeDeletes: past this many delete manifests left as they are, a
	// commit merges them all into its new one.
	mergeDeletes int
	failpoint    func(name string)
	logger       *slog.Logger
	// ms is the current snapshot's manifests (nil: read at the next commit).
	ms *manifestState
	// layouts: the manifests' headers and partition codecs
	// (manifest_write.go).
	layouts manifestLayouts
	// meta keeps the table's snapshots' JSON for its metadata files
	// (metadata_json.go).
	meta metadataCache
	// held is the writer's table; tables is the catalog the tables it
	// makes commit through (heldCatalog; made by tableCatalog).
	held   func() *table.Table
	tables catalog.Catalog
}

// tableCatalog is the catalog of the tables the producer makes: a
// heldCatalog over the SQL catalog, the catalog itself otherwise.
func (sp *snapshotProducer) tableCatalog() catalog.Catalog {
	if sp.tables == nil {
		sp.tables = sp.cat
		if c, ok := sp.cat.(*sqlCatalog); ok && sp.held != nil {
			sp.tables = &heldCatalog{sqlCatalog: c, held: sp.held, mc: &sp.meta}
		}
	}
	return sp.tables
}

// producer returns the table's snapshot producer.
func (w *tableWriter) producer() *snapshotProducer {
	if w.prod == nil {
		w.prod = &snapshotProducer{cat: w.s.cat, manifests: func() *compactor.Manifests { return w.compactor().Manifests() },
			mergeDeletes: w.s.cfg.Maintenance.MaxDataManifests, failpoint: w.failpoint, logger: w.logger,
			held: func() *table.Table { return w.tbl }}
	}
	return w.prod
}

// produce commits plan p with props as the table's next snapshot.
func (w *tableWriter) produce(ctx context.Context, p *plan, props iceberg.Properties) error {
	tbl, err := w.producer().commit(ctx, w.tbl, p, props, w.files)
	if err != nil {
		return err
	}
	w.tbl = tbl
	return nil
}

// draft is one snapshot being produced.
type draft struct {
	tbl    *table.Table
	fs     icebergio.IO
	wfs    icebergio.WriteFileIO
	files  *attemptFiles
	ms     *manifestState // the parent's manifests
	p      *plan
	snapID int64
	// manifests are the new snapshot's, as they are decided.
	manifests []iceberg.ManifestFile
	// removed are the replaced vectors (deleteKey); dirty the parent's
	// delete manifests that held one; mergeAll: every delete manifest is
	// rewritten into the new one.
	removed, dirty map[string]bool
	mergeAll       bool
}

// commit commits plan p as a new snapshot of tbl, whose current snapshot
// is the parent, with props, naming its files through files. It returns
// the new table.
func (sp *snapshotProducer) commit(ctx context.Context, tbl *table.Table, p *plan, props iceberg.Properties, files *attemptFiles) (*table.Table, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, errors.New("iceberg: the warehouse is not writable")
	}
	d := &draft{tbl: tbl, fs: fs, wfs: wfs, files: files, p: p, snapID: newSnapshotID(tbl.Metadata())}
	if d.ms, err = sp.parentManifests(fs, tbl); err != nil {
		return nil, err
	}
	if err := sp.dataManifests(d); err != nil {
		return nil, err
	}
	if err := sp.checkDeletes(d); err != nil {
		return nil, err
	}
	if err := sp.deleteManifests(d); err != nil {
		return nil, err
	}
	next, err := sp.commitSnapshot(ctx, d, props)
	if err != nil {
		return nil, err
	}
	sp.advance(d, next)
	return next, nil
}

// parentManifests returns the manifests of tbl's current snapshot: kept
// from the last commit, or read.
func (sp *snapshotProducer) parentManifests(fs icebergio.IO, tbl *table.Table) (*manifestState, error) {
	parent := tbl.CurrentSnapshot()
	ms := sp.ms
	if ms == nil || (parent != nil && ms.snapshotID != parent.SnapshotID) || (parent == nil && ms.snapshotID != 0) {
		var err error
		if ms, err = loadManifests(fs, tbl); err != nil {
			return nil, err
		}
		sp.ms = ms
	}
	return ms, nil
}

// dataManifests: the new data files go into one new manifest; the
// parent's are reused unread, except those holding a removed file.
func (sp *snapshotProducer) dataManifests(d *draft) error {
	if len(d.p.added) > 0 {
		mf, err := sp.writeManifest(d, iceberg.ManifestContentData, func(mw *manifestFill) error {
			for _, df := range d.p.added {
				if err := mw.add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &d.snapID, nil, nil, df)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		d.manifests = append(d.manifests, mf)
	}
	if len(d.p.removedData) == 0 {
		d.manifests = append(d.manifests, d.ms.data...)
		return nil
	}
	kept, err := sp.rewriteDataManifests(d)
	if err != nil {
		return err
	}
	d.manifests = append(d.manifests, kept...)
	return nil
}

// checkDeletes validates the plan's deletes against the parent: every
// replaced vector is live, no data file gets two live vectors, and a
// removed data file takes its vector with it. It marks the delete
// manifests the commit rewrites.
func (sp *snapshotProducer) checkDeletes(d *draft) error {
	ms := d.ms
	d.removed, d.dirty = map[string]bool{}, map[string]bool{}
	for _, old := range d.p.removedDVs {
		k := deleteKey(old)
		ld, ok := ms.live[k]
		if !ok {
			return fmt.Errorf("iceberg: replaced deletion vector for %s is not live in snapshot %d", k, ms.snapshotID)
		}
		d.removed[k] = true
		d.dirty[ld.manifest] = true
	}
	added := map[string]bool{}
	for _, df := range d.p.deletes {
		k := deleteKey(df)
		if added[k] {
			return fmt.Errorf("iceberg: two new deletion vectors for %s", k)
		}
		added[k] = true
		if _, live := ms.live[k]; live && !d.removed[k] && table.IsDeletionVector(df) {
			return fmt.Errorf("iceberg: new deletion vector for %s would leave two live vectors", k)
		}
	}
	for _, df := range d.p.removedData {
		k := "dv:" + df.FilePath()
		if ld, ok := ms.live[k]; ok && !d.removed[k] {
			return fmt.Errorf("iceberg: removing %s but not its deletion vector %s", df.FilePath(), ld.df.FilePath())
		}
	}
	// Many small delete manifests are merged while rewriting anyway.
	d.mergeAll = len(ms.deletes)-len(d.dirty) > sp.mergeDeletes
	return nil
}

// deleteManifests: the new delete files, plus the surviving entries of
// every rewritten delete manifest, go into one new manifest; the others
// are reused unread.
func (sp *snapshotProducer) deleteManifests(d *draft) error {
	ms := d.ms
	rewritten := func(ld *liveDelete) bool { return d.dirty[ld.manifest] || d.mergeAll }
	survivors := 0
	for k, ld := range ms.live {
		if !d.removed[k] && rewritten(ld) {
			survivors++
		}
	}
	if len(d.p.deletes) > 0 || survivors > 0 {
		mf, err := sp.writeManifest(d, iceberg.ManifestContentDeletes, func(mw *manifestFill) error {
			for _, df := range d.p.deletes {
				if err := mw.add(iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &d.snapID, nil, nil, df)); err != nil {
					return err
				}
			}
			for k, ld := range ms.live {
				if d.removed[k] || !rewritten(ld) {
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
		d.manifests = append(d.manifests, mf)
	}
	for path, mf := range ms.deletes {
		if !d.dirty[path] && !d.mergeAll {
			d.manifests = append(d.manifests, mf)
		}
	}
	return nil
}

// catalogCommitError is an error of the catalog's commit itself: unless
// the catalog refused it (a conflict), the commit may have landed.
type catalogCommitError struct{ err error }

func (e catalogCommitError) Error() string { return e.err.Error() }
func (e catalogCommitError) Unwrap() error { return e.err }

// commitSnapshot writes the manifest list and the snapshot and commits
// them, requiring that the branch still points at the parent (so any other
// writer's commit in between fails this one); the newest snapshot carrying
// offsets is tagged.
func (sp *snapshotProducer) commitSnapshot(ctx context.Context, d *draft, props iceberg.Properties) (*table.Table, error) {
	tbl, meta := d.tbl, d.tbl.Metadata()
	lp, err := tbl.LocationProvider()
	if err != nil {
		return nil, err
	}
	listPath := d.files.metadata(lp, fmt.Sprintf("snap-%d-1-%s.avro", d.snapID, d.files.id))
	var parentID *int64
	if parent := tbl.CurrentSnapshot(); parent != nil {
		id := parent.SnapshotID
		parentID = &id
	}
	seq, version := meta.LastSequenceNumber()+1, meta.Version()
	firstRowID := int64(0)
	if version >= 3 {
		firstRowID = meta.NextRowID()
	}
	addedRows, err := sp.writeManifestList(d.wfs, listPath, version, d.snapID, seq, firstRowID, parentID, d.manifests)
	if err != nil {
		return nil, err
	}
	summary := summarize(d.ms, d.p, d.removed, props)
	snapshot := table.Snapshot{
		SnapshotID: d.snapID, ParentSnapshotID: parentID, SequenceNumber: seq,
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
		table.NewSetSnapshotRefUpdate(table.MainBranch, d.snapID, table.BranchRef, -1, -1, -1),
	}
	if _, ok := props[PropOffsets]; ok {
		// The newest snapshot carrying offsets is tagged, so no expiry
		// removes it whatever comes after it.
		updates = append(updates, table.NewSetSnapshotRefUpdate(OffsetsTag, d.snapID, table.TagRef, -1, -1, -1))
	}
	sp.failpoint("before-catalog-commit")
	var (
		newMeta table.Metadata
		loc     string
		done    bool
	)
	if c, ok := sp.cat.(*sqlCatalog); ok {
		// On the table this commit builds on, without loading it back
		// (catalog_commit.go).
		newMeta, loc, done, err = c.commitOn(ctx, tbl, d.wfs, &sp.meta, reqs, updates)
	}
	if !done {
		newMeta, loc, err = sp.cat.CommitTable(ctx, tbl.Identifier(), reqs, updates)
	}
	if err != nil {
		return nil, catalogCommitError{err}
	}
	// The new table opens files through the IO this commit used, not
	// through tbl.FS: a method value of the old table would keep that table
	// (its metadata and manifest cache) alive and add one call to every
	// later file open, a chain growing with every commit
	// (TestTableFSDoesNotChain).
	next := table.New(tbl.Identifier(), newMeta, loc, fixedFS(d.fs), sp.tableCatalog())
	sp.failpoint("after-catalog-commit")
	sp.dropOldMetadata(d.fs, meta, newMeta)
	return next, nil
}

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
func (sp *snapshotProducer) dropOldMetadata(fs icebergio.IO, before, after table.Metadata) {
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
			sp.logger.Debug("could not remove an old metadata file; the orphan sweep will", "file", e.MetadataFile, "err", err)
		}
	}
}

// advance makes the manifest state the new snapshot's: its list is read
// back for the descriptors the list writer completed (sequence numbers,
// first row ids).
func (sp *snapshotProducer) advance(d *draft, tbl *table.Table) {
	ms, p := d.ms, d.p
	snap := tbl.CurrentSnapshot()
	mfs, err := snap.Manifests(d.fs)
	if err != nil {
		sp.ms = nil // read before the next commit
		return
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
		if d.removed[k] {
			continue
		}
		c := *ld
		if d.dirty[ld.manifest] || d.mergeAll {
			c.manifest = newDelete
		}
		next.live[k] = &c
	}
	for _, df := range p.deletes {
		next.live[deleteKey(df)] = &liveDelete{df: df, snapshotID: snap.SnapshotID, seq: snap.SequenceNumber, fileSeq: snap.SequenceNumber, manifest: newDelete}
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
	sp.ms = next
}

// rewriteDataManifests returns the data manifests of the new snapshot when
// it removes files: every manifest holding one is rewritten into one new
// manifest — survivors EXISTING with their sequence numbers and row ids,
// removed files DELETED — and the others are kept unread.
func (sp *snapshotProducer) rewriteDataManifests(d *draft) ([]iceberg.ManifestFile, error) {
	fs, ms, removed, snapID := d.fs, d.ms, d.p.removedData, d.snapID
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
	mf, err := sp.writeManifest(d, iceberg.ManifestContentData, func(mw *manifestFill) error {
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
func (sp *snapshotProducer) writeManifest(d *draft, content iceberg.ManifestContent, fill func(*manifestFill) error) (_ iceberg.ManifestFile, err error) {
	tbl := d.tbl
	lp, err := tbl.LocationProvider()
	if err != nil {
		return nil, err
	}
	path := d.files.manifest(lp)
	out, err := d.wfs.Create(path)
	if err != nil {
		return nil, fmt.Errorf("iceberg: create manifest %s: %w", path, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	cw := &countingWriter{w: out}
	layout, err := sp.layouts.get(tbl.Metadata().TableUUID(), tbl.Metadata().Version(), content, tbl.Spec(), tbl.Schema())
	if err != nil {
		return nil, err
	}
	mw, err := newManifestWriter(layout, cw, d.snapID)
	if err != nil {
		return nil, fmt.Errorf("iceberg: write manifest %s: %w", path, err)
	}
	f := &manifestFill{mw: mw, rec: sp.manifests().Record()}
	if err := fill(f); err != nil {
		return nil, err
	}
	if err := mw.close(); err != nil {
		return nil, err
	}
	mf, err := mw.manifestFile(path, cw.n)
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
	mw  *manifestWriter
	rec *compactor.ManifestRecord
}

func (f *manifestFill) add(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.add(e)
}

func (f *manifestFill) existing(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.existing(e)
}

func (f *manifestFill) delete(e iceberg.ManifestEntry) error {
	f.rec.Add(e)
	return f.mw.delete(e)
}

// writeManifestList writes the list (manifest_write.go) and returns the
// rows it assigned ids to (format v3).
func (sp *snapshotProducer) writeManifestList(wfs icebergio.WriteFileIO, path string, version int, snapID, seq, firstRowID int64, parent *int64, manifests []iceberg.ManifestFile) (added int64, err error) {
	out, err := wfs.Create(path)
	if err != nil {
		return 0, fmt.Errorf("iceberg: create manifest list %s: %w", path, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	next, err := sp.layouts.writeList(out, version, snapID, seq, firstRowID, parent, manifests)
	if err != nil {
		return 0, fmt.Errorf("iceberg: write manifest list %s: %w", path, err)
	}
	return next - firstRowID, nil
}

// summarize is the snapshot summary: cdcd's properties, the added and
// removed files, and the table's totals.
func summarize(ms *manifestState, p *plan, removed map[string]bool, props iceberg.Properties) table.Summary {
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
