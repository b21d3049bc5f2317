package daemon

import (
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

// TestMigrateOffsetMapping: a table's next offset in the embedded log maps
// to the number of copied records below it (the embedded partition may
// start late and have gaps: retention, compaction), and an offset the
// table has not read past a lost range is refused.
func TestMigrateOffsetMapping(t *testing.T) {
	m := &migration{
		ranks: map[string][][]int64{"t": {{5, 6, 9, 10}, {0, 1, 2}}},
		lost:  map[string][][]log.LostRange{"t": {{{From: 7, To: 9, Reason: "bad crc"}}, nil}},
	}
	for _, c := range []struct {
		p          int
		next, want int64
	}{{0, 9, 2}, {0, 10, 3}, {0, 11, 4}, {1, 0, 0}, {1, 2, 2}, {1, 3, 3}} {
		got, err := m.kafkaOffset("t", c.p, c.next)
		if err != nil || got != c.want {
			t.Errorf("partition %d next %d -> %d, %v; want %d", c.p, c.next, got, err, c.want)
		}
	}
	for _, next := range []int64{5, 7, 8} {
		_, err := m.kafkaOffset("t", 0, next)
		if err == nil || !strings.Contains(err.Error(), "lost offsets [7, 9)") || !strings.Contains(err.Error(), "--replace") {
			t.Errorf("next %d before a lost range: %v, want a refusal naming the range and the re-snapshot", next, err)
		}
	}
}
