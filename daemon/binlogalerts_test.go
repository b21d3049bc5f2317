package daemon

import "testing"

func TestBinlogRetentionAlert(t *testing.T) {
	for _, c := range []struct {
		b    *BinlogStatus
		want string
	}{
		{nil, ""},
		{&BinlogStatus{LagBytes: 0, LagSeconds: 9000, RetentionSeconds: 10000}, ""}, // caught up: idle, not behind
		{&BinlogStatus{LagBytes: 10, LagSeconds: 4000, RetentionSeconds: 10000}, ""},
		{&BinlogStatus{LagBytes: 10, LagSeconds: 5000, RetentionSeconds: 10000}, SeverityWarning},
		{&BinlogStatus{LagBytes: 10, LagSeconds: 8000, RetentionSeconds: 10000}, SeverityCritical},
		{&BinlogStatus{LagBytes: 10, LagSeconds: 8000, RetentionSeconds: 0}, ""}, // kept forever
	} {
		got := evaluateBinlog(c.b)
		sev := ""
		if len(got) == 1 {
			sev = got[0].Severity
		}
		if sev != c.want || len(got) > 1 {
			t.Errorf("%+v: %v, want %q", c.b, got, c.want)
		}
	}
}
