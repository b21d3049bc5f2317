package schema

import (
	"bytes"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestInt64DecimalBytes: the int64 decimal's bytes are the big.Int path's
// (minimal two's complement) at every byte boundary, either side of it,
// at the extremes and for random values.
func TestInt64DecimalBytes(t *testing.T) {
	vals := []int64{0, 1, -1, math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1}
	for s := uint(1); s < 63; s++ {
		p := int64(1) << s
		vals = append(vals, p-1, p, p+1, -p-1, -p, -p+1)
	}
	rng := rand.New(rand.NewPCG(17, 17))
	for range 100_000 {
		vals = append(vals, int64(rng.Uint64())>>rng.IntN(64))
	}
	for _, v := range vals {
		if got, want := appendInt64Decimal([]byte{9}, v), appendBytes([]byte{9}, twosComplement(big.NewInt(v))); !bytes.Equal(got, want) {
			t.Fatalf("%d: %x, want %x", v, got, want)
		}
	}
}
