package iceberg

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDataFileAdd measures writing benchmark rows into a Parquet data
// file (the upsert write path without storage): ns and allocations per row.
func BenchmarkDataFileAdd(b *testing.B) {
	sc, err := upsertSchema(benchTable)
	if err != nil {
		b.Fatal(err)
	}
	fs, err := newFileSchema(sc)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]any, 1024)
	for i := range rows {
		rows[i] = benchRow(int64(i), rng)
	}
	b.ReportAllocs()
	d := newDataFileWriter(fs)
	for i := 0; b.Loop(); i++ {
		if err := d.add(rows[i%len(rows)]); err != nil {
			b.Fatal(err)
		}
		if i%100_000 == 99_999 {
			d = newDataFileWriter(fs)
		}
	}
}
