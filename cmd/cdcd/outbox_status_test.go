package main

import (
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestRenderOutbox: cdcd status shows the relay, its table's size and a
// failing target with its error.
func TestRenderOutbox(t *testing.T) {
	var b strings.Builder
	renderOutbox(&b, nil)
	if b.Len() != 0 {
		t.Fatalf("no relay, yet: %q", b.String())
	}
	renderOutbox(&b, &daemon.OutboxStatus{Table: "public.outbox", MessagePrefix: "app", Events: 1234, LagSeconds: 42, TableBytes: 8192, TableRows: 3,
		Malformed: 1, Targets: []daemon.OutboxTargetStatus{{Name: "log", Delivered: 1234},
			{Name: "orders", Delivered: 1200, Queued: 34, Failures: 7, FailingSeconds: 90, LastError: "answered 503 Service Unavailable"}}})
	out := b.String()
	for _, want := range []string{"outbox public.outbox and messages app: 1,234 events relayed", "8.0 KiB", "1 unroutable (in _cdcd_dead.outbox)",
		"orders  1,200      34      7", "failing for 1m30s: answered 503"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
