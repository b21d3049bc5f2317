package mysql

import (
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestSpaceEnds: ends after two exact ones are spaced as they are, stay
// in order below the upper bound (no overflow at the int64 limits), and
// say last once about a chunk or less is left.
func TestSpaceEnds(t *testing.T) {
	k := func(v int64) snapshot.Key { return snapshot.Key{strconv.FormatInt(v, 10)} }
	for _, tc := range []struct {
		name        string
		a, b, upper int64
		n           int
		want        string
		last        bool
	}{
		{"dense", 10, 20, 100, 64, "[[10] [20] [30] [40] [50] [60] [70] [80] [90]]", true},
		{"a chunk and a half left", 10, 20, 105, 64, "[[10] [20] [30] [40] [50] [60] [70] [80] [90] [100]]", true},
		{"n reached", 10, 20, 100, 4, "[[10] [20] [30] [40]]", false},
		{"from the least int64", math.MinInt64, math.MinInt64 + 1<<62, math.MaxInt64, 64,
			fmt.Sprintf("[[%d] [%d] [0] [%d]]", int64(math.MinInt64), int64(math.MinInt64+1<<62), int64(1<<62)), true},
	} {
		got, last, err := spaceEnds([]snapshot.Key{k(tc.a), k(tc.b)}, k(tc.upper), tc.n)
		if err != nil || fmt.Sprint(got) != tc.want || last != tc.last {
			t.Errorf("%s: %v, last %v, %v; want %s, last %v", tc.name, got, last, err, tc.want, tc.last)
		}
	}
	// An unsigned BIGINT beyond int64: no spacing, the exact ends only.
	big := []snapshot.Key{{"9223372036854775808"}, {"9223372036854775908"}}
	if got, last, _ := spaceEnds(big, snapshot.Key{"18446744073709551615"}, 64); len(got) != 2 || last {
		t.Errorf("unsigned BIGINT keys: %v, last %v; want the two exact ends, not last", got, last)
	}
}
