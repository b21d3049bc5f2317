package iceberg

import "testing"

// TestFetcherRecyclesChangeSlices: a batch's change slice handed back
// (recycle) is the next batch's, emptied and cleared, so that it pins no
// read buffer; the fetcher keeps at most four.
func TestFetcherRecyclesChangeSlices(t *testing.T) {
	f := newFetcher(&tableWriter{}, []int64{0})
	if f.changes() != nil {
		t.Fatal("a new fetcher handed out a change slice")
	}
	slices := make([][]change, 5)
	for i := range slices {
		slices[i] = make([]change, 3, 8)
		slices[i][0].body = []byte("a record's bytes")
		f.recycle(slices[i])
	}
	for i := range 4 {
		got := f.changes()
		if len(got) != 0 || cap(got) != 8 || &got[:1][0] != &slices[i][0] {
			t.Fatalf("batch %d: a slice of len %d cap %d, not the recycled one", i, len(got), cap(got))
		}
		if got[:1][0].body != nil {
			t.Fatalf("batch %d: the recycled slice still refers to a record", i)
		}
	}
	if got := f.changes(); got != nil {
		t.Fatalf("a fifth slice was kept (cap %d)", cap(got))
	}
}
