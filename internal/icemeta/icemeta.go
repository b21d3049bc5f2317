// Package icemeta reads what a commit needs of an Iceberg table's
// metadata without the copies iceberg-go's accessors make.
//
// iceberg-go's Metadata.Snapshots() returns a deep copy of every snapshot
// (each summary's map cloned); the sink asked for it at every commit only
// to count the snapshots or to list their ids, and at the thousands of
// snapshots a table keeps at the default retention (every snapshot younger
// than an hour: 3,600 at a 1 s commit interval) those copies were a sixth
// of the commits' CPU (TestCommitCurve's profile, BENCHMARKS.md
// "metadata.json without every snapshot encoded again"). The metadata
// iceberg-go builds (every commit's) holds its snapshots in a slice that
// reflect reads in place; metadata it parsed lazily, or of a shape this
// package does not know, goes through Snapshots() as before.
package icemeta

import (
	"reflect"

	"github.com/apache/iceberg-go/table"
)

// SnapshotIDs returns the ids of meta's snapshots, in its order.
func SnapshotIDs(meta table.Metadata) []int64 {
	ids, _ := snapshotIDs(meta)
	return ids
}

// SnapshotCount returns how many snapshots meta holds.
func SnapshotCount(meta table.Metadata) int {
	if l, ok := snapshotList(meta); ok {
		return l.Len()
	}
	return len(meta.Snapshots())
}

// snapshotIDs is SnapshotIDs; fast says it read them in place.
func snapshotIDs(meta table.Metadata) (ids []int64, fast bool) {
	if l, ok := snapshotList(meta); ok {
		ids = make([]int64, l.Len())
		for i := range ids {
			id := l.Index(i).FieldByName("SnapshotID")
			if id.Kind() != reflect.Int64 {
				return fromCopies(meta), false
			}
			ids[i] = id.Int()
		}
		return ids, true
	}
	return fromCopies(meta), false
}

func fromCopies(meta table.Metadata) []int64 {
	snaps := meta.Snapshots()
	ids := make([]int64, len(snaps))
	for i, s := range snaps {
		ids[i] = s.SnapshotID
	}
	return ids
}

// snapshotList is meta's own slice of snapshots (iceberg-go's
// commonMetadata.SnapshotList), when meta holds them all there: not while
// it defers parsing them (deferredSnapshots set).
func snapshotList(meta table.Metadata) (reflect.Value, bool) {
	v := reflect.ValueOf(meta)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	s := v.Elem()
	l := s.FieldByName("SnapshotList")
	if l.Kind() != reflect.Slice || l.Type().Elem() != reflect.TypeFor[table.Snapshot]() {
		return reflect.Value{}, false
	}
	d := s.FieldByName("deferredSnapshots")
	if !d.IsValid() || d.Kind() != reflect.Pointer || !d.IsNil() {
		return reflect.Value{}, false
	}
	return l, true
}
