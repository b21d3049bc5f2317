package pgdecode

import (
	"math"
	"testing"
)

func TestFormatFloat(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		bits int
		want string
	}{
		{1000000, 64, "1000000"}, {1e15, 64, "1e+15"}, {123456789012345678, 64, "1.2345678901234568e+17"},
		{0.0001, 64, "0.0001"}, {0.00001, 64, "1e-05"}, {math.Copysign(0, -1), 64, "-0"}, {5e-324, 64, "5e-324"},
		{16777216, 32, "1.6777216e+07"}, {123456, 32, "123456"}, {float64(float32(0.1)), 32, "0.1"},
	} {
		if got := formatFloat(tc.f, tc.bits); got != tc.want {
			t.Errorf("formatFloat(%v, %d) = %s, want %s", tc.f, tc.bits, got, tc.want)
		}
	}
}
