package reconcile

import (
	"math"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
	icebergsink "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TestRawCanonMatchesBoxed: the canonical text rendered from a value as a
// data file stores it equals the text of the value sink/iceberg's Scan
// converts it to, for every kind and its edges (NULL, negative decimals
// in each physical form, -0 and NaN floats, infinite dates and
// timestamps).
func TestRawCanonMatchesBoxed(t *testing.T) {
	be := func(b ...byte) parquet.Value { return parquet.FixedLenByteArrayValue(b) }
	cases := []struct {
		typ  iceberg.Type
		vals []parquet.Value
	}{
		{iceberg.PrimitiveTypes.Int32, []parquet.Value{parquet.Int32Value(-5), parquet.Int32Value(math.MaxInt32), parquet.NullValue()}},
		{iceberg.PrimitiveTypes.Int64, []parquet.Value{parquet.Int64Value(math.MinInt64), parquet.Int64Value(0)}},
		{iceberg.PrimitiveTypes.Bool, []parquet.Value{parquet.BooleanValue(true), parquet.BooleanValue(false)}},
		{iceberg.PrimitiveTypes.Float32, []parquet.Value{parquet.FloatValue(float32(math.Copysign(0, -1))), parquet.FloatValue(float32(math.NaN())),
			parquet.FloatValue(float32(math.Inf(-1))), parquet.FloatValue(0.1)}},
		{iceberg.PrimitiveTypes.Float64, []parquet.Value{parquet.DoubleValue(math.Copysign(0, -1)), parquet.DoubleValue(math.NaN()), parquet.DoubleValue(1e300)}},
		{iceberg.DecimalTypeOf(9, 2), []parquet.Value{parquet.Int32Value(-5), parquet.Int32Value(0), parquet.Int32Value(12345), parquet.Int32Value(math.MinInt32)}},
		{iceberg.DecimalTypeOf(18, 3), []parquet.Value{parquet.Int64Value(-1), parquet.Int64Value(math.MinInt64), parquet.Int64Value(math.MaxInt64), parquet.Int64Value(1000)}},
		{iceberg.DecimalTypeOf(18, 0), []parquet.Value{parquet.Int64Value(-7), parquet.Int64Value(0)}},
		{iceberg.DecimalTypeOf(38, 10), []parquet.Value{be(0xff, 0xff, 0xff, 0xfe), be(0x00, 0x01), be(0x80, 0, 0, 0, 0, 0, 0, 0),
			be(0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1), be(0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)}},
		{iceberg.PrimitiveTypes.String, []parquet.Value{parquet.ByteArrayValue([]byte("héllo, N")), parquet.ByteArrayValue(nil), parquet.NullValue()}},
		{iceberg.PrimitiveTypes.Binary, []parquet.Value{parquet.ByteArrayValue([]byte{0, 0xff}), parquet.ByteArrayValue([]byte{})}},
		{iceberg.PrimitiveTypes.UUID, []parquet.Value{be(0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7)}},
		{iceberg.PrimitiveTypes.Date, []parquet.Value{parquet.Int32Value(0), parquet.Int32Value(-719528), parquet.Int32Value(schema.DateInfinity), parquet.Int32Value(schema.DateMinusInfinity)}},
		{iceberg.PrimitiveTypes.Time, []parquet.Value{parquet.Int64Value(86399999999), parquet.Int64Value(0)}},
		{iceberg.PrimitiveTypes.TimestampTz, []parquet.Value{parquet.Int64Value(-1), parquet.Int64Value(schema.TimestampInfinity), parquet.Int64Value(schema.TimestampMinusInfinity)}},
		{iceberg.PrimitiveTypes.Timestamp, []parquet.Value{parquet.Int64Value(1700000000123456)}},
	}
	for _, tc := range cases {
		kind, scale, _, err := canonFor(tc.typ)
		if err != nil {
			t.Fatal(err)
		}
		c := &Column{Name: "c", Canon: kind, Scale: scale}
		for _, v := range tc.vals {
			want, err := appendCanon(nil, c, icebergsink.Value(tc.typ, v))
			if err != nil {
				t.Fatalf("%s %v: %v", tc.typ, v, err)
			}
			got, err := appendRaw(nil, c, tc.typ, v)
			if err != nil || string(got) != string(want) {
				t.Errorf("%s %v: raw %q (%v), boxed %q", tc.typ, v, got, err, want)
			}
		}
	}
}
