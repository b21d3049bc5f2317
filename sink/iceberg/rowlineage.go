package iceberg

import (
	"fmt"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"
)

// Row lineage of updated rows (format 3). By the spec, a row that is
// updated keeps its _row_id: the writer copies it into the new row and
// leaves _last_updated_sequence_number null, which then inherits the
// commit's sequence number. A row whose _row_id is null inherits its data
// file's first_row_id + its position (an insert). So an upsert's new data
// files carry both lineage columns: the old row's id for a key whose row
// is replaced, null for a new key.
//
// The old row's id is its file's explicit _row_id at its position (files a
// compaction or an earlier update wrote) or else the file's first_row_id
// (assigned when the commit that added the file wrote its manifest list,
// read back from the manifests) + the position. Data files never change:
// each file's explicit ids are read once (or known when this writer wrote
// the file) and kept until the cache's size bound clears them.

// noRowID marks a position whose _row_id is null (inherited).
const noRowID = -1

// rowIDCacheBytes bounds the explicit ids kept (8 bytes a row).
const rowIDCacheBytes = 32 << 20

// rowIDs is the upsert table's knowledge of its data files' row ids.
type rowIDs struct {
	first   map[string]int64   // data file → first_row_id
	ids     map[string][]int64 // data file → explicit _row_id by position; a nil slice: none
	scanned map[string]bool    // data manifests whose entries are in first
	size    int                // bytes in ids
}

func (r *rowIDs) reset() { *r = rowIDs{} }

// oldRowIDs sets the row id (keyState.rowID) of the current row of each
// live key whose row the buffer replaces (an update); none on format 2. A
// key the buffer deletes and inserts again is a new row.
func (u *upsert) oldRowIDs(fs icebergio.IO, tbl *table.Table, keys []*keyState) error {
	if tbl.Metadata().Version() < 3 {
		return nil
	}
	r := &u.rowIDs
	if r.first == nil {
		r.first, r.ids, r.scanned = map[string]int64{}, map[string][]int64{}, map[string]bool{}
	}
	byFile := map[string][]*keyState{}
	for _, st := range keys {
		// indexed first: a new key's changes are not walked.
		if st.indexed && st.live && !deletedInBuffer(st) {
			byFile[st.loc.file] = append(byFile[st.loc.file], st)
		}
	}
	for path, sts := range byFile {
		ids, err := r.explicit(fs, path)
		if err != nil {
			return err
		}
		first, known := int64(0), false
		for _, st := range sts {
			pos := st.loc.pos
			if pos < int64(len(ids)) && ids[pos] != noRowID {
				st.rowID, st.hasRowID = ids[pos], true
				continue
			}
			if !known {
				if first, err = r.firstRowID(fs, tbl, u.data[path]); err != nil {
					return err
				}
				known = true
			}
			if first >= 0 {
				st.rowID, st.hasRowID = first+pos, true
			}
		}
	}
	return nil
}

// deletedInBuffer reports whether one of st's changes is a delete.
func deletedInBuffer(st *keyState) bool {
	for _, c := range st.changes {
		if c.op() == 'd' {
			return true
		}
	}
	return false
}

