package iceberg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// TestReadRawMatchesColumns: readRaw, which takes the rows every column
// has buffered at once, gives each row's values, at its position, as
// readColumns converts them, over a file of two row groups whose columns'
// pages end at different rows, with NULLs.
func TestReadRawMatchesColumns(t *testing.T) {
	const n = rowGroupRows + 20_000
	sc, err := upsertSchema(benchTable)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := newFileSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	d := newDataFileWriter(fs)
	for i := range n {
		row := benchRow(int64(i), rng)
		for c := 1; c < len(row); c++ {
			if (i+c)%(5+c) == 0 {
				row[c] = nil
			}
		}
		if err := d.add(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.writePending(); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	data := d.buf.Bytes()
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(pf.RowGroups()) < 2 {
		t.Fatalf("%d row groups, want 2 or more", len(pf.RowGroups()))
	}
	fields := sc.Fields()
	var want []string
	if err := readColumns(pf, fields, func(pos int64, vals []any) error {
		want = append(want, fmt.Sprintf("%d %v", pos, vals))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := 0
	conv := make([]any, len(fields))
	if err := readRaw(pf, fields, func(pos int64, vals []parquet.Value) error {
		for i, v := range vals {
			conv[i] = fromParquet(fields[i].Type, v)
		}
		if s := fmt.Sprintf("%d %v", pos, conv); got >= len(want) || s != want[got] {
			return fmt.Errorf("row %d: readRaw %s, readColumns %s", got, s, want[min(got, len(want)-1)])
		}
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != n || len(want) != n {
		t.Errorf("readRaw %d rows, readColumns %d, want %d", got, len(want), n)
	}
}
