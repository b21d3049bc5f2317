package iceberg

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestTailWriterKeepsTheEnd: whatever the sizes of the writes, the kept
// bytes are the written bytes' end, at least keep of them (or all), at
// most 2*keep.
func TestTailWriterKeepsTheEnd(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, keep := range []int{1, 16, 1000} {
		var out bytes.Buffer
		tw := &tailWriter{w: &out, keep: keep}
		for range 500 {
			p := make([]byte, rng.IntN(3*keep+2))
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			if _, err := tw.Write(p); err != nil {
				t.Fatal(err)
			}
			all := out.Bytes()
			if tw.n != int64(len(all)) || !bytes.HasSuffix(all, tw.last) || len(tw.last) > 2*keep || len(tw.last) < min(keep, len(all)) {
				t.Fatalf("keep %d: kept %d bytes of %d (counted %d), a suffix: %v", keep, len(tw.last), len(all), tw.n, bytes.HasSuffix(all, tw.last))
			}
		}
	}
}
