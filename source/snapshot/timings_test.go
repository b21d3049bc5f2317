package snapshot

import (
	"testing"
	"time"
)

// TestFinishingAndTimings: once a run has emitted its last chunk it says
// so (Finishing), so a source checkpoints at once rather than at its next
// periodic status; the checkpoint that covers the chunks ends the run and
// Finishing with it. Timings count every chunk the stream met, and the
// readers' stages; none refused.
func TestFinishingAndTimings(t *testing.T) {
	parallelReads = true
	defer func() { parallelReads = false }()
	db := newFakeDB(100)
	e, s, _ := start(t, &memState{}, db, 10)
	if e.Finishing() {
		t.Fatal("Finishing with no run")
	}
	if err := e.Submit(t.Context(), Request{Table: "public.t"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !e.Finishing() {
		if time.Now().After(deadline) {
			t.Fatalf("the run never said it was finishing: %+v", e.Progress())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if p := e.Progress(); len(p) != 1 || !p[0].Finished.IsZero() {
		t.Fatalf("finishing before any checkpoint, the run is done already: %+v", p)
	}
	if got := len(keysOf(s.rows())); got != 100 {
		t.Fatalf("finishing with %d rows emitted, want 100", got)
	}
	waitDone(t, e, s)
	if e.Finishing() {
		t.Fatal("still finishing after the checkpoint ended the run")
	}
	tm := e.Timings()
	if tm.Chunks < 10 {
		t.Fatalf("timings count %d chunks met, want at least 10 (100 rows, 10 a chunk): %+v", tm.Chunks, tm)
	}
	if tm.Refused != 0 {
		t.Fatalf("timings count %d chunks refused, want none (nothing read again): %+v", tm.Refused, tm)
	}
	if tm.Read <= 0 || tm.Low <= 0 || tm.High <= 0 || tm.Meet <= 0 || tm.EngineWait <= 0 {
		t.Fatalf("a stage has no time: %+v", tm)
	}
}
