package daemon

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// A table the emitter cannot feed its topic is paused, alone: from the
// change that stopped it on, its changes go, in order, to the holding
// topic _cdcd_held.<topic> (one partition), while the other tables flow
// and the source confirms its position as usual (held changes are
// durable). What stopped it — the kind — decides how it resumes:
//
//   - schema: the registry refused the table's new schema. It resumes by
//     itself once the registry accepts it (cdcd schema accept, or a
//     compatibility change): the held changes are replayed into the topic.
//   - value: a change could not be read or encoded (a timestamp past year
//     294247, a NaN in a numeric(p,s), a 2-D value in a 1-D array column,
//     invalid UTF-8); it is held as a fault record (fault.go). `cdcd table
//     skip` moves it to the dead-letter topic _cdcd_dead.<topic> and
//     replays the rest; a later faulty change stops the table again.
//   - table: the source lost track of the table (dropped, re-created,
//     left out of the publication, a publication that stopped publishing
//     an operation), so changes were missed. A re-snapshot of the table
//     (cdcd snapshot --replace) repairs it; `cdcd table skip` resumes it
//     accepting the gap.
//
// Any pause also ends with a re-snapshot's reset marker (the held changes
// before it are superseded by the snapshot), or when the table leaves the
// config. A pause is kept in the state topic under "pause/<topic>", so it
// survives restarts.

// Pause kinds.
const (
	pauseSchema = "schema"
	pauseValue  = "value"
	pauseTable  = "table"
)

// pauseState is a paused table.
type pauseState struct {
	Topic string    `json:"topic"`
	Table string    `json:"table"`
	Since time.Time `json:"since"`
	// Position is the source position (hex) of the change that stopped the
	// table.
	Position string `json:"position"`
	// Kind is one of the pause kinds; empty in pauses of older runs, which
	// were all schema pauses.
	Kind   string `json:"kind,omitempty"`
	Reason string `json:"reason"`
	// Fix says what resolves the pause.
	Fix string `json:"fix,omitempty"`
	// Subject is the subject that refused the schema (schema pauses).
	Subject string `json:"subject,omitempty"`
	// Key, Column and Value name a faulty value (value pauses).
	Key    string `json:"key,omitempty"`
	Column string `json:"column,omitempty"`
	Value  string `json:"value,omitempty"`
	// Replayed is the next offset of the holding topic to replay.
	Replayed int64 `json:"replayed"`
	// Skip, when set, is the offset+1 of the fault record `cdcd table skip`
	// sends to the dead-letter topic.
	Skip int64 `json:"skip,omitempty"`
	// Replaying: the operator resolved a value or table pause (cdcd table
	// skip); the held changes are replayed until they are drained or
	// another one stops the table. Schema pauses are always retried.
	Replaying bool `json:"replaying,omitempty"`
	// Dead counts the changes this table sent to the dead-letter topic.
	Dead int64 `json:"dead,omitempty"`
}

func (ps *pauseState) kind() string {
	if ps.Kind == "" {
		return pauseSchema
	}
	return ps.Kind
}

// PausedTable is a paused table as /status shows it.
type PausedTable struct {
	// Table is the Iceberg table, Source the captured one.
	Table    string    `json:"table"`
	Source   string    `json:"source,omitempty"`
	Topic    string    `json:"topic"`
	Since    time.Time `json:"since"`
	Position string    `json:"position,omitempty"`
	// Kind is schema, value or table (the emitter's), or sink.
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	// Key, Column and Value name the faulty value of a value pause.
	Key    string `json:"key,omitempty"`
	Column string `json:"column,omitempty"`
	Value  string `json:"value,omitempty"`
	// Held is how many changes wait in the holding topic; Dead how many
	// were skipped into the dead-letter topic.
	Held int64 `json:"held"`
	Dead int64 `json:"dead,omitempty"`
	// Resolve says what the operator can do.
	Resolve string `json:"resolve"`
}

const pauseKeyPrefix = "pause/"

// heldTopic is where a paused table's changes wait.
func heldTopic(topic string) string { return "_cdcd_held." + topic }

// schemaPause is the pause of a table whose schema the registry refused,
// from change c on.
func schemaPause(tc *tableCodec, c *source.Change) *pauseState {
	ps := &pauseState{Topic: tc.topic, Table: c.Table.QualifiedName(), Position: hex.EncodeToString(c.Pos), Kind: pauseSchema}
	ps.setSchemaRefusal(tc.refused, c.Table.QualifiedName())
	return ps
}

