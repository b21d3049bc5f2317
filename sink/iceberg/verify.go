package iceberg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/apache/iceberg-go/table"
)

// IndexCheck is what VerifyIndex found.
type IndexCheck struct {
	Table         string
	IndexSnapshot int64 // the snapshot the index is tagged with
	TableSnapshot int64 // the table's current snapshot
	LiveRows      int64 // rows of the table not deleted
	IndexKeys     int64 // keys the index holds
	// Problems lists the disagreements, at most maxIndexProblems of them,
	// then how many more; empty when the index is right.
	Problems []string
}

const maxIndexProblems = 20

// VerifyIndex checks an upsert table's key index (under indexDir, as the
// sink keeps it) against the table read afresh: every live row's key maps
// to that row's data file and position (so no key is live twice), the
// index holds no other key, and it is tagged with the current snapshot or one
// that only row-neutral snapshots followed. The sink must not be running on
// the table (the index is locked while it is). The index's contents are not
// changed (pebble itself may write its own files on open).
func VerifyIndex(ctx context.Context, tbl *table.Table, indexDir string) (*IndexCheck, error) {
	name := identString(tbl.Identifier())
	dir := filepath.Join(indexDir, name)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("iceberg: key index of %s: %w", name, err)
	}
	idx, err := openIndex(dir, indexOptions{})
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return nil, fmt.Errorf("iceberg: the key index of %s is locked by a running cdcd: stop the daemon first (%w)", name, err)
	}
	if err != nil {
		return nil, err
	}
	defer idx.close()
	chk := &IndexCheck{Table: name, IndexSnapshot: idx.snapshot}
	more := 0
	problem := func(format string, args ...any) {
		if len(chk.Problems) < maxIndexProblems {
			chk.Problems = append(chk.Problems, fmt.Sprintf(format, args...))
		} else {
			more++
		}
	}
	if s := tbl.CurrentSnapshot(); s != nil {
		chk.TableSnapshot = s.SnapshotID
	}
	if idx.snapshot != chk.TableSnapshot && !rowNeutralSince(tbl, idx.snapshot) {
		problem("the index is tagged with snapshot %d; the table, at %d, changed rows since (the sink rebuilds such an index when it starts)",
			idx.snapshot, chk.TableSnapshot)
	}
	if chk.TableSnapshot != 0 {
		u := &upsert{}
		if u.keys, err = keyFields(tbl.Schema()); err != nil {
			return nil, err
		}
		if err := u.loadFiles(ctx, tbl); err != nil {
			return nil, err
		}
		// A key live twice shows as one of its rows not where the index
		// points.
		err = u.liveKeys(ctx, tbl, func(k []byte, at location) error {
			chk.LiveRows++
			loc, ok, err := idx.get(k)
			switch {
			case err != nil:
				return err
			case !ok:
				problem("key %x (%s@%d) is not in the index", k, at.file, at.pos)
			case loc != at:
				problem("key %x is at %s@%d; the index says %s@%d", k, at.file, at.pos, loc.file, loc.pos)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	it, err := idx.db.NewIter(nil)
	if err != nil {
		return nil, err
	}
	for it.First(); it.Valid(); it.Next() {
		if k := it.Key(); len(k) > 0 && k[0] == idxPrefixKey {
			chk.IndexKeys++
		}
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	if chk.IndexKeys != chk.LiveRows {
		problem("the index holds %d keys for %d live rows", chk.IndexKeys, chk.LiveRows)
	}
	if more > 0 {
		chk.Problems = append(chk.Problems, fmt.Sprintf("and %d more", more))
	}
	return chk, nil
}
