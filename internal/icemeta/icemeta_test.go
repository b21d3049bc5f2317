package icemeta

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// TestSnapshotIDs: the ids and count read in place are those of
// Snapshots(), in its order, for metadata iceberg-go built (read in place:
// a renamed field in a newer iceberg-go fails here rather than making
// every commit slow again), for metadata it parsed, after snapshots are
// removed, and for a table without snapshots.
func TestSnapshotIDs(t *testing.T) {
	sc := iceberg.NewSchema(0, iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	for _, version := range []string{"2", "3"} {
		meta, err := table.NewMetadata(sc, iceberg.UnpartitionedSpec, table.UnsortedSortOrder, "file:///x", iceberg.Properties{"format-version": version})
		if err != nil {
			t.Fatal(err)
		}
		check := func(what string, meta table.Metadata, wantFast bool) {
			t.Helper()
			want := fromCopies(meta)
			got, fast := snapshotIDs(meta)
			if !slices.Equal(got, want) || SnapshotCount(meta) != len(want) || !slices.Equal(SnapshotIDs(meta), want) {
				t.Fatalf("v%s %s: ids %v, count %d; want %v", version, what, got, SnapshotCount(meta), want)
			}
			if wantFast && !fast {
				t.Fatalf("v%s %s: the ids were not read in place", version, what)
			}
		}
		check("empty", meta, true)
		var parent *int64
		for i := range 6 {
			id := int64(1000 - i*7) // not sorted: the order is the list's
			first, added := int64(i*10), int64(10)
			s := table.Snapshot{SnapshotID: id, ParentSnapshotID: parent, SequenceNumber: int64(i + 1), TimestampMs: meta.LastUpdatedMillis() + 1,
				ManifestList: "file:///x/m", Summary: &table.Summary{Operation: table.OpAppend, Properties: map[string]string{"k": "v"}}}
			if version == "3" {
				s.FirstRowID, s.AddedRows = &first, &added
			}
			if meta, err = table.UpdateTableMetadata(meta, []table.Update{table.NewAddSnapshotUpdate(&s),
				table.NewSetSnapshotRefUpdate(table.MainBranch, id, table.BranchRef, -1, -1, -1)}, ""); err != nil {
				t.Fatal(err)
			}
			p := id
			parent = &p
		}
		check("built", meta, true)
		removed, err := table.UpdateTableMetadata(meta, []table.Update{table.NewRemoveSnapshotsUpdate([]int64{1000, 993}, false)}, "")
		if err != nil {
			t.Fatal(err)
		}
		check("after a removal", removed, true)
		if got := SnapshotIDs(removed); !slices.Equal(got, []int64{986, 979, 972, 965}) {
			t.Fatalf("v%s after a removal: %v", version, got)
		}
		raw, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := table.ParseMetadataBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		check("parsed", parsed, false)
	}
}
