package pgpos

import (
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// TestOrderAndRoundTrip: positions compare as bytes in (commit LSN, index)
// order, a load row's longer position sorts after its 12-byte prefix and
// before the next LSN, and Parse gives back what New was given.
func TestOrderAndRoundTrip(t *testing.T) {
	ordered := []source.Position{
		New(0xff, 0xffffffff),
		New(0x100, 0),
		append(New(0x100, 0), 0),
		New(0x100, 1),
		New(0x1_0000_0000, 0),
	}
	for i := 1; i < len(ordered); i++ {
		if ordered[i-1].Compare(ordered[i]) >= 0 {
			t.Errorf("position %d (%x) does not sort before %d (%x)", i-1, ordered[i-1], i, ordered[i])
		}
	}
	lsn, idx, err := Parse(append(New(0xabcdef0123, 7), 1, 2, 3))
	if err != nil || lsn != 0xabcdef0123 || idx != 7 {
		t.Errorf("Parse = %x, %d, %v", lsn, idx, err)
	}
	if _, _, err := Parse(New(1, 1)[:11]); err == nil {
		t.Error("an 11-byte position parsed")
	}
}