// setSchemaRefusal makes ps a schema pause for the registry's refusal err.
func (ps *pauseState) setSchemaRefusal(err error, table string) {
	ps.Kind, ps.Reason, ps.Key, ps.Column, ps.Value = pauseSchema, err.Error(), "", "", ""
	var inc *schema.IncompatibleError
	if errors.As(err, &inc) {
		var parts []string
		for _, p := range inc.Problems {
			parts = append(parts, p.String())
		}
		ps.Reason = fmt.Sprintf("table %s changed incompatibly (%s compatibility of %s): %s", table, inc.Level, inc.Subject, strings.Join(parts, "; "))
		ps.Subject = inc.Subject
	}
	ps.Fix = fmt.Sprintf("cdcd schema rejected shows the change; cdcd schema accept %s registers it (or cdcd schema set-compat %s NONE); "+
		"the table then resumes where it stopped", ps.Subject, ps.Subject)
}

// faultPause is the pause of a table stopped by fault f at change c.
func faultPause(topic string, c *source.Change, f *source.Fault) *pauseState {
	ps := &pauseState{Topic: topic, Table: c.Table.QualifiedName(), Position: hex.EncodeToString(c.Pos),
		Kind: pauseTable, Reason: f.Reason, Fix: f.Fix}
	if rowOf(c) != nil {
		ps.Kind, ps.Key, ps.Column, ps.Value = pauseValue, keyText(c), f.Column, f.Value
	}
	return ps
}

// pause stops topic's table with ps; its changes are held from now on.
func (e *emitter) pause(ctx context.Context, ps *pauseState) error {
	held := heldTopic(ps.Topic)
	if err := ensureTopic(ctx, e.lg, held, log.TopicConfig{Partitions: 1}); err != nil {
		return err
	}
	if _, ok := e.last[held]; !ok {
		if err := e.loadLast(ctx, held); err != nil {
			return err
		}
	}
	if prev := e.paused[ps.Topic]; prev != nil {
		ps.Replayed, ps.Dead = prev.Replayed, prev.Dead
	} else if info, err := e.lg.DescribeTopic(ctx, held); err == nil && len(info.Partitions) > 0 {
		ps.Replayed = info.Partitions[0].End // what an earlier pause held was replayed or dropped
	}
	ps.Since = time.Now().UTC()
	if err := e.savePause(ctx, ps); err != nil {
		return err
	}
	e.paused[ps.Topic] = ps
	e.announcePause(ps)
	return nil
}

// announcePause logs a new pause and wakes the monitor, so the alert fires
// at once.
func (e *emitter) announcePause(ps *pauseState) {
	e.logger.Error("table paused: its changes are held, the other tables flow", "table", ps.Table, "kind", ps.kind(),
		"position", ps.Position, "reason", ps.Reason, "what_to_do", ps.Fix)
	e.pokeOnUnlock = e.onPause != nil // once the pause is published
}

// tableFault stops a table for a fault of the whole table (no row): a new
// pause, or an existing one of another kind turned into a table pause (its
// gap must be repaired too).
func (e *emitter) tableFault(ctx context.Context, topic string, c *source.Change) error {
	f := c.Fault
	prev := e.paused[topic]
	switch {
	case prev == nil:
		return e.pause(ctx, faultPause(topic, c, f))
	case prev.kind() == pauseTable && prev.Reason == f.Reason:
		return nil // known: the source says so again
	}
	reason := f.Reason
	if prev.kind() != pauseTable {
		reason += " (it was paused already: " + prev.Reason + ")"
	}
	prev.Kind, prev.Reason, prev.Fix, prev.Skip, prev.Replaying = pauseTable, reason, f.Fix, 0, false
	prev.Position, prev.Since = hex.EncodeToString(c.Pos), time.Now().UTC()
	if err := e.savePause(ctx, prev); err != nil {
		return err
	}
	e.announcePause(prev)
	return nil
}

func (e *emitter) savePause(ctx context.Context, ps *pauseState) error {
	b, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	return e.state.Save(ctx, pauseKeyPrefix+ps.Topic, b)
}

