package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// Target is where a Relay delivers events: the log, a webhook.
type Target interface {
	// Name identifies the target in logs, metrics and saved state.
	Name() string
	// Deliver returns once every message is at the target, or in the
	// target's dead-letter topic. Messages come in source order, batch
	// after batch, from one goroutine; after a restart a message may come
	// again, and a target that knows it has it drops it. An error means
	// none of them may be assumed delivered: the source re-sends them.
	// Deliver must not keep or change msgs.
	Deliver(ctx context.Context, msgs []Message) error
	// Stats returns the target's live counters.
	Stats() *TargetStats
}

// Queue is an optional ability of a Target (found by type assertion): its
// Deliver returns once the events are queued, and Run delivers them. The
// relay holds the source's position back before the oldest event queued
// (source.Holder), so events queued and not delivered come again after a
// restart.
type Queue interface {
	// Run delivers queued events until ctx ends or a terminal error.
	Run(ctx context.Context) error
	// Oldest returns the position and commit time of the oldest event
	// queued and not delivered yet, and false when there is none.
	Oldest() (pos source.Position, commit time.Time, ok bool)
	// Flush returns once every event up to pos is delivered.
	Flush(ctx context.Context, pos source.Position) error
}

// TargetStats are one target's counters, safe to read while it runs.
type TargetStats struct {
	Delivered    atomic.Int64 // events the target took (appended, or accepted by the receiver)
	Duplicates   atomic.Int64 // events dropped as delivered before (after a restart)
	Attempts     atomic.Int64 // requests sent (webhooks)
	Failures     atomic.Int64 // attempts that failed: an error, a timeout, a status other than 2xx
	DeadLettered atomic.Int64 // events given up on, appended to the dead-letter topic
	InFlight     atomic.Int64 // events being delivered now
	Queued       atomic.Int64 // events queued and not delivered yet (a Queue)
	// FailingSince is when the oldest event still undelivered first
	// failed (Unix ms); 0 while nothing fails.
	FailingSince atomic.Int64
	// LastError is the last failure's text (nil before any).
	LastError atomic.Pointer[string]
	// Latency, when set (before the target runs), is called for each
	// event a Queue delivered, with the time from its commit until then.
	Latency func(time.Duration)
}

// Config configures a Relay.
type Config struct {
	Route
	// Mirrored: the outbox table is also a mirrored table, so its changes
	// go on to the next Emitter as well.
	Mirrored bool
	// Log receives events the relay cannot route (a missing field, a
	// message that is not JSON) in DeadLetterTopic, with the reason in the
	// header cdcd.error. Required.
	Log             log.Log
	DeadLetterTopic string
}

// Stats are the relay's counters, safe to read while it runs.
type Stats struct {
	Events    atomic.Int64 // events every target has (or has queued)
	Malformed atomic.Int64 // events that could not be routed (dead-letter topic)
	Ignored   atomic.Int64 // updates of the outbox table (not events)
	Pending   atomic.Int64 // events handed to the targets and not yet at all of them
	// oldest is the commit time (Unix ms) of the oldest pending event.
	oldest atomic.Int64
	// LastCommit is the commit time (Unix ms) of the newest event every
	// target has.
	LastCommit atomic.Int64
	// Latency, when set (before Run), is called for each event every
	// target has (a Queue: has queued), with the time from its commit
	// until then. TargetStats.Latency is a Queue's own.
	Latency func(time.Duration)
}

// Relay is the source.Emitter that takes the outbox's events out of the
// source's stream and hands them to every target, passing the other
// changes on to the next Emitter (the table mirror). Emit returns once
// both the next Emitter and every target have their part, so the source
// confirms a position only when every target has every event up to it.
// Batches are handled one at a time: events of one aggregate reach each
// target in source order.
type Relay struct {
	rt       *router
	next     source.Emitter
	targets  []Target
	mirrored bool
	lg       log.Log
	dead     string
	logger   *slog.Logger
	stats    Stats

	mu   sync.Mutex // Emit, Submit and Sync
	rest []source.Change
	msgs []Message
}

var (
	_ source.Emitter   = (*Relay)(nil)
	_ source.Pipeliner = (*Relay)(nil)
	_ source.Preparer  = (*Relay)(nil)
	_ source.Holder    = (*Relay)(nil)

	_ source.CatchUpNotifier = (*Relay)(nil)
)

