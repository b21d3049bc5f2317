package mysql

import (
	"context"
	"errors"
	"testing"

	"github.com/cdcd-dev/cdcd/source"
)

// failingSubmit is a Pipeliner whose Submit fails.
type failingSubmit struct{ calls int }

var errSubmit = errors.New("test: submit failed")

func (f *failingSubmit) Submit(context.Context, []source.Change) error { f.calls++; return errSubmit }
func (f *failingSubmit) Sync(context.Context) error                    { return nil }
func (f *failingSubmit) Emit(context.Context, []source.Change) error   { return nil }

// TestHandoverFailureSticks: once a Submit on the hand-over's goroutine
// failed, every later wait fails with its error. The failed batch's
// changes are gone from the stream's buffers; a wait that succeeded
// afterwards would let a stop's final flush emit the kept change and save
// a checkpoint past changes that never reached the log. The in-flight
// buffers come back emptied as the spare set.
func TestHandoverFailureSticks(t *testing.T) {
	var h handover
	if err := h.wait(); err != nil {
		t.Fatalf("wait with nothing in flight: %v", err)
	}
	out := &streamBufs{batch: []source.Change{{Op: source.OpCreate}, {Op: source.OpCreate}}}
	out.arena.next(3)
	out.places, out.placed = make([]source.BinlogPlace, 2), 2
	p := &failingSubmit{}
	counted := 0
	h.start(t.Context(), p, out, func(n int) { counted += n })
	for i := range 3 {
		if err := h.wait(); !errors.Is(err, errSubmit) {
			t.Fatalf("wait %d after a failed Submit: %v, want its error", i, err)
		}
	}
	if counted != 0 || p.calls != 1 {
		t.Errorf("counted %d changes of a failed Submit; %d Submits", counted, p.calls)
	}
	spare := h.takeSpare()
	if spare != out || len(spare.batch) != 0 || spare.placed != 0 || spare.arena.i != 0 || spare.arena.off != 0 {
		t.Errorf("the spare set is not the in-flight one emptied: %+v", spare)
	}
}
