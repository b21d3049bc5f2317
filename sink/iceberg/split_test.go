package iceberg

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestSplitScan: a data file of several row groups carries their offsets as
// split offsets, the tables cdcd creates set read.split.target-size, and
// iceberg-go's scan then reads one file as several ranges — each row once,
// deletion vectors applied by the file's own row positions.
func TestSplitScan(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.s.cfg.TargetFileSize = 1 << 30
	defer func(n int) { writePartRows = n }(writePartRows)
	writePartRows = 1 << 30 // one file of several row groups, not key ranges in files of their own
	const n = 3*rowGroupRows - 1000
	want := model{}
	var buf []change
	for i := int64(0); i < n; i++ {
		c := change{table: kv, env: &schema.Envelope{Op: 'c', After: []any{i, "v", i % 1000}}}
		buf = append(buf, c)
		want.apply(c)
	}
	commit := func(buf []change) {
		t.Helper()
		for j := range buf {
			buf[j].env.Source.Position = []byte(fmt.Sprintf("%012d%08d", w.next[0], j))
			buf[j] = encoded(buf[j])
		}
		w.buf = buf
		w.next[0]++
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	commit(buf)
	if got := w.tbl.Properties()[table.ReadSplitTargetSizeKey]; got != fmt.Sprint(readSplitTargetSize) {
		t.Errorf("%s = %q, want %d", table.ReadSplitTargetSizeKey, got, readSplitTargetSize)
	}
	if len(w.up.data) != 1 {
		t.Fatalf("%d data files, want 1", len(w.up.data))
	}
	for _, df := range w.up.data {
		if got := len(df.SplitOffsets()); got != 3 {
			t.Errorf("%d split offsets (%v), want one per row group: 3", got, df.SplitOffsets())
		}
	}
	// Deletes and updates in every row group: a deletion vector on the file.
	buf = nil
	for i := int64(5); i < n; i += 997 {
		c := change{table: kv, env: &schema.Envelope{Op: 'd', Before: []any{i, nil, nil}}}
		if i%2 == 0 {
			c = change{table: kv, env: &schema.Envelope{Op: 'u', After: []any{i, "u", int64(-1)}, Before: []any{i, nil, nil}}}
		}
		buf = append(buf, c)
		want.apply(c)
	}
	commit(buf)
	// A split size below the row groups': three ranges of the large file.
	tx := w.tbl.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{table.ReadSplitTargetSizeKey: "1"}); err != nil {
		t.Fatal(err)
	}
	tbl, err := tx.Commit(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) != 4 { // the large file in three ranges, the updates' file whole
		t.Errorf("%d scan tasks, want 4", len(tasks))
	}
	got := scanTable(t, cat, w.cfg.Ident)
	if len(got) != len(want) {
		t.Errorf("scan: %d rows, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("row %d = %q, want %q", k, got[k], v)
			break
		}
	}
	w.close()
}