// loadPaused restores the pauses of an earlier run; a pause of a topic
// that is not configured any more (the table left the config) is dropped
// with what it held.
func (e *emitter) loadPaused(ctx context.Context, configured []string) error {
	for _, k := range e.state.Keys(pauseKeyPrefix) {
		b, _ := e.state.Load(ctx, k)
		if b == nil {
			continue
		}
		var ps pauseState
		if err := json.Unmarshal(b, &ps); err != nil {
			return fmt.Errorf("daemon: stored pause %s: %w", k, err)
		}
		if !contains(configured, ps.Topic) {
			if err := e.state.Save(ctx, k, nil); err != nil {
				return err
			}
			e.logger.Warn("a paused table is no longer configured: its pause and held changes are dropped", "table", ps.Table,
				"reason", ps.Reason, "held_topic", heldTopic(ps.Topic))
			continue
		}
		held := heldTopic(ps.Topic)
		if err := ensureTopic(ctx, e.lg, held, log.TopicConfig{Partitions: 1}); err != nil {
			return err
		}
		if err := e.loadLast(ctx, held); err != nil {
			return err
		}
		e.paused[ps.Topic] = &ps
		e.publishPaused()
		e.logger.Warn("table is paused since an earlier run", "table", ps.Table, "kind", ps.kind(), "reason", ps.Reason, "what_to_do", ps.Fix)
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// heldRecord encodes a change of a paused table: Avro bodies without
// framing, and the schemas in headers. A change whose row cannot be
// encoded becomes a fault record (it stops the replay there), and its
// fault is returned.
func (e *emitter) heldRecord(tc *tableCodec, c *source.Change) (log.Record, *source.Fault, error) {
	if c.Fault != nil {
		r, err := e.faultRecord(c, c.Fault)
		return r, c.Fault, err
	}
	env := e.envelope(c, time.Now().UnixNano())
	value, err := schema.AppendEnvelope(nil, c.Table, &env)
	var key []byte
	if row := rowOf(c); row != nil && err == nil {
		key, err = schema.AppendKey(nil, c.Table, row)
	}
	if err != nil {
		f := valueFault(c, err)
		if f == nil {
			return log.Record{}, nil, err
		}
		r, err := e.faultRecord(c, f)
		return r, f, err
	}
	h := append(e.headers(c), log.Header{Key: HeaderKeySchema, Value: []byte(tc.keySchema)},
		log.Header{Key: HeaderValueSchema, Value: []byte(tc.valueSchema)},
		log.Header{Key: schema.HeaderOp, Value: []byte{byte(c.Op)}})
	return log.Record{Key: key, Value: value, Headers: h, Timestamp: c.CommitTime, Partition: 0}, nil, nil
}

func rowOf(c *source.Change) []any {
	if c.After != nil {
		return c.After
	}
	return c.Before
}

// resumeLoop retries the paused tables at once and then every interval
// until ctx ends. The first try also records again, in the registry, the
// refusals of tables paused before a restart (it keeps them in memory), so
// `cdcd schema rejected` and `accept` see them soon after the start.
func (e *emitter) resumeLoop(ctx context.Context, every time.Duration) error {
	if err := e.tryResume(ctx); err != nil && ctx.Err() == nil {
		e.logger.Warn("resuming a paused table failed; will retry", "err", err)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := e.tryResume(ctx); err != nil && ctx.Err() == nil {
				e.logger.Warn("resuming a paused table failed; will retry", "err", err)
			}
		}
	}
}

// tryResume replays what paused tables hold where the cause may be gone:
// the registry may accept a refused schema now; a skip was asked for.
func (e *emitter) tryResume(ctx context.Context) error {
	e.mu.Lock()
	defer e.unlock()
	for topic := range e.paused {
		if _, err := e.resumeLocked(ctx, topic); err != nil {
			return err
		}
	}
	return nil
}

// resumeLocked replays topic's held changes if its pause may be resolved,
// and ends the pause once they are all in the topic; it reports whether it
// did.
func (e *emitter) resumeLocked(ctx context.Context, topic string) (bool, error) {
	ps := e.paused[topic]
	if ps == nil {
		return true, nil
	}
	if ps.kind() != pauseSchema && !ps.Replaying {
		return false, nil // waits for the operator
	}
	// Held records still in the pipeline must be in the holding topic
	// before it is drained.
	if err := e.pipe.Wait(ctx); err != nil {
		return false, err
	}
	done, err := e.replay(ctx, ps)
	if err != nil || !done {
		return false, err
	}
	return true, e.endPause(ctx, ps, "table resumed: its held changes are in its topic again")
}

// endPause forgets ps: the table's changes go to its topic again.
func (e *emitter) endPause(ctx context.Context, ps *pauseState, msg string) error {
	delete(e.paused, ps.Topic)
	if err := e.state.Save(ctx, pauseKeyPrefix+ps.Topic, nil); err != nil {
		return err
	}
	// Table versions refused earlier must register afresh.
	for t, c := range e.codecs {
		if c.topic == ps.Topic {
			delete(e.codecs, t)
		}
	}
	e.logger.Info(msg, "table", ps.Table, "skipped_to_dead_letter", ps.Dead)
	return nil
}

// liftPause ends a table's pause at a reset marker (a re-snapshot that
// replaces the table): the changes it holds are superseded — the table is
// emptied at the marker and read again — so they are dropped, not
// replayed. REQUIRES: e.mu held. A table whose schema the registry still
// refuses pauses again at the marker (Submit).
func (e *emitter) liftPause(ctx context.Context, topic, reset string) error {
	ps := e.paused[topic]
	held := int64(0)
	if info, err := e.lg.DescribeTopic(ctx, heldTopic(topic)); err == nil && len(info.Partitions) > 0 {
		held = info.Partitions[0].End - ps.Replayed
	}
	e.logger.Warn("a re-snapshot replaces the paused table: the changes it held are superseded and dropped",
		"table", ps.Table, "held", held, "kind", ps.kind(), "paused_since", ps.Since, "reason", ps.Reason, "reset", reset)
	return e.endPause(ctx, ps, "table resumed at its re-snapshot's reset marker")
}

// replay moves held records to the table's topic as long as each can go:
// a schema the registry refuses, or a fault record not to be skipped,
// stops it there (the pause then says why); done once the holding topic
// is drained.
func (e *emitter) replay(ctx context.Context, ps *pauseState) (bool, error) {
	held := heldTopic(ps.Topic)
	ids := map[string]uint32{}
	register := func(subject, s string) (uint32, error) {
		if id, ok := ids[subject+"\x00"+s]; ok {
			return id, nil
		}
		id, err := e.reg.Register(ctx, subject, s)
		if err == nil {
			ids[subject+"\x00"+s] = id
		}
		return id, err
	}
	if _, ok := e.last[ps.Topic]; !ok {
		if err := e.loadLast(ctx, ps.Topic); err != nil {
			return false, err
		}
	}
	for {
		recs, err := e.lg.Fetch(ctx, held, 0, ps.Replayed, log.FetchOptions{MaxBytes: 4 << 20})
		if errors.Is(err, log.ErrOffsetOutOfRange) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if len(recs) == 0 {
			return true, nil
		}
		var out []log.Record
		newest := make([]source.Position, e.partitions)
		last := e.last[ps.Topic]
		stopped := false
	records:
		for _, r := range recs {
			if fh := r.Header(schema.HeaderFault); fh != nil {
				if ps.Skip != r.Offset+1 {
					if err := e.stopAtFault(ctx, ps, fh); err != nil {
						return false, err
					}
					stopped = true
					break records
				}
				if err := e.deadLetter(ctx, ps, r); err != nil {
					return false, err
				}
				ps.Replayed = r.Offset + 1
				continue
			}
			kid, err := register(ps.Topic+"-key", string(r.Header(HeaderKeySchema)))
			var vid uint32
			if err == nil {
				vid, err = register(ps.Topic+"-value", string(r.Header(HeaderValueSchema)))
			}
			var inc *schema.IncompatibleError
			if errors.As(err, &inc) {
				// A replay past a skip, or past a refusal the operator
				// resolved (a key subject accepted, then its value
				// subject refused), meets another refusal: the pause
				// names this one, or its fix would stay the old one.
				was, reason := ps.kind(), ps.Reason
				ps.setSchemaRefusal(inc, ps.Table)
				if was != pauseSchema || ps.Reason != reason {
					ps.Position, ps.Skip, ps.Replaying = hex.EncodeToString(r.Header(HeaderPosition)), 0, false
					e.announcePause(ps)
				}
				stopped = true
				break // still refused: stay paused
			}
			if err != nil {
				return false, err
			}
			out = append(out, e.replayed(r, kid, vid, last, newest)...)
			ps.Replayed = r.Offset + 1
		}
		if len(out) > 0 {
			if err := e.produce(ctx, ps.Topic, out, newest); err != nil {
				return false, err
			}
		}
		if err := e.savePause(ctx, ps); err != nil {
			return false, err
		}
		if stopped || ps.Replayed <= recs[0].Offset {
			return false, nil
		}
	}
}

// replayed turns a held change record into the topic's records (one per
// partition for a truncate), leaving out what the topic holds already.
func (e *emitter) replayed(r log.Record, kid, vid uint32, last, newest []source.Position) []log.Record {
	pos := source.Position(r.Header(HeaderPosition))
	value := append(schema.AppendFrame(nil, vid), r.Value...)
	hs := []log.Header{{Key: HeaderPosition, Value: pos}, {Key: HeaderTxID, Value: r.Header(HeaderTxID)}}
	if kc := r.Header(HeaderKeyChange); kc != nil {
		hs = append(hs, log.Header{Key: HeaderKeyChange, Value: kc})
	}
	if rs := r.Header(HeaderReset); rs != nil {
		hs = append(hs, log.Header{Key: HeaderReset, Value: rs})
	}
	var out []log.Record
	if r.Key == nil { // a truncate: every partition
		for p := int32(0); p < e.partitions; p++ {
			if last[p] == nil || pos.Compare(last[p]) > 0 {
				out = append(out, log.Record{Value: value, Headers: hs, Timestamp: r.Timestamp, Partition: p})
				newest[p] = pos
			}
		}
		return out
	}
	key := append(schema.AppendFrame(nil, kid), r.Key...)
	p := log.PartitionFor(r.Key, e.partitions)
	if last[p] == nil || pos.Compare(last[p]) > 0 {
		out = append(out, log.Record{Key: key, Value: value, Headers: hs, Timestamp: r.Timestamp, Partition: p})
		if e.tombstones && string(r.Header(schema.HeaderOp)) == string(source.OpDelete) {
			out = append(out, log.Record{Key: key, Headers: hs, Timestamp: r.Timestamp, Partition: p}) // as records() does
		}
		newest[p] = pos
	}
	return out
}

// stopAtFault makes ps a value pause for the fault record whose cdcd.fault
// header is fh (where the replay stopped), unless it is that pause already.
func (e *emitter) stopAtFault(ctx context.Context, ps *pauseState, fh []byte) error {
	var fi faultInfo
	if err := json.Unmarshal(fh, &fi); err != nil {
		return fmt.Errorf("daemon: fault record of %s: %w", ps.Table, err)
	}
	again := ps.kind() == pauseValue && ps.Position == fi.Position
	ps.Kind, ps.Reason, ps.Fix, ps.Key, ps.Column, ps.Value = pauseValue, fi.Reason, fi.Fix, fi.Key, fi.Column, fi.Value
	ps.Position, ps.Skip, ps.Replaying = fi.Position, 0, false
	if !again {
		ps.Since = time.Now().UTC()
		e.announcePause(ps)
	}
	return nil
}

// Paused lists the tables the emitter holds.
func (e *emitter) Paused() []PausedTable {
	var out []PausedTable
	for _, ps := range e.pausedCopy() {
		held := int64(0)
		if info, err := e.lg.DescribeTopic(context.Background(), heldTopic(ps.Topic)); err == nil && len(info.Partitions) > 0 {
			held = info.Partitions[0].End - ps.Replayed
		}
		out = append(out, PausedTable{Table: ps.Table, Source: ps.Table, Topic: ps.Topic, Since: ps.Since, Position: ps.Position, Kind: ps.kind(),
			Reason: ps.Reason, Key: ps.Key, Column: ps.Column, Value: ps.Value, Held: held, Dead: ps.Dead, Resolve: ps.Fix})
	}
	return out
}

// pauseOf returns a copy of topic's pause, or nil.
func (e *emitter) pauseOf(topic string) *pauseState {
	if ps, ok := e.pausedCopy()[topic]; ok {
		return &ps
	}
	return nil
}

// pausedCopy returns the pauses as last published; it does not wait for
// e.mu.
func (e *emitter) pausedCopy() map[string]pauseState {
	if v := e.pausedView.Load(); v != nil {
		return *v
	}
	return nil
}

// publishPaused publishes a copy of the pauses. REQUIRES: e.mu.
func (e *emitter) publishPaused() {
	if v := e.pausedView.Load(); len(e.paused) == 0 && (v == nil || len(*v) == 0) {
		return // nothing paused, nothing shown: the common case, without a copy
	}
	m := make(map[string]pauseState, len(e.paused))
	for t, ps := range e.paused {
		m[t] = *ps
	}
	e.pausedView.Store(&m)
}

// unlock publishes the pauses, releases e.mu, and wakes the monitor if a
// table paused meanwhile.
func (e *emitter) unlock() {
	e.publishPaused()
	poke := e.pokeOnUnlock
	e.pokeOnUnlock = false
	e.mu.Unlock()
	if poke {
		e.onPause()
	}
}
