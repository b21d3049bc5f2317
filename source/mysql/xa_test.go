package mysql

import "testing"

// TestXAIDs: the xid an XA_PREPARE_LOG_EVENT names is written as the
// server writes it in XA COMMIT / ROLLBACK statements, so the two match.
func TestXAIDs(t *testing.T) {
	data := []byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 'x', '2', 0xff}
	xid, one, ok := xaPrepareID(data)
	if !ok || one || xid != "x'7832',x'ff',1" {
		t.Errorf("xaPrepareID = %q, %v, %v", xid, one, ok)
	}
	if got := xaID("XA ROLLBACK X'7832',X'FF',1"); got != xid {
		t.Errorf("xaID(rollback) = %q, want %q", got, xid)
	}
	if got := xaID("/* c */ XA COMMIT X'7832',X'ff',1 ONE PHASE"); got != xid {
		t.Errorf("xaID(commit one phase) = %q, want %q", got, xid)
	}
	if got := xaID("INSERT INTO xa VALUES (1)"); got != "" {
		t.Errorf("xaID(insert) = %q", got)
	}
	if _, one, ok := xaPrepareID([]byte{1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 'a'}); !ok || !one {
		t.Error("a one-phase prepare event not told")
	}
	if _, _, ok := xaPrepareID([]byte{0, 1, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 'a'}); ok {
		t.Error("a short event read")
	}
}
