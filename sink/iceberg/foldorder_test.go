package iceberg

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/apache/iceberg-go"

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
		buf := fetchesOf(rng, perPart, n)
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

// fetchesOf is a buffer of the n changes of perPart as the fetcher builds
// one: fetches of 1-20 changes, from partitions taken at random.
func fetchesOf[T any](rng *rand.Rand, perPart [][]T, n int) []T {
	var buf []T
	next := make([]int, len(perPart))
	for left := n; left > 0; {
		p := rng.IntN(len(perPart))
		k := min(1+rng.IntN(20), len(perPart[p])-next[p])
		buf = append(buf, perPart[p][next[p]:next[p]+k]...)
		next[p] += k
		left -= k
	}
	return buf
}

// TestFoldKeepsEachKeysOrder: the fold takes the buffer as it is (no
// ordering across partitions) and gives every key its changes in offset
// order, the last deciding whether it lives; a key found in two partitions
// (which no topic of cdcd's has) is folded in source order, as a stable
// sort by position puts it, not in the buffer's order.
func TestFoldKeepsEachKeysOrder(t *testing.T) {
	u := &upsert{keys: []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}}
	mk := func(p int32, off int64, pos uint64, id int64, op byte) change {
		c := change{table: kv, partition: p, offset: off, env: &schema.Envelope{Op: op}}
		if op == 'd' {
			c.env.Before = []any{id, nil, nil}
		} else {
			c.env.After = []any{id, fmt.Sprint(off), nil}
		}
		c.env.Source.Position = binary.BigEndian.AppendUint64(nil, pos)
		return c
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 200 {
		parts := 1 + rng.IntN(8)
		// Source order: position i; key id lives in partition id%parts.
		n := rng.IntN(1500)
		perPart := make([][]change, parts)
		for i := range n {
			id := int64(rng.IntN(100))
			p := int32(id % int64(parts))
			op := []byte{'c', 'u', 'd'}[rng.IntN(3)]
			perPart[p] = append(perPart[p], mk(p, int64(len(perPart[p])), uint64(i), id, op))
		}
		buf := fetchesOf(rng, perPart, n)
		states, keys, err := u.fold(buf)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, st := range keys {
			total += len(st.changes)
			for i := 1; i < len(st.changes); i++ {
				if a, b := st.changes[i-1], st.changes[i]; a.offset >= b.offset {
					t.Fatalf("round %d: key %x: offset %d before %d", round, st.key, a.offset, b.offset)
				}
			}
			last := st.changes[len(st.changes)-1]
			if st.live != (last.env.Op != 'd') || (st.live && st.row[1] != fmt.Sprint(last.offset)) {
				t.Fatalf("round %d: key %x: live %v, row %v; last change %c@%d", round, st.key, st.live, st.row, last.env.Op, last.offset)
			}
			if states[string(st.key)] != st {
				t.Fatalf("round %d: key %x not found by key", round, st.key)
			}
		}
		if total != n {
			t.Fatalf("round %d: %d changes folded, want %d", round, total, n)
		}
	}
	// Key 7 in partitions 0 and 1: the buffer holds partition 1's fetch
	// (position 2) before partition 0's (positions 1 and 3).
	buf := []change{mk(1, 0, 2, 7, 'd'), mk(0, 0, 1, 7, 'c'), mk(0, 1, 3, 7, 'u')}
	_, keys, err := u.fold(buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || len(keys[0].changes) != 3 {
		t.Fatalf("keys %d", len(keys))
	}
	for i, want := range []uint64{1, 2, 3} {
		if got := binary.BigEndian.Uint64(keys[0].changes[i].position()); got != want {
			t.Fatalf("change %d at position %d, want %d (source order)", i, got, want)
		}
	}
	if !keys[0].live || keys[0].row[1] != "1" {
		t.Fatalf("live %v row %v: the update at position 3 decides", keys[0].live, keys[0].row)
	}
}
