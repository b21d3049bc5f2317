package daemon

import (
	"strconv"
	"testing"

	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	dto "github.com/prometheus/client_model/go"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestSamplerReadsTheSinksTable: the commit histograms come from the table
// the sink's last commit left (TableStats.Current), not from the catalog
// (the daemon here has none: a load would panic): the first look takes the
// history as seen, the next observes every commit since (maintenance
// snapshots, without a commit id, skipped), and a look with no new commit
// observes nothing.
func TestSamplerReadsTheSinksTable(t *testing.T) {
	sc := iceberggo.NewSchema(0, iceberggo.NestedField{ID: 1, Name: "id", Type: iceberggo.PrimitiveTypes.Int64, Required: true})
	meta, err := table.NewMetadata(sc, iceberggo.UnpartitionedSpec, table.UnsortedSortOrder, "file:///nowhere", iceberggo.Properties{"format-version": "2"})
	if err != nil {
		t.Fatal(err)
	}
	ident := table.Identifier{"ns", "t"}
	var parent *int64
	seq := int64(0)
	add := func(id int64, commit bool, files int) *table.Table {
		t.Helper()
		props := iceberggo.Properties{"added-data-files": strconv.Itoa(files), "added-delete-files": "1",
			"added-files-size": "100", "added-records": "10", "added-position-deletes": "0"}
		if commit {
			props[iceberg.PropCommitID] = "c" + strconv.FormatInt(id, 10)
		}
		seq++
		snap := table.Snapshot{SnapshotID: id, ParentSnapshotID: parent, SequenceNumber: seq, TimestampMs: meta.LastUpdatedMillis() + 1,
			ManifestList: "file:///nowhere/m" + strconv.FormatInt(id, 10), Summary: &table.Summary{Operation: table.OpAppend, Properties: props}}
		meta, err = table.UpdateTableMetadata(meta, []table.Update{table.NewAddSnapshotUpdate(&snap),
			table.NewSetSnapshotRefUpdate(table.MainBranch, id, table.BranchRef, -1, -1, -1)}, "")
		if err != nil {
			t.Fatal(err)
		}
		p := id
		parent = &p
		return table.New(ident, meta, "file:///nowhere/v.metadata.json", nil, nil)
	}
	d := &Daemon{idents: map[string]table.Identifier{"topic": ident}}
	s := newSampler(d)
	ts := &iceberg.TableStats{Topic: "topic", Table: "ns.t"}
	files := func() (uint64, float64) {
		m := &dto.Metric{}
		if err := s.files.WithLabelValues("ns.t").(interface{ Write(*dto.Metric) error }).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}

	ts.Current.Store(add(1, true, 1))
	ts.Commits.Store(1)
	s.sample(t.Context(), ts)
	if n, _ := files(); n != 0 {
		t.Fatalf("the first look observed %d commits; what is there is history", n)
	}
	add(2, true, 2)
	add(3, false, 50) // maintenance
	ts.Current.Store(add(4, true, 3))
	ts.Commits.Store(3)
	s.sample(t.Context(), ts)
	if n, sum := files(); n != 2 || sum != (2+1)+(3+1) {
		t.Fatalf("observed %d commits adding %v files, want 2 adding 7", n, sum)
	}
	s.sample(t.Context(), ts)
	if n, _ := files(); n != 2 {
		t.Fatalf("a look without a new commit observed %d commits in all, want 2", n)
	}
}
