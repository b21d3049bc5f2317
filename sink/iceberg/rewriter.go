package iceberg

import (
	"context"
	"errors"

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
	rw.keyIdx = make([]int, len(rw.keys))
	for i, k := range rw.keys {
		for j, f := range rw.fields {
			if f.ID == k.ID {
				rw.keyIdx[i] = j
			}
		}
	}
	if rw.fsch, err = newFileSchema(sc); err != nil {
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
	return &sortedRows{rows: rows, closeFile: closeFile, keys: rw.keys, keyIdx: rw.keyIdx,
		vals: make([]any, len(rw.fields)), kv: make([]any, len(rw.keys))}, nil
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
}

func (r *sortedRows) Next() (bool, error) {
	pos, ok, err := r.rows.next(r.vals)
	if err != nil || !ok {
		return false, err
	}
	r.pos = pos
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
