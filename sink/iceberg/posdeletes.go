package iceberg

import (
	"fmt"
	"slices"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
)

// prunePosDeletes (format 2) drops what the live position-delete files say
// about data files a compaction removes: a delete file that names only
// removed files goes (obsoletePosDeletes); one that names remaining files
// too is written again with their entries alone, into p.deletes. It
// returns the delete files the commit must remove. Without it, entries of
// removed files stayed live for as long as their delete file named one
// live file: read by every scan, never applying to anything.
func (w *tableWriter) prunePosDeletes(fs icebergio.IO, wfs icebergio.WriteFileIO, removed, added []iceberg.DataFile, p *plan) ([]iceberg.DataFile, error) {
	u := w.up
	out := u.obsoletePosDeletes(removed, added)
	if len(u.posDeletes) == len(out) {
		return out, nil
	}
	gone := paths(removed)
	slices.Sort(gone)
	pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
	posField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("pos")
	for _, d := range u.posDeletes {
		if slices.ContainsFunc(out, func(o iceberg.DataFile) bool { return o.FilePath() == d.FilePath() }) {
			continue
		}
		lo, okLo := d.LowerBoundValues()[pathField.ID]
		hi, okHi := d.UpperBoundValues()[pathField.ID]
		if i, _ := slices.BinarySearch(gone, string(lo)); okLo && okHi && (i == len(gone) || gone[i] > string(hi)) {
			continue // names no removed file
		}
		kept, dropped, err := readPosDeletes(fs, d, pathField, posField, gone)
		if err != nil {
			return nil, err
		}
		if dropped == 0 {
			continue
		}
		if len(kept) > 0 {
			nd, err := w.writePosDeleteRows(wfs, d.Partition(), kept)
			if err != nil {
				return nil, err
			}
			p.deletes = append(p.deletes, nd)
		}
		out = append(out, d)
	}
	return out, nil
}

// posDelete is one entry of a position-delete file.
type posDelete struct {
	path string
	pos  int64
}

// readPosDeletes returns d's entries that name no file of gone (sorted),
// in file order, and how many it dropped.
func readPosDeletes(fs icebergio.IO, d iceberg.DataFile, pathField, posField iceberg.NestedField, gone []string) ([]posDelete, int, error) {
	pf, closeFn, err := parquetFile(fs, d.FilePath())
	if err != nil {
		return nil, 0, err
	}
	defer closeFn()
	var kept []posDelete
	dropped := 0
	err = readColumns(pf, []iceberg.NestedField{pathField, posField}, func(_ int64, vals []any) error {
		path, _ := vals[0].(string)
		pos, _ := vals[1].(int64)
		if _, found := slices.BinarySearch(gone, path); found {
			dropped++
		} else {
			kept = append(kept, posDelete{path, pos})
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("iceberg: read position deletes %s: %w", d.FilePath(), err)
	}
	return kept, dropped, nil
}

// writePosDeleteRows writes entries (sorted by path and position, as the
// spec requires) into a new position-delete file of partition values.
func (w *tableWriter) writePosDeleteRows(wfs icebergio.WriteFileIO, values map[int]any, entries []posDelete) (iceberg.DataFile, error) {
	tbl := w.tbl
	fsch, err := newFileSchema(iceberg.PositionalDeleteSchema)
	if err != nil {
		return nil, err
	}
	part, err := newPartitioner(tbl.Schema(), tbl.Spec())
	if err != nil {
		return nil, err
	}
	d := newDataFileWriter(fsch)
	var files []string
	for _, e := range entries {
		if err := d.add([]any{e.path, e.pos}); err != nil {
			return nil, err
		}
		if len(files) == 0 || files[len(files)-1] != e.path {
			files = append(files, e.path)
		}
	}
	partPath := ""
	if part.partitioned() {
		partPath = part.path(values)
	}
	path := w.files.data(tbl, partPath, "parquet")
	return d.finishAs(wfs, path, tbl, iceberg.EntryContentPosDeletes, referenced(files), values)
}
