package iceberg

import (
	"context"
	"fmt"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
	"github.com/parquet-go/parquet-go"
)

// LiveSnapshot is an upsert table's current snapshot as a reader outside
// the sink sees it (cdcd reconcile): its rows, and the log offsets they
// reflect.
type LiveSnapshot struct {
	// ID is the snapshot's id (0: the table has none).
	ID int64
	// Offsets are the next log offsets per partition of the newest snapshot
	// in its ancestry that records them (nil: none does), TopicID the
	// topic incarnation they belong to.
	Offsets []int64
	TopicID string
	// Fields are the table's columns.
	Fields []iceberg.NestedField
	// Rows is how many live rows the snapshot holds: its data files'
	// record counts less their deleted positions.
	Rows int64

	fs      icebergio.IO
	files   []string
	deleted map[string]*dv.RoaringPositionBitmap
}

// ReadLive reads tbl's current snapshot: its live data files, their
// deleted positions, and the offsets (of a topic with partitions
// partitions). The files are read by Scan.
func ReadLive(ctx context.Context, tbl *table.Table, partitions int) (*LiveSnapshot, error) {
	s := &LiveSnapshot{Fields: tbl.Schema().Fields()}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return s, nil
	}
	s.ID = snap.SnapshotID
	for at := snap; at != nil; {
		if at.Summary != nil {
			if off, ok := at.Summary.Properties[PropOffsets]; ok {
				next, err := decodeOffsets(off, partitions)
				if err != nil {
					return nil, err
				}
				s.Offsets, s.TopicID = next, at.Summary.Properties[PropTopicID]
				break
			}
		}
		if at.ParentSnapshotID == nil {
			break
		}
		at = tbl.Metadata().SnapshotByID(*at.ParentSnapshotID)
	}
	u := &upsert{}
	if err := u.loadFiles(ctx, tbl); err != nil {
		return nil, err
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	s.fs = fs
	if s.deleted, err = u.deletedPositions(ctx, fs, tbl); err != nil {
		return nil, err
	}
	for path, df := range u.data {
		s.files = append(s.files, path)
		s.Rows += df.Count()
		if gone := s.deleted[path]; gone != nil {
			s.Rows -= gone.Cardinality()
		}
	}
	return s, nil
}

// Files is how many live data files the snapshot has.
func (s *LiveSnapshot) Files() int { return len(s.files) }

// Scan calls fn with the values of the fields at idx (indexes into
// Fields, in cdcd's Go representation) of every live row, file by file;
// vals is reused between calls.
func (s *LiveSnapshot) Scan(ctx context.Context, idx []int, fn func(vals []any) error) error {
	return s.eachFile(ctx, idx, func(pf *parquet.File, fields []iceberg.NestedField, live func(int64) bool) error {
		return readColumns(pf, fields, func(pos int64, vals []any) error {
			if !live(pos) {
				return nil
			}
			return fn(vals)
		})
	})
}

// ScanRaw is Scan without building Go values, for a reader that renders
// each value itself (cdcd reconcile hashes millions of rows; boxing every
// value into an any and converting decimals through big.Int cost more
// than reading the pages): raw gets each live row's values as the data
// file stores them (Value converts one as Scan would), valid only until
// it returns, as the page they point into is released after. A file in
// which some field is a list or is missing (it predates the field) is
// read through Scan's conversion instead, its rows given to boxed.
func (s *LiveSnapshot) ScanRaw(ctx context.Context, idx []int, raw func(vals []parquet.Value) error, boxed func(vals []any) error) error {
	return s.eachFile(ctx, idx, func(pf *parquet.File, fields []iceberg.NestedField, live func(int64) bool) error {
		if !flatColumns(pf, fields) {
			return readColumns(pf, fields, func(pos int64, vals []any) error {
				if !live(pos) {
					return nil
				}
				return boxed(vals)
			})
		}
		return readRaw(pf, fields, func(pos int64, vals []parquet.Value) error {
			if !live(pos) {
				return nil
			}
			return raw(vals)
		})
	})
}

// eachFile opens each live data file in turn and calls read with it, the
// fields at idx, and whether a row position is live.
func (s *LiveSnapshot) eachFile(ctx context.Context, idx []int, read func(pf *parquet.File, fields []iceberg.NestedField, live func(int64) bool) error) error {
	fields := make([]iceberg.NestedField, len(idx))
	for i, j := range idx {
		fields[i] = s.Fields[j]
	}
	for _, path := range s.files {
		if err := ctx.Err(); err != nil {
			return err
		}
		pf, closeFn, err := parquetFile(s.fs, path)
		if err != nil {
			return err
		}
		gone := s.deleted[path]
		err = read(pf, fields, func(pos int64) bool { return gone == nil || !gone.Contains(uint64(pos)) })
		closeFn()
		if err != nil {
			return fmt.Errorf("iceberg: read %s: %w", path, err)
		}
	}
	return nil
}

// Value converts a value of a field of type typ, as a data file stores
// it, to cdcd's Go representation (what Scan gives).
func Value(typ iceberg.Type, v parquet.Value) any { return fromParquet(typ, v) }
