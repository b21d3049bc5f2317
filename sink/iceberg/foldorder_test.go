package iceberg

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestFoldOrderFromManyFetches: a buffer of many short fetches from
// several partitions (as the fetcher hands them over while it keeps up
// with the log) comes out of byPartition and mergeRuns in source order,
// as a stable sort by position would put it, each partition's changes in
// their offset order.
func TestFoldOrderFromManyFetches(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 300 {
		parts := 1 + rng.IntN(8)
		// Source order: positions 0..n-1, each change placed in a partition.
		n := rng.IntN(2000)
		perPart := make([][]*change, parts)
		for i := range n {
			p := rng.IntN(parts)
			c := &change{partition: int32(p), offset: int64(len(perPart[p]))}
			c.info = schema.EnvelopeInfo{Position: binary.BigEndian.AppendUint64(nil, uint64(i))}
			perPart[p] = append(perPart[p], c)
		}
		// The buffer: fetches of 1-20 changes, partition by partition in turn.
		var buf []*change
		next := make([]int, parts)
		for left := n; left > 0; {
			p := rng.IntN(parts)
			k := min(1+rng.IntN(20), len(perPart[p])-next[p])
			buf = append(buf, perPart[p][next[p]:next[p]+k]...)
			next[p] += k
			left -= k
		}
		byPos := func(a, b *change) int { return bytes.Compare(a.position(), b.position()) }
		want := slices.Clone(buf)
		slices.SortStableFunc(want, byPos)
		got := mergeRuns(byPartition(slices.Clone(buf)), byPos)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %d changes in %d partitions: not in source order", round, n, parts)
		}
		grouped := byPartition(slices.Clone(buf))
		for i := 1; i < len(grouped); i++ {
			a, b := grouped[i-1], grouped[i]
			if a.partition > b.partition || (a.partition == b.partition && a.offset >= b.offset) {
				t.Fatalf("round %d: byPartition put %d@%d before %d@%d", round, a.partition, a.offset, b.partition, b.offset)
			}
		}
	}
}
