// Package icebergcheck holds the checks tests make of a table's metadata,
// read on their own from its manifests (not through the sink's code).
package icebergcheck

import (
	"context"
	"fmt"
	"sort"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// FileProblems lists what is wrong with the live files of tbl's current
// snapshot: a data file listed more than once, a data file with more than
// one live deletion vector (which makes the table unreadable: iceberg-go
// issue 1868), a deletion vector for a file that is not live. A table
// without a snapshot has none.
func FileProblems(ctx context.Context, tbl *table.Table) ([]string, error) {
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return nil, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	mfs, err := snap.Manifests(fs)
	if err != nil {
		return nil, err
	}
	data, dvs := map[string]int{}, map[string]int{}
	for _, mf := range mfs {
		for e, err := range mf.Entries(fs, true) {
			if err != nil {
				return nil, err
			}
			df := e.DataFile()
			switch {
			case df.ContentType() == iceberg.EntryContentData:
				data[df.FilePath()]++
			case table.IsDeletionVector(df) && df.ReferencedDataFile() != nil:
				dvs[*df.ReferencedDataFile()]++
			}
		}
	}
	var out []string
	for f, n := range data {
		if n > 1 {
			out = append(out, fmt.Sprintf("data file %s is live %d times", f, n))
		}
	}
	for f, n := range dvs {
		if n > 1 {
			out = append(out, fmt.Sprintf("data file %s has %d live deletion vectors", f, n))
		}
		if data[f] == 0 {
			out = append(out, fmt.Sprintf("a live deletion vector references %s, which is not a live data file", f))
		}
	}
	sort.Strings(out)
	return out, nil
}
