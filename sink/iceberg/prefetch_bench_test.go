package iceberg

import (
	"math/rand/v2"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// BenchmarkRangeRowsDecode measures what the range writer's loop reads of
// a stream's rows (rangeWriter.write): key states in key order, each
// pointing at its change in a buffer filled in fetch order and at its
// after-image in the fetch windows, the fetch order a random permutation
// of the key order (a stream's updates), decoded by the table's rowCodec.
// 200,000 rows (about 60 MB with their changes), more than the caches
// hold, as a streamed commit's buffer is. plain reads them as they come;
// prefetch asks for the rows ahead first (prefetchRows).
func BenchmarkRangeRowsDecode(b *testing.B) {
	const n = 200_000
	fs, codec := benchRowCodec(b, newCommitFileSchema)
	rng := rand.New(rand.NewPCG(1, 2))
	// The fetch order: record k of the log is key perm[k]'s.
	perm := rng.Perm(n)
	var window []byte
	buf := make([]change, n)
	for k, key := range perm {
		row := afterImage(b, benchTable, &schema.Envelope{Op: 'u', After: benchRow(int64(key), rng), Source: schema.SourceInfo{Position: []byte("p")}})
		if len(window)+len(row) > cap(window) {
			window = make([]byte, 0, 1<<20)
		}
		at := len(window)
		window = append(window, row...)
		buf[k] = change{info: schema.EnvelopeInfo{After: window[at:len(window):len(window)]}}
	}
	states := make([]keyState, n)
	live := make([]*keyState, n)
	for k, key := range perm {
		states[key].direct = &buf[k]
	}
	for i := range states {
		live[i] = &states[i]
	}
	pending := make([][]parquet.Value, len(fs.cols))
	for i := range pending {
		pending[i] = make([]parquet.Value, 0, writeBatchRows)
	}
	for _, pre := range []bool{false, true} {
		name := "plain"
		if pre {
			name = "prefetch"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				for at, st := range live {
					if pre {
						prefetchRows(live, at)
					}
					if _, err := codec.decodeInto(st.direct.info.After, pending); err != nil {
						b.Fatal(err)
					}
					if len(pending[0]) == writeBatchRows {
						for j := range pending {
							pending[j] = pending[j][:0]
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/row")
		})
	}
}
