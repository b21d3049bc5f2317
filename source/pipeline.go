package source

import (
	"context"
	"sync"
	"sync/atomic"
)

// Pipeline runs functions one after another, in the order they were
// handed to Go, in the background, with at most Depth of them started and
// not finished; an Emitter implements Pipeliner with it (Go for the
// append of an encoded batch, Wait for Sync). The zero value has depth 2.
// Go and Wait are called from one goroutine.
type Pipeline struct {
	Depth int

	last   chan struct{} // closed when the newest function has finished
	slots  chan struct{}
	queued uint64        // functions queued so far (Queued)
	done   atomic.Uint64 // the newest function finished without error, with all before it (Done)
	failed atomic.Bool   // err is set
	mu     sync.Mutex
	err    error // the first error; every later function is skipped
}

// Go queues fn after the functions queued before it, waiting while Depth
// of them are outstanding. It returns the first error any of them
// returned so far (fn is then not run).
func (p *Pipeline) Go(ctx context.Context, fn func() error) error {
	if p.slots == nil {
		p.slots = make(chan struct{}, max(p.Depth, 2))
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := p.Err(); err != nil {
		<-p.slots
		return err
	}
	prev, finished := p.last, make(chan struct{})
	p.last = finished
	p.queued++
	n := p.queued
	go func() {
		defer close(finished)
		defer func() { <-p.slots }()
		if prev != nil {
			<-prev
		}
		if p.failed.Load() {
			return
		}
		if err := fn(); err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
				p.failed.Store(true)
			}
			p.mu.Unlock()
			return
		}
		p.done.Store(n) // the functions run one after another: n is the newest
	}()
	return nil
}

// Queued returns how many functions Go has queued so far: the number of
// the newest one (the first is 1). Called from Go's goroutine.
func (p *Pipeline) Queued() uint64 { return p.queued }

// Done returns the number of the newest function that finished without
// error (every one before it did too; 0: none), and the first error of
// any. It does not wait; safe to call from any goroutine.
func (p *Pipeline) Done() (uint64, error) {
	n := p.done.Load()
	if !p.failed.Load() {
		return n, nil
	}
	return n, p.Err()
}

// Wait returns once every queued function has finished, with the first
// error of any.
func (p *Pipeline) Wait(ctx context.Context) error {
	if p.last != nil {
		select {
		case <-p.last:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return p.Err()
}

// Err returns the first error so far.
func (p *Pipeline) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
