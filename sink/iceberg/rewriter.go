package iceberg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/compactor"
)

// Rewriter gives the compactor the upsert table's data files of the
// current snapshot: rows in key order with their encoded keys, and new
// files in the table's format. A changelog's files are not sorted by a
// key: it has none.
func (h tableHandle) Rewriter(ctx context.Context) (compactor.Rewriter, error) {
	w := h.w
	if w.up == nil || w.tbl == nil {
		return nil, nil
	}
	tbl := w.tbl
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	wfs, ok := fs.(icebergio.WriteFileIO)
	if !ok {
		return nil, errors.New("iceberg: the warehouse is not writable")
	}
	sc := tbl.Schema()
	rw := &rewriter{tbl: tbl, fs: fs, wfs: wfs, keys: w.up.keys, fields: sc.Fields()}
	fileSc := sc
	if tbl.Metadata().Version() >= 3 {
		// Row lineage: every row copied keeps its _row_id and
		// _last_updated_sequence_number, written into the new file.
		rw.lineage = true
		rw.fields = append(rw.fields, iceberg.RowID(), iceberg.LastUpdatedSequenceNumber())
		fileSc = iceberg.SchemaWithRowLineage(sc)
	}
	rw.keyIdx = make([]int, len(rw.keys))
	for i, k := range rw.keys {
		for j, f := range rw.fields {
			if f.ID == k.ID {
				rw.keyIdx[i] = j
			}
		}
	}
	if rw.fsch, err = newFileSchema(fileSc); err != nil {
		return nil, err
	}
	if rw.part, err = newPartitioner(sc, tbl.Spec()); err != nil {
		return nil, err
	}
	if rw.lp, err = tbl.LocationProvider(); err != nil {
		return nil, err
	}
	return rw, nil
}

// rewriter reads and writes one snapshot's data files for a rewrite; its
// methods run in the rewrite's goroutine and touch none of the writer's
// state.
type rewriter struct {
	tbl    *table.Table
	fs     icebergio.IO
	wfs    icebergio.WriteFileIO
	keys   []iceberg.NestedField
	keyIdx []int // each key field's index in fields
	fields []iceberg.NestedField
	fsch   *fileSchema
	part   *partitioner
	lp     table.LocationProvider

	// lineage: fields ends with _row_id and _last_updated_sequence_number
	// (v3), filled for rows whose file leaves them null from the file's
	// first_row_id and data sequence number (lineageOf).
	lineage  bool
	loadOnce sync.Once
	lineages map[string]fileLineage
	loadErr  error
}

// fileLineage is what a data file's null lineage values inherit (the
// spec's First Row ID and Sequence Number Inheritance).
type fileLineage struct {
	firstRowID *int64
	seq        int64
}

// lineageOf returns df's lineage in the rewritten snapshot, reading its
// data manifests once (the writer's own DataFiles lack both: they are
// assigned when a commit writes its manifest list).
func (rw *rewriter) lineageOf(df iceberg.DataFile) (fileLineage, error) {
	rw.loadOnce.Do(func() {
		rw.lineages = map[string]fileLineage{}
		snap := rw.tbl.CurrentSnapshot()
		if snap == nil {
			return
		}
		mfs, err := snap.Manifests(rw.fs)
		if err != nil {
			rw.loadErr = fmt.Errorf("iceberg: read manifest list: %w", err)
			return
		}
		for _, mf := range mfs {
			if mf.ManifestContent() != iceberg.ManifestContentData {
				continue
			}
			for e, err := range mf.Entries(rw.fs, true) {
				if err != nil {
					rw.loadErr = fmt.Errorf("iceberg: read manifest %s: %w", mf.FilePath(), err)
					return
				}
				rw.lineages[e.DataFile().FilePath()] = fileLineage{firstRowID: e.DataFile().FirstRowID(), seq: e.SequenceNum()}
			}
		}
	})
	if rw.loadErr != nil {
		return fileLineage{}, rw.loadErr
	}
	l, ok := rw.lineages[df.FilePath()]
	if !ok || l.firstRowID == nil {
		return fileLineage{}, fmt.Errorf("iceberg: %s has no row lineage in snapshot %d: its rows would get new row ids", df.FilePath(), rw.tbl.CurrentSnapshot().SnapshotID)
	}
	return l, nil
}

func (rw *rewriter) Open(df iceberg.DataFile) (compactor.Rows, error) {
	pf, closeFile, err := parquetFile(rw.fs, df.FilePath())
	if err != nil {
		return nil, err
	}
	rows, err := newRowReader(pf, rw.fields)
	if err != nil {
		closeFile()
		return nil, err
	}
	sr := &sortedRows{rows: rows, closeFile: closeFile, keys: rw.keys, keyIdx: rw.keyIdx,
		vals: make([]any, len(rw.fields)), kv: make([]any, len(rw.keys))}
	if rw.lineage {
		l, err := rw.lineageOf(df)
		if err != nil {
			sr.Close()
			return nil, err
		}
		sr.lineage = &l
	}
	return sr, nil
}

func (rw *rewriter) Create(name string, first []any) (compactor.FileWriter, error) {
	values, _, err := rw.part.partition(first)
	if err != nil {
		return nil, err
	}
	if rw.part.partitioned() {
		name = rw.part.path(values) + "/" + name
	}
	path := rw.lp.NewDataLocation(name)
	d, err := streamDataFile(rw.fsch, rw.wfs, path)
	if err != nil {
		return nil, err
	}
	return &newDataFile{rw: rw, d: d, path: path, values: values}, nil
}

// sortedRows streams a data file's rows (sorted by key) with their keys
// encoded (encodeKey). Row and Key are reused from row to row.
type sortedRows struct {
	rows      *rowReader
	closeFile func()
	keys      []iceberg.NestedField
	keyIdx    []int
	pos       int64
	vals, kv  []any
	key       []byte
	// lineage, when set, fills the last two of vals (_row_id,
	// _last_updated_sequence_number) where the file holds null.
	lineage *fileLineage
}

func (r *sortedRows) Next() (bool, error) {
	pos, ok, err := r.rows.next(r.vals)
	if err != nil || !ok {
		return false, err
	}
	r.pos = pos
	if l := r.lineage; l != nil {
		n := len(r.vals)
		if r.vals[n-2] == nil {
			r.vals[n-2] = *l.firstRowID + pos
		}
		if r.vals[n-1] == nil {
			r.vals[n-1] = l.seq
		}
	}
	for i, fi := range r.keyIdx {
		v, err := keyValue(r.keys[i].Type, r.vals[fi])
		if err != nil {
			return false, err
		}
		r.kv[i] = v
	}
	r.key, err = encodeKey(r.key[:0], r.kv)
	return err == nil, err
}

func (r *sortedRows) Pos() int64  { return r.pos }
func (r *sortedRows) Row() []any  { return r.vals }
func (r *sortedRows) Key() []byte { return r.key }

func (r *sortedRows) Close() {
	if r.closeFile != nil {
		r.rows.close()
		r.closeFile()
		r.closeFile = nil
	}
}

// newDataFile is a rewrite's file being written.
type newDataFile struct {
	rw     *rewriter
	d      *dataFileWriter
	path   string
	values map[int]any
}

func (f *newDataFile) Add(row []any) error { return f.d.add(row) }
func (f *newDataFile) Size() int           { return f.d.size() }
func (f *newDataFile) Abort()              { f.d.abort(f.rw.wfs) }

func (f *newDataFile) Finish() (iceberg.DataFile, error) {
	return f.d.finish(f.rw.wfs, f.path, f.rw.tbl, f.values)
}
