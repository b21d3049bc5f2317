package crashsuite

import (
	"strings"
	"testing"
	"time"
)

// TestLiveCheckViolations: a sample where the slot had confirmed past the
// log's newest position is accepted only when no captured transaction
// committed in between (a heartbeat); one that confirmed a transaction the
// log did not hold yet is a violation.
func TestLiveCheckViolations(t *testing.T) {
	logs := map[string]*topicLog{
		"a": {lsns: [][]uint64{{90, 100, 200}, {150, 300}}},
		"b": {lsns: [][]uint64{{50, 250}}},
	}
	lc := &liveCheck{first: 100, ahead: []sample{
		{at: time.Now(), confirmed: 180, newest: 150}, // a heartbeat between 150 and 200: fine
		{at: time.Now(), confirmed: 310, newest: 300}, // past everything: fine
		{at: time.Now(), confirmed: 250, newest: 200}, // 250 confirmed before it was in the log
		{at: time.Now(), confirmed: 99, newest: 50},   // below the consistent point: the initial load
	}}
	v := lc.violations(logs)
	if len(v) != 1 || !strings.Contains(v[0], "committed at 0/FA") {
		t.Fatalf("violations = %q", v)
	}
}
