package source

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestPipelineOrderDepthAndErrors(t *testing.T) {
	ctx := context.Background()
	var p Pipeline
	var running, peak atomic.Int32
	var order []int
	for i := 0; i < 20; i++ {
		if err := p.Go(ctx, func() error {
			n := running.Add(1)
			defer running.Add(-1)
			if n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(time.Millisecond)
			order = append(order, i) // functions never overlap: no race
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("order %v", order)
		}
	}
	if peak.Load() != 1 {
		t.Fatalf("%d functions ran at once", peak.Load())
	}
	boom := errors.New("boom")
	ran := false
	_ = p.Go(ctx, func() error { return boom })
	_ = p.Go(ctx, func() error { ran = true; return nil })
	if err := p.Wait(ctx); !errors.Is(err, boom) {
		t.Fatalf("Wait: %v", err)
	}
	if ran {
		t.Fatal("a function after a failure ran")
	}
	if err := p.Go(ctx, func() error { return nil }); !errors.Is(err, boom) {
		t.Fatalf("Go after a failure: %v", err)
	}
}