// New returns a Relay in front of next.
func New(cfg Config, next source.Emitter, targets []Target, logger *slog.Logger) (*Relay, error) {
	if cfg.Log == nil || cfg.DeadLetterTopic == "" {
		return nil, errors.New("outbox: a relay needs a log and a dead-letter topic for events it cannot route")
	}
	if len(targets) == 0 {
		return nil, errors.New("outbox: a relay needs at least one target")
	}
	logger = logger.With("component", "outbox")
	r := &Relay{next: next, targets: targets, mirrored: cfg.Mirrored, lg: cfg.Log, dead: cfg.DeadLetterTopic, logger: logger}
	r.rt = newRouter(cfg.Route, func(msg string, args ...any) { logger.Warn(msg, args...) })
	return r, nil
}

// Stats returns the relay's live counters.
func (r *Relay) Stats() *Stats { return &r.stats }

// Run runs the targets that queue (Queue) until ctx ends or one fails.
// REQUIRES: running while the source emits; the source then re-sends what
// was queued and not delivered.
func (r *Relay) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(r.targets))
	var wg sync.WaitGroup
	for i, t := range r.targets {
		if q, ok := t.(Queue); ok {
			wg.Go(func() {
				if errs[i] = q.Run(ctx); errs[i] != nil {
					cancel()
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Held is the position of the oldest event a target has queued and not
// delivered: the source confirms nothing from its transaction on.
func (r *Relay) Held() (source.Position, bool) {
	var oldest source.Position
	for _, t := range r.targets {
		if q, ok := t.(Queue); ok {
			if p, _, ok := q.Oldest(); ok && (oldest == nil || p.Compare(oldest) < 0) {
				oldest = p
			}
		}
	}
	return oldest, oldest != nil
}

// Lag is how long the oldest event not yet at every target has waited
// since its commit (0 when none waits): how far the relay is behind.
func (r *Relay) Lag(now time.Time) time.Duration {
	var lag time.Duration
	if ms := r.stats.oldest.Load(); ms != 0 && r.stats.Pending.Load() > 0 {
		lag = now.Sub(time.UnixMilli(ms))
	}
	for _, t := range r.targets {
		if q, ok := t.(Queue); ok {
			if _, commit, ok := q.Oldest(); ok {
				lag = max(lag, now.Sub(commit))
			}
		}
	}
	return max(0, lag)
}

// Targets returns the relay's targets.
func (r *Relay) Targets() []Target { return r.targets }

// Emit relays batch's events and emits the rest; it returns once all of it
// is durable downstream.
func (r *Relay) Emit(ctx context.Context, batch []source.Change) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs, rest, err := r.split(ctx, batch)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		if len(rest) == 0 {
			return nil
		}
		return r.next.Emit(ctx, rest)
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.deliver(dctx, msgs) }()
	var err1 error
	if len(rest) > 0 {
		if err1 = r.next.Emit(ctx, rest); err1 != nil {
			cancel() // the source re-sends the batch anyway
		}
	}
	return errors.Join(err1, <-done)
}

// Submit relays batch's events (before it returns) and submits the rest to
// the next Emitter's pipeline (see source.Pipeliner).
func (r *Relay) Submit(ctx context.Context, batch []source.Change) error {
	p, ok := r.next.(source.Pipeliner)
	if !ok {
		return r.Emit(ctx, batch)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs, rest, err := r.split(ctx, batch)
	if err != nil {
		return err
	}
	if len(msgs) > 0 {
		// A load saves its progress as it goes, not by the source's
		// position: its events must be delivered, not just queued.
		if err := r.deliver(ctx, msgs); err != nil {
			return err
		}
		for _, t := range r.targets {
			if q, ok := t.(Queue); ok {
				if err := q.Flush(ctx, msgs[len(msgs)-1].Pos); err != nil {
					return err
				}
			}
		}
	}
	if len(rest) == 0 {
		return nil
	}
	return p.Submit(ctx, rest)
}

// CaughtUp passes the source's catch-up on to the next Emitter
// (source.CatchUpNotifier), so the mirror's tables commit what they hold
// at once rather than at their interval. Submit hands the batches before
// it to the next Emitter before it returns, so the notice comes after
// them there too. The outbox's own targets need no notice: an event is
// delivered before the batch that holds it is acknowledged.
func (r *Relay) CaughtUp() {
	if n, ok := r.next.(source.CatchUpNotifier); ok {
		n.CaughtUp()
	}
}

// Prepare hands batch to the next Emitter to encode ahead
// (source.Preparer); the changes it relays are not encoded there.
func (r *Relay) Prepare(batch []source.Change) {
	if p, ok := r.next.(source.Preparer); ok {
		p.Prepare(batch)
	}
}

// Sync returns once every batch submitted is durable downstream.
func (r *Relay) Sync(ctx context.Context) error {
	if p, ok := r.next.(source.Pipeliner); ok {
		return p.Sync(ctx)
	}
	return nil
}

// split routes batch's events into msgs and keeps the other changes (and
// the outbox table's, when mirrored) in rest; events that cannot be routed
// go to the dead-letter topic at once. Both slices are reused by the next
// call.
func (r *Relay) split(ctx context.Context, batch []source.Change) (msgs []Message, rest []source.Change, err error) {
	r.msgs, r.rest = r.msgs[:0], r.rest[:0]
	first := -1
	for i := range batch {
		if r.rt.isEvent(&batch[i]) {
			first = i
			break
		}
	}
	if first < 0 {
		return nil, batch, nil // no event: the batch goes on as it is
	}
	r.rest = append(r.rest, batch[:first]...)
	var bad []log.Record
	for i := first; i < len(batch); i++ {
		c := &batch[i]
		if !r.rt.isEvent(c) {
			r.rest = append(r.rest, *c)
			continue
		}
		if c.Message == nil && r.mirrored {
			r.rest = append(r.rest, *c)
		}
		m, ok, err := r.rt.route(c)
		switch {
		case err != nil:
			bad = append(bad, malformed(c, err))
			r.logger.Error("an outbox event cannot be routed; it goes to the dead-letter topic", "topic", r.dead,
				"err", err, "what_to_do", "fix the service that writes it; read the event with cdcd log consume "+r.dead)
		case ok:
			r.msgs = append(r.msgs, m)
		case c.Op == source.OpUpdate:
			r.stats.Ignored.Add(1)
		}
	}
	if len(bad) > 0 {
		if err := r.lg.Produce(ctx, r.dead, bad); err != nil {
			return nil, nil, fmt.Errorf("outbox: append unroutable events to %s: %w", r.dead, err)
		}
		r.stats.Malformed.Add(int64(len(bad)))
	}
	// The source reuses its changes after Emit: rest holds copies of the
	// Change structs, whose rows the next Emitter reads before returning.
	return r.msgs, r.rest, nil
}

// deliver hands msgs to every target at once and waits for all of them.
func (r *Relay) deliver(ctx context.Context, msgs []Message) error {
	r.stats.oldest.Store(msgs[0].Commit.UnixMilli())
	r.stats.Pending.Store(int64(len(msgs)))
	defer r.stats.Pending.Store(0)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(r.targets))
	var wg sync.WaitGroup
	for i, t := range r.targets {
		wg.Go(func() {
			if errs[i] = t.Deliver(ctx, msgs); errs[i] != nil {
				errs[i] = fmt.Errorf("outbox: target %s: %w", t.Name(), errs[i])
				cancel() // the batch comes again whole
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	now := time.Now()
	r.stats.Events.Add(int64(len(msgs)))
	r.stats.LastCommit.Store(msgs[len(msgs)-1].Commit.UnixMilli())
	if f := r.stats.Latency; f != nil {
		for i := range msgs {
			f(now.Sub(msgs[i].Commit))
		}
	}
	return nil
}

// HeaderError names why an event went to a dead-letter topic.
const HeaderError = "cdcd.error"

// malformed is the dead-letter record of an event that cannot be routed:
// the message's content, or the row as a JSON object.
func malformed(c *source.Change, err error) log.Record {
	var value []byte
	if c.Message != nil {
		value = append([]byte(nil), c.Message.Content...)
	} else if c.Table != nil && c.After != nil {
		row := make(map[string]any, len(c.Table.Columns))
		for i, col := range c.Table.Columns {
			if i < len(c.After) && c.After[i] != nil {
				row[col.Name] = valueText(c.After[i])
			}
		}
		value, _ = json.Marshal(row)
	}
	return log.Record{Value: value, Timestamp: c.CommitTime, Partition: 0, Headers: []log.Header{
		{Key: HeaderError, Value: []byte(err.Error())}, {Key: schema.HeaderPosition, Value: append([]byte(nil), c.Pos...)}}}
}
