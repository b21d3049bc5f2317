package iceberg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestUnscaledInt64AgreesWithBig: the decimal fast path gives what the
// big.Int path gives for every text it accepts, and accepts the plain
// texts of up to 18 digits (edge cases and random texts).
func TestUnscaledInt64AgreesWithBig(t *testing.T) {
	cases := []struct {
		s     string
		scale int
		fast  bool // the fast path must take it
	}{
		{"0", 2, true}, {"-0", 2, true}, {"+7", 0, true}, {"1.5", 2, true}, {"-1.25", 2, true},
		{".5", 1, true}, {"5.", 1, true}, {"999999999999999999", 0, true}, {"-9999999999999999.99", 2, true},
		{"1.500", 2, false}, {"1.234", 2, false}, {"1e5", 0, false}, {"", 2, false}, {"-", 2, false},
		{"1.2.3", 2, false}, {"9999999999999999999", 0, false}, {"99999999999999999.9", 2, false}, {"NaN", 2, false},
	}
	check := func(s string, scale int) bool {
		n, ok := unscaledInt64(s, scale)
		if !ok {
			return false
		}
		u, err := unscaledDecimal(s, scale)
		if err != nil {
			t.Fatalf("%q scale %d: fast path %d, big.Int path: %v", s, scale, n, err)
		}
		if !u.IsInt64() || u.Int64() != n {
			t.Fatalf("%q scale %d: fast path %d, big.Int path %s", s, scale, n, u)
		}
		return true
	}
	for _, c := range cases {
		if got := check(c.s, c.scale); got != c.fast {
			t.Errorf("%q scale %d: fast path taken %v, want %v", c.s, c.scale, got, c.fast)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		scale := rng.IntN(6)
		ip := fmt.Sprint(rng.Int64N(1_000_000_000_000))
		frac := fmt.Sprintf("%03d", rng.IntN(1000))[:min(scale, 3)]
		s := ip
		if frac != "" {
			s += "." + frac
		}
		if rng.IntN(2) == 0 {
			s = "-" + s
		}
		if !check(s, scale) {
			t.Fatalf("%q scale %d: fast path not taken", s, scale)
		}
	}
}

// TestBatchedRowsReadBack: rows handed to parquet-go in batches (by count
// and, for large values, by bytes) read back in order, every value intact,
// with every page header small (large values cut a batch short).
func TestBatchedRowsReadBack(t *testing.T) {
	sc := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "d", Type: iceberg.DecimalTypeOf(12, 2)},
	)
	fsch, err := newFileSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 1000
	want := make([][]any, n)
	for i := range want {
		var s any
		switch size := rng.IntN(10); {
		case size == 0:
			s = nil
		case size < 8:
			s = strings.Repeat(string(rune('a'+i%26)), 1+rng.IntN(40))
		default: // some 30-90 KB values: a batch ends early on bytes
			s = strings.Repeat(string(rune('A'+i%26)), 30<<10+rng.IntN(60<<10))
		}
		want[i] = []any{int64(i), s, fmt.Sprintf("%d.%02d", rng.IntN(1_000_000)-500_000, rng.IntN(100))}
	}
	d := newDataFileWriter(fsch)
	for _, r := range want {
		if err := d.add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.writePending(); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	data := d.buf.Bytes()
	// Every page header within 16 KiB (arrow-go refuses those over 4 MiB).
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	pages := 0
	for c := 0; c < 3; c++ {
		pr, err := r.RowGroup(0).GetColumnPageReader(c)
		if err != nil {
			t.Fatal(err)
		}
		pr.SetMaxPageHeaderSize(16 << 10)
		for pr.Next() {
			pages++
		}
		if pr.Err() != nil {
			t.Fatalf("column %d page %d: %v", c, pages, pr.Err())
		}
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	all := map[int64]bool{}
	for i := range n {
		all[int64(i)] = true
	}
	got, err := readRowsAt(pf, sc.Fields(), all)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		g := got[int64(i)]
		if g == nil || g[0] != w[0] || g[1] != w[1] {
			t.Fatalf("row %d: got %d-byte text for id %v; want %d bytes for id %v", i, len(fmt.Sprint(g[1])), g[0], len(fmt.Sprint(w[1])), w[0])
		}
		if fmt.Sprint(mustUnscaled(t, fmt.Sprint(g[2]))) != mustUnscaled(t, w[2].(string)) {
			t.Fatalf("row %d: decimal %v, want %v", i, g[2], w[2])
		}
	}
	t.Logf("%d rows, %d pages", n, pages)
}

func mustUnscaled(t *testing.T, s string) string {
	u, err := unscaledDecimal(s, 2)
	if err != nil {
		t.Fatal(err)
	}
	return u.String()
}

// TestMergeRunsIsAStableSort: mergeRuns orders like a stable sort (equal
// elements in their input order) for inputs of any number of ascending
// runs, with many equal keys, including none and one run.
func TestMergeRunsIsAStableSort(t *testing.T) {
	type el struct{ key, at int }
	byKey := func(a, b el) int { return a.key - b.key }
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 2000 {
		n := rng.IntN(300)
		if round < 3 {
			n = round
		}
		in := make([]el, n)
		key := 0
		for i := range in {
			if rng.IntN(1+round%40) == 0 { // start a new run lower down
				key = rng.IntN(50)
			}
			key += rng.IntN(3) // equal keys within and across runs
			in[i] = el{key, i}
		}
		want := slices.Clone(in)
		slices.SortStableFunc(want, byKey)
		got := mergeRuns(slices.Clone(in), byKey)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %v\nsorted %v\nwant   %v", round, in, got, want)
		}
	}
}

// TestInt64KeyFastPath: a bigint key read straight from the Avro key
// encodes as the decoding path encodes it, for edge and random values;
// keys of other shapes take the decoding path.
func TestInt64KeyFastPath(t *testing.T) {
	sc, err := upsertSchema(kv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := keyFields(sc)
	if err != nil {
		t.Fatal(err)
	}
	u := &upsert{keys: keys}
	rng := rand.New(rand.NewPCG(9, 10))
	vals := []int64{0, -1, 1, 63, 64, -64, -65, 1 << 62, -(1 << 63), 1<<63 - 1}
	for range 2000 {
		vals = append(vals, int64(rng.Uint64()))
	}
	for _, v := range vals {
		key, err := schema.AppendKey(nil, kv, []any{v, nil, nil})
		if err != nil {
			t.Fatal(err)
		}
		c := &change{table: kv, key: key}
		fast, ok := u.int64Key(c)
		if !ok {
			t.Fatalf("%d: fast path not taken", v)
		}
		slow, err := encodeKey(nil, []any{v})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("%d: fast path %x, decoding path %x", v, fast, slow)
		}
		if got, err := u.keyOfChange(c); err != nil || !bytes.Equal(got, slow) {
			t.Fatalf("%d: keyOfChange %x, %v; want %x", v, got, err, slow)
		}
	}
	// A text key, or a bigint key that is nullable, decodes.
	text := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.String}}, Key: []int{0}}
	nullable := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{{Name: "id", Kind: schema.Int64, Nullable: true}}, Key: []int{0}}
	for _, tb := range []*schema.Table{text, nullable} {
		if _, ok := u.int64Key(&change{table: tb, key: []byte{2}}); ok {
			t.Errorf("%v: fast path taken", tb.Columns[0])
		}
	}
}
