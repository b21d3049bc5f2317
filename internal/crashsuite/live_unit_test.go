package crashsuite

import (
	"strings"
	"testing"
	"time"
)

// TestLiveCheckViolations: a sample where the slot had confirmed past the
// log's newest position is accepted only when no captured transaction
// committed in between (a heartbeat); one that confirmed a transaction the
// log did not hold yet is a violation. Rows of an initial load (of a
// slot created again, so above the first consistent point seen) confirm
// nothing, and neither does a confirmed position equal to a commit's LSN
// (PostgreSQL decodes that transaction again).
func TestLiveCheckViolations(t *testing.T) {
	logs := map[string]*topicLog{
		"a": {lsns: [][]uint64{{90, 100, 200}, {150, 300}}, load: [][]bool{{false, false, false}, {false, false}}},
		"b": {lsns: [][]uint64{{50, 250}}, load: [][]bool{{false, false}}},
		"c": {lsns: [][]uint64{{399, 399, 420}}, load: [][]bool{{true, true, false}}},
	}
	lc := &liveCheck{first: 100, ahead: []sample{
		{at: time.Now(), confirmed: 180, newest: 150}, // a heartbeat between 150 and 200: fine
		{at: time.Now(), confirmed: 310, newest: 300}, // past everything: fine
		{at: time.Now(), confirmed: 260, newest: 200}, // 250 confirmed before it was in the log
		{at: time.Now(), confirmed: 99, newest: 50},   // below the consistent point: the initial load
		{at: time.Now(), confirmed: 400, newest: 300}, // a new slot's consistent point; its load rows at 399 are no transactions
		{at: time.Now(), confirmed: 420, newest: 400}, // the commit at 420 starts at the confirmed point: PostgreSQL sends it again
	}}
	v := lc.violations(logs)
	if len(v) != 1 || !strings.Contains(v[0], "committed at 0/FA") {
		t.Fatalf("violations = %q", v)
	}
}
