package iceberg

import (
	"slices"
	"testing"
)

// TestIndexLookups checks getMany against what was stored, across
// reopening, deletes and a clear — including keys above the greatest
// indexed key, which getMany answers without a seek.
func TestIndexLookups(t *testing.T) {
	dir := t.TempDir()
	x, err := openIndex(dir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(i int64) []byte {
		k, err := encodeKey(nil, []any{i})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	want := map[int64]int64{} // key -> position
	check := func(step string) {
		t.Helper()
		var keys [][]byte
		for i := int64(-5); i < 400; i++ { // more than getManyPart: parallel ranges
			keys = append(keys, key(i))
		}
		got := map[string]int64{}
		if err := x.getMany(keys, func(i int, loc location) error {
			k := keys[i]
			if loc.file != "f1" {
				t.Errorf("%s: key %x in %q", step, k, loc.file)
			}
			got[string(k)] = loc.pos
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: found %d keys, want %d", step, len(got), len(want))
		}
		for i, pos := range want {
			if p, ok := got[string(key(i))]; !ok || p != pos {
				t.Errorf("%s: key %d at %d (found %v), want %d", step, i, p, ok, pos)
			}
		}
	}
	put := func(snap int64, set []int64, del []int64, clear bool) {
		t.Helper()
		b := x.newBatch()
		if clear {
			b.clear()
			for k := range want {
				delete(want, k)
			}
		}
		for _, i := range set {
			b.set(key(i), location{file: "f1", pos: i * 10})
			want[i] = i * 10
		}
		for _, i := range del {
			b.del(key(i))
			delete(want, i)
		}
		if err := b.apply(snap); err != nil {
			t.Fatal(err)
		}
	}
	check("empty")
	put(1, []int64{3, 1, 2}, nil, false)
	check("first keys")
	put(2, []int64{10, 11, -3}, []int64{11}, false) // the greatest key deleted again
	check("after a delete of the greatest key")
	put(3, []int64{11}, nil, false)
	check("the deleted greatest key set again")
	reopen := func() {
		if err := x.close(); err != nil {
			t.Fatal(err)
		}
		if x, err = openIndex(dir, indexOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	if !slices.Equal(x.last, key(11)) {
		t.Errorf("after reopening, the greatest key is %x, want %x", x.last, key(11))
	}
	check("reopened")
	put(4, []int64{5}, nil, true)
	check("cleared and one key set")
	put(5, []int64{30, 31}, nil, false)
	reopen()
	check("reopened after a clear")
	var many []int64
	for i := int64(40); i < 400; i += 3 {
		many = append(many, i)
	}
	put(6, many, []int64{31}, false)
	check("many keys")
	x.close()
}
