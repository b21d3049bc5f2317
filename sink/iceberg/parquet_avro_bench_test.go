package iceberg

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// BenchmarkDataFileAvro measures the load's write path without storage:
// benchmark rows' Avro after-images decoded by the table's rowCodec into a
// data file of the format-3 file schema (the row lineage columns NULL, as
// a load's rows have them), closed every fileRows rows as a commit's range
// is. It reports the bytes a row takes in the file (B/row) beside ns and
// allocations a row.
func BenchmarkDataFileAvro(b *testing.B) { benchDataFileAvro(b, newFileSchema) }

// benchRowCodec is the benchmark table's file schema (with row lineage,
// as newFS builds it) and row codec.
func benchRowCodec(b *testing.B, newFS func(*iceberg.Schema) (*fileSchema, error)) (*fileSchema, *rowCodec) {
	b.Helper()
	sc, err := upsertSchema(benchTable)
	if err != nil {
		b.Fatal(err)
	}
	fs, err := newFS(iceberg.SchemaWithRowLineage(sc))
	if err != nil {
		b.Fatal(err)
	}
	codec := newRowCodec(benchTable, fs, nil)
	if codec == nil {
		b.Fatal("no codec for the benchmark table")
	}
	return fs, codec
}

func benchDataFileAvro(b *testing.B, newFS func(*iceberg.Schema) (*fileSchema, error)) {
	const fileRows = 20_000 // about a load commit's range on two cores
	fs, codec := benchRowCodec(b, newFS)
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]byte, fileRows) // no row repeats within a file (Snappy would find it)
	for i := range rows {
		rows[i] = afterImage(b, benchTable, &schema.Envelope{Op: 'r', After: benchRow(int64(i), rng), Source: schema.SourceInfo{Position: []byte("p")}})
	}
	var written, closed int64
	d := newDataFileWriter(fs)
	closeFile := func() {
		if err := d.writePending(); err != nil {
			b.Fatal(err)
		}
		if err := d.close(); err != nil {
			b.Fatal(err)
		}
		written += int64(d.buf.Len())
		closed += d.rows
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := d.addAvro(codec, rows[i%len(rows)]); err != nil {
			b.Fatal(err)
		}
		if d.rows == fileRows {
			closeFile()
			d = newDataFileWriter(fs)
		}
	}
	if d.rows > 0 {
		closeFile()
	}
	if closed > 0 {
		b.ReportMetric(float64(written)/float64(closed), "B/row")
	}
}

// BenchmarkRowCodecDecode measures rowCodec.decodeInto alone: benchmark
// rows' after-images decoded into the column batches of the format-3 file
// schema (the row lineage columns constant), the batches cut back every
// writeBatchRows rows as writePending leaves them.
func BenchmarkRowCodecDecode(b *testing.B) {
	sc, err := upsertSchema(benchTable)
	if err != nil {
		b.Fatal(err)
	}
	fs, err := newCommitFileSchema(iceberg.SchemaWithRowLineage(sc))
	if err != nil {
		b.Fatal(err)
	}
	codec := newRowCodec(benchTable, fs, nil)
	if codec == nil {
		b.Fatal("no codec for the benchmark table")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rows := make([][]byte, 20_000)
	for i := range rows {
		rows[i] = afterImage(b, benchTable, &schema.Envelope{Op: 'r', After: benchRow(int64(i), rng), Source: schema.SourceInfo{Position: []byte("p")}})
	}
	pending := make([][]parquet.Value, len(fs.cols))
	for i := range pending {
		pending[i] = make([]parquet.Value, 0, writeBatchRows)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := codec.decodeInto(rows[i%len(rows)], pending); err != nil {
			b.Fatal(err)
		}
		if len(pending[0]) == writeBatchRows {
			for j := range pending {
				pending[j] = pending[j][:0]
			}
		}
	}
}
