package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// BenchmarkRecordsBinlog: emitter.records over a batch of changes read
// from a binlog (cdcd bench's MariaDB table: 8 columns; 1,000-row events
// of inserts), ns per change.
func BenchmarkRecordsBinlog(b *testing.B) {
	benchRecords(b, schema.ConnectorMySQL, func(c *source.Change, i int) {
		c.Binlog = &source.BinlogPlace{File: "bin.000001", Pos: uint64(400 + i/1000*9000), Row: int32(i % 1000), ServerID: 1,
			GTID: fmt.Sprintf("0-1-%d", i/1000)}
	})
}

// BenchmarkRecordsPG: emitter.records over the same rows as PostgreSQL
// changes (an LSN each, no binlog place), ns per change.
func BenchmarkRecordsPG(b *testing.B) {
	benchRecords(b, "postgresql", func(c *source.Change, i int) {
		c.LSN, c.EventLSN = uint64(1<<32+i/1000*100000), uint64(1<<32+i*100)
	})
}

// benchRecords runs emitter.records over 8,192 insert changes of the
// bench table, each given its source's places by place.
func benchRecords(b *testing.B, connector string, place func(c *source.Change, i int)) {
	e := &emitter{connector: connector, pipeline: "bench", partitions: 8}
	tbl := &schema.Table{Namespace: "bench", Name: "bench", Key: []int{0}, Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64}, {Name: "qty", Kind: schema.Int32, Nullable: true},
		{Name: "label", Kind: schema.String, Nullable: true}, {Name: "amount", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true},
		{Name: "at", Kind: schema.Timestamp, Nullable: true}, {Name: "flag", Kind: schema.Bool, Nullable: true},
		{Name: "doc", Kind: schema.String, Nullable: true}, {Name: "score", Kind: schema.Float64, Nullable: true}}}
	at := time.Date(2026, 12, 3, 15, 0, 0, 0, time.UTC)
	batch := make([]source.Change, 8192)
	for i := range batch {
		batch[i] = source.Change{Table: tbl, Op: source.OpCreate, After: []any{int64(i), int64(i % 1000), fmt.Sprintf("%032x", i),
			fmt.Sprintf("%d.%02d", i, i%100), at.UnixMicro() + int64(i)*1e6, i%2 == 0, `{"k": 1, "tag": "t1"}`, float64(i) / 3},
			TxID: uint64(i / 1000), CommitTime: at, Pos: source.Position(fmt.Appendf(nil, "%012d", i))}
		place(&batch[i], i)
	}
	tc := &tableCodec{topic: "t", keyID: 1, valueID: 2}
	rb := &batchRecords{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := &batch[i%len(batch)]
		if i%len(batch) == 0 {
			rb.arena, rb.headers = rb.arena[:0], rb.headers[:0]
			rb.tailSet, rb.txidText = false, nil
			rb.now = at.UnixNano()
		}
		if _, err := e.records(rb, tc, c); err != nil {
			b.Fatal(err)
		}
	}
}