// explicit is path's explicit row ids by position, read once.
func (r *rowIDs) explicit(fs icebergio.IO, path string) ([]int64, error) {
	if ids, ok := r.ids[path]; ok {
		return ids, nil
	}
	pf, closeFile, err := parquetFile(fs, path)
	if err != nil {
		return nil, err
	}
	defer closeFile()
	var ids []int64
	if fc, ok := columnFor(pf, iceberg.RowID()); ok && !allNull(pf, fc.leaf) {
		some := false
		ids = make([]int64, 0, pf.NumRows())
		err = readColumns(pf, []iceberg.NestedField{iceberg.RowID()}, func(pos int64, vals []any) error {
			id := int64(noRowID)
			if v, ok := vals[0].(int64); ok {
				id, some = v, true
			}
			ids = append(ids, id)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("iceberg: read the row ids of %s: %w", path, err)
		}
		if !some {
			ids = nil
		}
	}
	r.remember(path, ids)
	return ids, nil
}

// allNull reports whether the file's statistics say every value of flat
// leaf column leaf is null, in every row group: a file written with
// _row_id left to inheritance (an insert's, a load's), whose ids need not
// be read. After a restart, the first update of each such file read its
// whole _row_id column (a million nulls of a loaded table cost about 0.1
// CPU-s in the streaming phase of cdcd bench); its footer says as much.
// A writer that leaves the null count out (zero) makes the file read.
func allNull(pf *parquet.File, leaf int) bool {
	groups := pf.RowGroups()
	for _, rg := range groups {
		chunks := rg.ColumnChunks()
		if leaf >= len(chunks) {
			return false
		}
		c, ok := chunks[leaf].(*parquet.FileColumnChunk)
		if !ok || rg.NumRows() == 0 || c.NullCount() != rg.NumRows() || c.NumValues() != rg.NumRows() {
			return false
		}
	}
	return len(groups) > 0
}

// remember keeps a file's explicit ids, clearing the cache when it is full.
func (r *rowIDs) remember(path string, ids []int64) {
	if r.ids == nil {
		return
	}
	if r.size+8*len(ids) > rowIDCacheBytes {
		clear(r.ids)
		r.size = 0
	}
	r.ids[path] = ids
	r.size += 8 * len(ids)
}

// firstRowID is df's first_row_id: as the manifests the writer loaded
// gave it, else read from the data manifests of tbl's current snapshot
// not read yet (the file was added since, by this writer); -1 when no
// manifest gives it one.
func (r *rowIDs) firstRowID(fs icebergio.IO, tbl *table.Table, df iceberg.DataFile) (int64, error) {
	if df == nil {
		return 0, fmt.Errorf("iceberg: a key's row is in a data file the table does not list")
	}
	if id := df.FirstRowID(); id != nil {
		return *id, nil
	}
	if id, ok := r.first[df.FilePath()]; ok {
		return id, nil
	}
	snap := tbl.CurrentSnapshot()
	if snap != nil {
		mfs, err := snap.Manifests(fs)
		if err != nil {
			return 0, fmt.Errorf("iceberg: read manifest list of %s: %w", identString(tbl.Identifier()), err)
		}
		for _, mf := range mfs {
			if mf.ManifestContent() != iceberg.ManifestContentData || r.scanned[mf.FilePath()] {
				continue
			}
			for e, err := range mf.Entries(fs, false) {
				if err != nil {
					return 0, fmt.Errorf("iceberg: read manifest %s: %w", mf.FilePath(), err)
				}
				if id := e.DataFile().FirstRowID(); id != nil {
					r.first[e.DataFile().FilePath()] = *id
				}
			}
			r.scanned[mf.FilePath()] = true
		}
	}
	id, ok := r.first[df.FilePath()]
	if !ok {
		// Not written by a format-3 commit: its updated rows get new ids
		// (they have none to keep).
		r.first[df.FilePath()] = -1
		return -1, nil
	}
	return id, nil
}

// rowIDLeaf is the leaf index (in fs.order) of fs's _row_id column and
// its Parquet leaf column, ok false when fs has none.
func rowIDLeaf(fs *fileSchema, fields []iceberg.NestedField) (li, leaf int, ok bool) {
	for fi, f := range fields {
		if f.ID != iceberg.RowIDFieldID {
			continue
		}
		for li, o := range fs.order {
			if o == fi {
				return li, fs.cols[fi].leaf, true
			}
		}
	}
	return 0, 0, false
}

// addAvroRowID is addAvro with the row's _row_id (leaf li of column leaf)
// set to id.
func (d *dataFileWriter) addAvroRowID(c *rowCodec, row []byte, li, leaf int, id int64) error {
	n, err := c.decodeInto(row, d.pending)
	if err != nil {
		d.dropRow()
		return err
	}
	d.pending[leaf][d.npending] = parquet.Int64Value(id).Level(0, 1, leaf)
	d.pendingBytes += n
	return d.added()
}
