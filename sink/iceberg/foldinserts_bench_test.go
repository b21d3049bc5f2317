package iceberg

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/log"
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

// BenchmarkFoldByKey folds a stream's commit: 35,000 updates of bigint keys
// spread over a million, decoded as the fetcher decodes them, each in the
// partition its key is placed in, in fetches of a partition. Per change.
func BenchmarkFoldByKey(b *testing.B) {
	const rows, parts, id = 35000, 8, 7
	w := &tableWriter{cfg: TableConfig{Topic: "t"}, partitions: parts, tables: map[uint32]*schema.Table{id: kv}}
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	rng := rand.New(rand.NewPCG(7, 8))
	perPart := make([][]change, parts)
	for i := range rows {
		key := rng.Int64N(1_000_000)
		env := &schema.Envelope{Op: 'u', Before: []any{key, nil, nil}, After: []any{key, fmt.Sprint(i), int64(i)}}
		env.Source.Position = fmt.Appendf(nil, "%012d", i)
		v, err := schema.AppendEnvelope(schema.AppendFrame(nil, id), kv, env)
		if err != nil {
			b.Fatal(err)
		}
		k, _ := schema.AppendKey(schema.AppendFrame(nil, id), kv, env.After)
		p := log.PartitionFor(k[5:], parts)
		c, err := w.decode(&log.Record{Key: k, Value: v, Partition: p, Offset: int64(len(perPart[p]))})
		if err != nil {
			b.Fatal(err)
		}
		perPart[p] = append(perPart[p], c)
	}
	buf := make([]change, 0, rows)
	for len(buf) < rows { // fetches of up to 500 changes of a partition, in turn
		for p := range perPart {
			n := min(500, len(perPart[p]))
			buf, perPart[p] = append(buf, perPart[p][:n]...), perPart[p][n:]
		}
	}
	for b.Loop() {
		if _, _, ok, err := u.foldByKey(buf); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rows, "ns/row")
}
