package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/internal/pgident"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// The operator's ways out of a source-side pause (pause.go), besides a
// re-snapshot and removing the table from the config:
//
//	POST /cdcd/tables/{table}/skip   skip what stops the table (cdcd table skip)
//
// {table} is the source table (public.orders), the Iceberg table
// (cdc.orders) or the topic.

// ErrNotPaused: the table named is not paused by the source side.
var ErrNotPaused = errors.New("daemon: table is not paused")

// SkipResult is what a skip did.
type SkipResult struct {
	Table string `json:"table"`
	// Skipped says what was skipped: the change sent to the dead-letter
	// topic, or the gap accepted.
	Skipped string `json:"skipped"`
	// DeadTopic is where it went.
	DeadTopic string `json:"dead_topic"`
	// Resumed: every held change is in the table's topic again. Otherwise
	// Paused says what stops the table now.
	Resumed bool         `json:"resumed"`
	Paused  *PausedTable `json:"paused,omitempty"`
}

// tableRoutes serves the table operations.
func (d *Daemon) tableRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /cdcd/tables/{table}/skip", func(w http.ResponseWriter, r *http.Request) {
		topic, ok := d.topicNamed(r.PathValue("table"))
		if !ok {
			http.Error(w, fmt.Sprintf("%s is not a table of this pipeline", r.PathValue("table")), http.StatusNotFound)
			return
		}
		res, err := d.emitter.skip(r.Context(), topic)
		switch {
		case errors.Is(err, ErrNotPaused):
			http.Error(w, err.Error(), http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
}

// topicNamed finds a configured table's topic by its source name, its
// Iceberg name or the topic itself.
func (d *Daemon) topicNamed(name string) (string, bool) {
	for topic, src := range d.sourceTables() {
		id := d.idents[topic]
		ns, tbl, _ := strings.Cut(src, ".")
		if name == topic || name == src || name == strings.Join(id, ".") || pgident.Normalize(name) == pgident.Canonical(ns, tbl) {
			return topic, true
		}
	}
	return "", false
}

// skip resolves topic's value or table pause: the fault record that stops
// it goes to the dead-letter topic (or, for a table pause, the gap is
// accepted and recorded there), then the held changes are replayed until
// drained or another one stops the table.
func (e *emitter) skip(ctx context.Context, topic string) (SkipResult, error) {
	e.mu.Lock()
	defer e.unlock()
	ps := e.paused[topic]
	if ps == nil {
		return SkipResult{}, fmt.Errorf("%w: %s", ErrNotPaused, topic)
	}
	res := SkipResult{Table: ps.Table, DeadTopic: deadTopic(topic)}
	if err := e.pipe.Wait(ctx); err != nil {
		return res, err
	}
	switch ps.kind() {
	case pauseSchema:
		return res, fmt.Errorf("%w by a fault: %s stops at a schema the registry refused; resolve it with %s", ErrNotPaused, ps.Table, ps.Fix)
	case pauseValue:
		recs, err := e.lg.Fetch(ctx, heldTopic(topic), 0, ps.Replayed, log.FetchOptions{MaxBytes: 1})
		if err != nil {
			return res, fmt.Errorf("daemon: read the held change of %s: %w", ps.Table, err)
		}
		if len(recs) == 0 || recs[0].Header(schema.HeaderFault) == nil {
			return res, fmt.Errorf("daemon: %s: the first held change (offset %d) is not the faulty one; nothing skipped", ps.Table, ps.Replayed)
		}
		ps.Skip = recs[0].Offset + 1
		res.Skipped = fmt.Sprintf("the change at position %s (key %s): %s", ps.Position, ps.Key, ps.Reason)
	case pauseTable:
		if err := e.acceptGap(ctx, ps); err != nil {
			return res, err
		}
		res.Skipped = "the gap: " + ps.Reason
	}
	ps.Replaying = true
	if err := e.savePause(ctx, ps); err != nil {
		return res, err
	}
	e.logger.Warn("skipping what stops a paused table", "table", ps.Table, "skipped", res.Skipped, "dead_letter_topic", res.DeadTopic)
	resumed, err := e.resumeLocked(ctx, topic)
	if err != nil {
		return res, err
	}
	res.Resumed = resumed
	if !resumed {
		if now := e.paused[topic]; now != nil {
			p := PausedTable{Table: now.Table, Topic: topic, Since: now.Since, Position: now.Position, Kind: now.kind(), Reason: now.Reason,
				Key: now.Key, Column: now.Column, Value: now.Value, Dead: now.Dead, Resolve: now.Fix}
			res.Paused = &p
		}
	}
	return res, nil
}

// deadLetter appends a skipped fault record, unchanged but for a header
// saying when it was skipped, to the table's dead-letter topic.
func (e *emitter) deadLetter(ctx context.Context, ps *pauseState, r log.Record) error {
	dead := deadTopic(ps.Topic)
	if err := ensureTopic(ctx, e.lg, dead, log.TopicConfig{Partitions: 1}); err != nil {
		return err
	}
	hs := append(append([]log.Header(nil), r.Headers...), log.Header{Key: schema.HeaderSkippedAt, Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))})
	if err := e.lg.Produce(ctx, dead, []log.Record{{Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}}); err != nil {
		return fmt.Errorf("daemon: append to %s: %w", dead, err)
	}
	ps.Dead++
	e.logger.Warn("a held change was skipped into the dead-letter topic", "table", ps.Table, "topic", dead, "key", string(r.Key),
		"position", fmt.Sprintf("%x", r.Header(HeaderPosition)))
	return nil
}

// acceptGap records in the dead-letter topic that the operator accepted a
// table pause's gap (changes the source missed) without a re-snapshot.
func (e *emitter) acceptGap(ctx context.Context, ps *pauseState) error {
	doc, err := json.Marshal(map[string]any{"table": ps.Table, "accepted_gap": true, "position": ps.Position,
		"reason": ps.Reason, "at": time.Now().UTC()})
	if err != nil {
		return err
	}
	dead := deadTopic(ps.Topic)
	if err := ensureTopic(ctx, e.lg, dead, log.TopicConfig{Partitions: 1}); err != nil {
		return err
	}
	if err := e.lg.Produce(ctx, dead, []log.Record{{Value: doc, Timestamp: time.Now()}}); err != nil {
		return fmt.Errorf("daemon: append to %s: %w", dead, err)
	}
	return nil
}
