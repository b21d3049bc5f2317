package pgdecode

import (
	"bytes"
	"math"
)

// Equal compares two decoded values exactly (floats by their bits, lists
// element by element).
func Equal(a, b any) bool {
	switch av := a.(type) {
	case []byte:
		bv, ok := b.([]byte)
		return ok && bytes.Equal(av, bv)
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !Equal(av[i], bv[i]) {
				return false
			}
		}
		return true
	case float64:
		bv, ok := b.(float64)
		return ok && math.Float64bits(av) == math.Float64bits(bv)
	case float32:
		bv, ok := b.(float32)
		return ok && math.Float32bits(av) == math.Float32bits(bv)
	}
	return a == b
}
