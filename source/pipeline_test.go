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

// TestPipelineDone: Done counts the functions finished in order without
// waiting, never one still running or queued behind it, and stops at the
// first failure.
func TestPipelineDone(t *testing.T) {
	ctx := context.Background()
	p := Pipeline{Depth: 4}
	gates := make([]chan struct{}, 3)
	for i := range gates {
		gates[i] = make(chan struct{})
		if err := p.Go(ctx, func() error { <-gates[i]; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if q := p.Queued(); q != 3 {
		t.Fatalf("Queued %d, want 3", q)
	}
	waitDone := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			n, err := p.Done()
			if err != nil {
				t.Fatal(err)
			}
			if n == want {
				return
			}
			if n > want || time.Now().After(deadline) {
				t.Fatalf("Done %d, want %d", n, want)
			}
		}
	}
	close(gates[1]) // released first, the second still runs after the first
	time.Sleep(20 * time.Millisecond)
	waitDone(0)
	close(gates[0])
	waitDone(2)
	close(gates[2])
	waitDone(3)
	boom := errors.New("boom")
	_ = p.Go(ctx, func() error { return boom })
	_ = p.Wait(ctx)
	if n, err := p.Done(); n != 3 || !errors.Is(err, boom) {
		t.Fatalf("Done after a failure: %d, %v; want 3, boom", n, err)
	}
}
