package iceberg

import (
	"fmt"
	"sort"

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
// the file) and kept until the cache's size bound clears them. They are
// kept as runs where they run (idList): a compaction keeps its rows' ids,
// and a file of a stream's inserts, compacted, holds long runs of
// consecutive ids. Kept as they were read, 8 bytes a row, a table's
// files outgrew the bound at 4 million rows and every commit read its
// compacted files' _row_id columns again (the commit curve's median went
// from 80 ms to 920 ms between commits 2,000 and 2,100).

// noRowID marks a position whose _row_id is null (inherited).
const noRowID = -1

// rowIDCacheBytes bounds the explicit ids kept (8 bytes a row).
const rowIDCacheBytes = 32 << 20

// rowIDs is the upsert table's knowledge of its data files' row ids.
type rowIDs struct {
	first   map[string]int64   // data file → first_row_id
	ids     map[string]*idList // data file → explicit _row_id by position; nil: none
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
		r.first, r.ids, r.scanned = map[string]int64{}, map[string]*idList{}, map[string]bool{}
	}
	byFile := map[string][]*keyState{}
	for _, st := range keys {
		if st.indexed && st.live && !st.deleted {
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
			if id := ids.at(pos); id != noRowID {
				st.rowID, st.hasRowID = id, true
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

// explicit is path's explicit row ids by position, read once.
func (r *rowIDs) explicit(fs icebergio.IO, path string) (*idList, error) {
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
	return r.remember(path, ids), nil
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

// remember keeps a file's explicit ids (nil: none), clearing the cache
// when it is full, and returns them as kept.
func (r *rowIDs) remember(path string, ids []int64) *idList {
	l := newIDList(ids)
	if r.ids == nil {
		return l
	}
	if r.size+l.bytes() > rowIDCacheBytes {
		clear(r.ids)
		r.size = 0
	}
	r.ids[path] = l
	r.size += l.bytes()
	return l
}

// idList is a file's explicit row ids by position: runs of consecutive
// ids (and of nulls) where that is smaller, else the ids as read.
type idList struct {
	raw  []int64
	runs []idRun // by pos; a run lasts until the next one's pos, or n
	n    int64
}

// idRun: positions from pos on hold id, id+1, ... (noRowID: all null).
type idRun struct{ pos, id int64 }

func newIDList(ids []int64) *idList {
	if ids == nil {
		return nil
	}
	l := &idList{n: int64(len(ids))}
	for i, id := range ids {
		if i > 0 {
			prev := ids[i-1]
			if (id == noRowID && prev == noRowID) || (id != noRowID && prev != noRowID && id == prev+1) {
				continue
			}
		}
		l.runs = append(l.runs, idRun{int64(i), id})
		if 16*len(l.runs) > 4*len(ids) { // the runs would take over half the raw ids' room
			return &idList{raw: ids, n: int64(len(ids))}
		}
	}
	return l
}

// at is the id at pos: noRowID for a null, a position past the file, or
// a nil list.
func (l *idList) at(pos int64) int64 {
	if l == nil || pos < 0 || pos >= l.n {
		return noRowID
	}
	if l.raw != nil {
		return l.raw[pos]
	}
	i := sort.Search(len(l.runs), func(i int) bool { return l.runs[i].pos > pos }) - 1
	r := l.runs[i]
	if r.id == noRowID {
		return noRowID
	}
	return r.id + pos - r.pos
}

// bytes is what the list keeps.
func (l *idList) bytes() int {
	if l == nil {
		return 0
	}
	return 8*len(l.raw) + 16*len(l.runs)
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
