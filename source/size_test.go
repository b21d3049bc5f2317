package source

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestValueBytesBoundsAvro: ValueBytes and RowBytes are never less than the bytes a
// value takes in the envelope, for every kind and lists of them.
func TestValueBytesBoundsAvro(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	str := func() string { return strings.Repeat("é", rng.IntN(40)) }
	kinds := []struct {
		col schema.Column
		gen func() any
	}{
		{schema.Column{Kind: schema.Bool}, func() any { return rng.IntN(2) == 0 }},
		{schema.Column{Kind: schema.Int64}, func() any { return int64(rng.Uint64()) }},
		{schema.Column{Kind: schema.Date}, func() any { return int32(rng.Uint32()) }},
		{schema.Column{Kind: schema.Float32}, func() any { return rng.Float32() }},
		{schema.Column{Kind: schema.Float64}, func() any { return rng.Float64() }},
		{schema.Column{Kind: schema.String}, func() any { return str() }},
		{schema.Column{Kind: schema.JSON}, func() any { return `{"a":"` + str() + `"}` }},
		{schema.Column{Kind: schema.Bytes}, func() any { return []byte(str()) }},
		{schema.Column{Kind: schema.Decimal, Precision: 38, Scale: 2}, func() any { return "-" + strings.Repeat("9", 36) + ".99" }},
		{schema.Column{Kind: schema.Decimal}, func() any { return "1" + strings.Repeat("0", rng.IntN(100)) }},
		{schema.Column{Kind: schema.UUID}, func() any { return [16]byte{1, 2, 3} }},
		{schema.Column{Kind: schema.Interval}, func() any {
			return schema.IntervalValue{Months: int32(rng.Uint32()), Days: int32(rng.Uint32()), Micros: int64(rng.Uint64())}
		}},
		{schema.Column{Kind: schema.Timestamp}, func() any { return int64(-1) << 62 }},
	}
	for _, k := range kinds {
		list := schema.Column{Kind: schema.List, Elem: &schema.Column{Kind: k.col.Kind, Precision: k.col.Precision, Scale: k.col.Scale, Nullable: true}}
		for _, c := range []schema.Column{k.col, list} {
			c.Name, c.Nullable = "v", true
			tb := &schema.Table{Namespace: "public", Name: "t", Columns: []schema.Column{c}}
			for range 200 {
				v := k.gen()
				if c.Kind == schema.List {
					l := make([]any, rng.IntN(50))
					for i := range l {
						if rng.IntN(5) > 0 {
							l[i] = k.gen()
						}
					}
					v = l
				}
				with, err := schema.AppendEnvelope(nil, tb, &schema.Envelope{Op: 'c', After: []any{v}})
				if err != nil {
					t.Fatal(err)
				}
				without, _ := schema.AppendEnvelope(nil, tb, &schema.Envelope{Op: 'c', After: []any{nil}})
				n := len(with) - len(without) + 1
				if n > ValueBytes(v) || n > RowBytes([]any{v}) {
					t.Fatalf("%v value %#v takes %d bytes, more than ValueBytes' %d or RowBytes' %d", c.Kind, v, n, ValueBytes(v), RowBytes([]any{v}))
				}
			}
		}
	}
}
