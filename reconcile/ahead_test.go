package reconcile

import (
	"fmt"
	"testing"
)

// TestAheadAfter: the mirror's rows read ahead, cut after a segment's last
// key for the next segment, keep exactly the rows with greater keys, each
// with its own hash — for a one-integer key and for a composite key
// (texts, then integers).
func TestAheadAfter(t *testing.T) {
	ints := &Table{Columns: []*Column{{Name: "id", Canon: cInt}}, Key: []int{0}, Ordered: true}
	a := &aheadRows{}
	for _, v := range []int64{7, -3, 12, 4, 5, 100} {
		a.ints = append(a.ints, v)
		a.hashes = append(a.hashes, uint64(v)*31)
	}
	rest := a.after(ints, Key{"5"})
	if fmt.Sprint(rest.ints) != "[7 12 100]" || fmt.Sprint(rest.hashes) != fmt.Sprint([]uint64{7 * 31, 12 * 31, 100 * 31}) {
		t.Errorf("integer keys after 5: %v, hashes %v", rest.ints, rest.hashes)
	}

	two := &Table{Columns: []*Column{{Name: "a", Canon: cText}, {Name: "b", Canon: cInt}}, Key: []int{0, 1}, Ordered: true}
	b := &aheadRows{}
	keys := []Key{{"1:b", "2"}, {"1:a", "9"}, {"2:bb", "-1"}, {"1:b", "10"}, {"1:b", "1"}, {"0:", "5"}}
	for i, k := range keys {
		for _, s := range k {
			b.texts = append(b.texts, s...)
			b.ends = append(b.ends, len(b.texts))
		}
		b.hashes = append(b.hashes, uint64(i))
	}
	rest = b.after(two, Key{"1:b", "2"})
	var got []string
	start := 0
	for i, h := range rest.hashes {
		k := make(Key, 2)
		for j := range 2 {
			k[j] = string(rest.texts[start:rest.ends[2*i+j]])
			start = rest.ends[2*i+j]
		}
		got = append(got, fmt.Sprintf("%s=%d", k.id(), h))
	}
	if fmt.Sprint(got) != "[2:bb,-1=2 1:b,10=3]" {
		t.Errorf("composite keys after (b, 2): %v", got)
	}
}
