package iceberg

import (
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestPrefetchRowsEdges: prefetchRows is asked at every row of the range
// writer's loop; it must look ahead only within live and skip what has no
// after-image to ask for: states without a direct change (the generic
// path's rows), changes without an after-image, a one-byte row, and the
// last rows (nothing ahead). A read past live or through a nil change
// panics here.
func TestPrefetchRowsEdges(t *testing.T) {
	row := []byte{2, 4, 6}
	changes := []change{
		{info: schema.EnvelopeInfo{After: row}},
		{}, // no after-image
		{info: schema.EnvelopeInfo{After: row[:1]}}, // one byte
	}
	for n := 0; n <= 3*prefetchAhead; n++ {
		live := make([]*keyState, n)
		for i := range live {
			live[i] = &keyState{}
			if i%4 != 3 { // every fourth without a direct change
				live[i].direct = &changes[i%len(changes)]
			}
		}
		for at := range live {
			prefetchRows(live, at)
		}
		prefetchRows(live, n) // past the end: nothing
	}
}
