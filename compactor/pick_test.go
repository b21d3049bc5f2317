package compactor

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
)

func testDataFile(t *testing.T, path string, rows, size int64) iceberg.DataFile {
	t.Helper()
	b, err := iceberg.NewDataFileBuilder(*iceberg.UnpartitionedSpec, iceberg.EntryContentData, path, iceberg.ParquetFile,
		map[int]any{}, nil, nil, rows, size)
	if err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// pickAll is pick without a cap on the files merged at once.
func pickAll(cands []File, cc CompactionConfig, force bool) []iceberg.DataFile {
	picked, _ := pick(cands, cc, force, 1<<20)
	return picked
}

func TestPick(t *testing.T) {
	const mb = 1 << 20
	cc := CompactionConfig{}.WithDefaults()
	cc.MaxBytes = 100 * mb
	paths := func(files []iceberg.DataFile) []string {
		var out []string
		for _, f := range files {
			out = append(out, f.FilePath())
		}
		return out
	}

	// A large small file that sorts first by path, and six fresh little
	// ones: the cycle merges the little ones, not the large one again.
	cands := []File{{DataFile: testDataFile(t, "a-large", 1000, 90*mb)}}
	for i := range 6 {
		cands = append(cands, File{DataFile: testDataFile(t, fmt.Sprintf("b-%d", i), 10, int64(i+1)*mb)})
	}
	cands = append(cands, File{DataFile: testDataFile(t, "c-full", 1000, 120*mb)}) // not small
	got := paths(pickAll(cands, cc, false))
	want := []string{"b-0", "b-1", "b-2", "b-3", "b-4", "b-5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("picked %v, want %v", got, want)
	}

	// Tiers: a file grown by merging waits until files of its own size
	// (within twice the mean of its bucket) number MinGroup.
	tier := func(sizes ...int64) []File {
		var out []File
		for i, sz := range sizes {
			out = append(out, File{DataFile: testDataFile(t, fmt.Sprintf("t-%02d", i), 10, sz*mb)})
		}
		return out
	}
	if got := paths(pickAll(tier(1, 1, 1, 1, 30), cc, false)); len(got) != 0 {
		t.Errorf("picked %v: four new files and one 30 MB file must wait", got)
	}
	if got := paths(pickAll(tier(1, 1, 1, 1, 1, 30), cc, false)); fmt.Sprint(got) != "[t-00 t-01 t-02 t-03 t-04]" {
		t.Errorf("picked %v, want the five 1 MB files", got)
	}
	if got := paths(pickAll(tier(1, 1, 1, 1, 1, 3, 30), cc, false)); fmt.Sprint(got) != "[t-00 t-01 t-02 t-03 t-04]" {
		t.Errorf("picked %v, want the 1 MB files without the 3 MB one", got)
	}
	if got := paths(pickAll(tier(1, 1, 1, 1, 2, 30), cc, false)); fmt.Sprint(got) != "[t-00 t-01 t-02 t-03 t-04]" {
		t.Errorf("picked %v, want the 1 MB files with the 2 MB one", got)
	}
	if got := paths(pickAll(tier(1, 1, 5, 5, 5, 6, 9, 30), cc, false)); fmt.Sprint(got) != "[t-02 t-03 t-04 t-05 t-06]" {
		t.Errorf("picked %v, want the 5-9 MB tier (the 1 MB one has two files)", got)
	}
	if got := paths(pickAll(tier(1, 1, 1, 1, 1, 1, 5, 5, 5, 5, 6, 30), cc, false)); fmt.Sprint(got) != "[t-06 t-07 t-08 t-09 t-10]" {
		t.Errorf("picked %v, want the 5-6 MB tier before the fresh files (which qualify every cycle)", got)
	}
	if got := paths(pickAll(tier(1, 3, 7, 15, 31, 63), cc, false)); len(got) != 0 {
		t.Errorf("picked %v from files each more than twice the ones before", got)
	}
	// Forced (cdcd compact): every small file, whatever its tier.
	if got := paths(pickAll(tier(1, 3, 7, 15, 31, 40, 120), cc, true)); fmt.Sprint(got) != "[t-00 t-01 t-02 t-03 t-04 t-05]" {
		t.Errorf("forced, picked %v, want every small file (97 MB, under the byte cap)", got)
	}
	if got := paths(pickAll(tier(1, 120), cc, true)); len(got) != 0 {
		t.Errorf("forced, picked %v: a single small file without deletes is left alone", got)
	}

	// Rows: narrow rows compress so well that the bytes say little. A file
	// over half the row cap is not small (no two would fit), and a tier is
	// cut at the cap.
	rowsCC := cc
	rowsCC.MaxRows = 1000
	byRows := []File{{DataFile: testDataFile(t, "r-big", 600, mb)}}
	for i := range 6 {
		byRows = append(byRows, File{DataFile: testDataFile(t, fmt.Sprintf("r-%d", i), 300, mb)})
	}
	if got := paths(pickAll(byRows, rowsCC, false)); fmt.Sprint(got) != "[r-0 r-1 r-2]" {
		t.Errorf("picked %v, want three 300-row files (900 rows, under the 1,000-row cap) and not the 600-row one", got)
	}
	if isSmall(byRows[0].DataFile, rowsCC) || !isSmall(byRows[1].DataFile, rowsCC) {
		t.Errorf("a 600-row file counts as small under a 1,000-row cap, or a 300-row one does not")
	}
	// Likewise by bytes: a file over half the byte cap is not small even
	// under SmallFileRatio of the target.
	if isSmall(testDataFile(t, "b", 10, 60*mb), cc) {
		t.Errorf("a 60 MB file counts as small under a 100 MB cap")
	}

	// Fewer small files than MinGroup: nothing, unless a delete-heavy file
	// is due, which goes first and takes the small ones along.
	few := []File{{DataFile: testDataFile(t, "s1", 10, mb)}, {DataFile: testDataFile(t, "s2", 10, 2*mb)}, cands[7]}
	if got := pickAll(few, cc, false); len(got) != 0 {
		t.Errorf("picked %v from %d small files (min group %d)", paths(got), 2, cc.MinGroup)
	}
	few[2].Deleted = 400 // 40% of c-full
	got = paths(pickAll(few, cc, false))
	if fmt.Sprint(got) != "[c-full]" {
		t.Errorf("picked %v, want the delete-heavy file alone (the small ones would pass the byte cap)", got)
	}
	cc.MaxBytes = 200 * mb
	got = paths(pickAll(few, cc, false))
	if fmt.Sprint(got) != "[c-full s1 s2]" {
		t.Errorf("picked %v, want [c-full s1 s2]", got)
	}
}

// TestPickMergeFiles: a merge reads at most mergeFiles files at once (their
// pages would not fit its memory), says it left files for the next one,
// and the cap follows the table's columns, never below MinGroup.
func TestPickMergeFiles(t *testing.T) {
	cc := CompactionConfig{}.WithDefaults()
	var fresh []File
	for i := range 100 {
		fresh = append(fresh, File{DataFile: testDataFile(t, fmt.Sprintf("f-%03d", i), 10_000, 1<<20)})
	}
	picked, capped := pick(fresh, cc, false, 16)
	if len(picked) != 16 || !capped {
		t.Errorf("100 fresh files, at most 16 at once: picked %d, capped %v; want 16, true", len(picked), capped)
	}
	if picked, capped := pick(fresh[:10], cc, false, 16); len(picked) != 10 || capped {
		t.Errorf("10 fresh files, at most 16 at once: picked %d, capped %v; want 10, false", len(picked), capped)
	}
	if picked, capped := pick(fresh, cc, true, 16); len(picked) != 16 || !capped {
		t.Errorf("forced: picked %d, capped %v; want 16, true", len(picked), capped)
	}

	schema := func(n int) *iceberg.Schema {
		var fields []iceberg.NestedField
		for i := range n {
			fields = append(fields, iceberg.NestedField{ID: i + 1, Name: fmt.Sprintf("c%d", i), Type: iceberg.PrimitiveTypes.Int64})
		}
		return iceberg.NewSchema(0, fields...)
	}
	if got := mergeFiles(cc, schema(8)); got != 16 {
		t.Errorf("mergeFiles of 8 columns in %d MiB: %d, want 16", cc.MergeMemory>>20, got)
	}
	if got := mergeFiles(cc, schema(400)); got != cc.MinGroup {
		t.Errorf("mergeFiles of 400 columns: %d, want MinGroup (%d)", got, cc.MinGroup)
	}
	nested := iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64},
		iceberg.NestedField{ID: 2, Name: "tags", Type: &iceberg.ListType{ElementID: 3, Element: iceberg.PrimitiveTypes.String}},
		iceberg.NestedField{ID: 4, Name: "attrs", Type: &iceberg.MapType{KeyID: 5, KeyType: iceberg.PrimitiveTypes.String, ValueID: 6, ValueType: iceberg.PrimitiveTypes.String}},
		iceberg.NestedField{ID: 7, Name: "addr", Type: &iceberg.StructType{FieldList: []iceberg.NestedField{
			{ID: 8, Name: "street", Type: iceberg.PrimitiveTypes.String},
			{ID: 9, Name: "zip", Type: iceberg.PrimitiveTypes.String},
		}}},
	)
	if got := leafColumns(func() *iceberg.StructType { st := nested.AsStruct(); return &st }()); got != 6 {
		t.Errorf("leaf columns of id, list, map, struct of two: %d, want 6", got)
	}
}
