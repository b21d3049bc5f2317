package iceberg

import (
	"fmt"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// BenchmarkFoldInserts folds a load's commit: 35,000 inserts of bigint
// keys decoded as the fetcher decodes them, in 8 ascending runs (fetches
// of 8 partitions, which a load emits in key order). Reported per row.
func BenchmarkFoldInserts(b *testing.B) {
	const rows, parts = 35000, 8
	w := &tableWriter{cfg: TableConfig{Topic: "t"}, partitions: parts, tables: map[uint32]*schema.Table{}}
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	buf := make([]change, 0, rows)
	for p := range parts {
		for i := p; i < rows; i += parts {
			buf = append(buf, decodedInsert(b, w, kv, []any{int64(1_000_000 + i), fmt.Sprint(i), nil}, int32(p), int64(i)))
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if _, ok, err := u.foldInserts(buf); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rows, "ns/row")
}
