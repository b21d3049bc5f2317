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

// pauseState is a paused table, kept in the state topic under
// "pause/<topic>" so a pause survives restarts.
type pauseState struct {
	Topic string    `json:"topic"`
	Table string    `json:"table"`
	Since time.Time `json:"since"`
	// Position is the source position (hex) of the first held change.
	Position string `json:"position"`
	// Reason says what the registry refused and why.
	Reason string `json:"reason"`
	// Subject is the subject that refused the schema.
	Subject string `json:"subject"`
	// Replayed is the next offset of the holding topic to replay.
	Replayed int64 `json:"replayed"`
}

// PausedTable is a paused table as /status shows it.
type PausedTable struct {
	Table    string    `json:"table"`
	Topic    string    `json:"topic"`
	Since    time.Time `json:"since"`
	Position string    `json:"position"`
	Reason   string    `json:"reason"`
	Held     int64     `json:"held"`
	// Resolve says what the operator can do.
	Resolve string `json:"resolve"`
}

const pauseKeyPrefix = "pause/"

// heldTopic is where a paused table's changes wait.
func heldTopic(topic string) string { return "_cdcd_held." + topic }

// pause stops a table's changes from reaching its topic: from c on, they
// are held.
func (e *emitter) pause(ctx context.Context, tc *tableCodec, c *source.Change) error {
	var inc *schema.IncompatibleError
	errors.As(tc.refused, &inc)
	reason := tc.refused.Error()
	if inc != nil {
		var parts []string
		for _, p := range inc.Problems {
			parts = append(parts, p.String())
		}
		reason = fmt.Sprintf("table %s changed incompatibly (%s compatibility of %s): %s",
			c.Table.QualifiedName(), inc.Level, inc.Subject, strings.Join(parts, "; "))
	}
	ps := &pauseState{Topic: tc.topic, Table: c.Table.QualifiedName(), Since: time.Now().UTC(),
		Position: hex.EncodeToString(c.Pos), Reason: reason}
	if inc != nil {
		ps.Subject = inc.Subject
	}
	held := heldTopic(tc.topic)
	if err := ensureTopic(ctx, e.lg, held, log.TopicConfig{Partitions: 1}); err != nil {
		return err
	}
	if _, ok := e.last[held]; !ok {
		if err := e.loadLast(ctx, held); err != nil {
			return err
		}
	}
	if err := e.savePause(ctx, ps); err != nil {
		return err
	}
	e.paused[tc.topic] = ps
	e.logger.Error("table paused: its changes are held until the schema change is resolved",
		"table", ps.Table, "position", ps.Position, "reason", reason,
		"what_to_do", "cdcd schema rejected; then cdcd schema accept "+ps.Subject+" (or change its compatibility with cdcd schema set-compat)")
	return nil
}

func (e *emitter) savePause(ctx context.Context, ps *pauseState) error {
	b, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	return e.state.Save(ctx, pauseKeyPrefix+ps.Topic, b)
}

// loadPaused restores the pauses of an earlier run.
func (e *emitter) loadPaused(ctx context.Context) error {
	for _, k := range e.state.Keys(pauseKeyPrefix) {
		b, _ := e.state.Load(ctx, k)
		if b == nil {
			continue
		}
		var ps pauseState
		if err := json.Unmarshal(b, &ps); err != nil {
			return fmt.Errorf("daemon: stored pause %s: %w", k, err)
		}
		held := heldTopic(ps.Topic)
		if err := ensureTopic(ctx, e.lg, held, log.TopicConfig{Partitions: 1}); err != nil {
			return err
		}
		if err := e.loadLast(ctx, held); err != nil {
			return err
		}
		e.paused[ps.Topic] = &ps
		e.logger.Warn("table is paused since an earlier run", "table", ps.Table, "reason", ps.Reason)
	}
	return nil
}

// heldRecord encodes a change of a paused table: Avro bodies without
// framing, and the schemas in headers.
func (e *emitter) heldRecord(tc *tableCodec, c *source.Change) (log.Record, error) {
	env := e.envelope(c, time.Now().UnixMilli())
	value, err := schema.AppendEnvelope(nil, c.Table, &env)
	if err != nil {
		return log.Record{}, err
	}
	var key []byte
	if row := rowOf(c); row != nil {
		if key, err = schema.AppendKey(nil, c.Table, row); err != nil {
			return log.Record{}, err
		}
	}
	h := append(e.headers(c), log.Header{Key: HeaderKeySchema, Value: []byte(tc.keySchema)},
		log.Header{Key: HeaderValueSchema, Value: []byte(tc.valueSchema)},
		log.Header{Key: "cdcd.op", Value: []byte{byte(c.Op)}})
	return log.Record{Key: key, Value: value, Headers: h, Timestamp: c.CommitTime, Partition: 0}, nil
}

func rowOf(c *source.Change) []any {
	if c.After != nil {
		return c.After
	}
	return c.Before
}

// resumeLoop retries the paused tables every interval until ctx ends.
func (e *emitter) resumeLoop(ctx context.Context, every time.Duration) error {
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

// tryResume replays what paused tables hold once the registry accepts
// their schemas.
func (e *emitter) tryResume(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.paused) == 0 {
		return nil
	}
	// Held records still in the pipeline must be in the holding topic
	// before it is drained.
	if err := e.pipe.Wait(ctx); err != nil {
		return err
	}
	for topic, ps := range e.paused {
		done, err := e.replay(ctx, ps)
		if err != nil {
			return err
		}
		if !done {
			continue
		}
		delete(e.paused, topic)
		if err := e.state.Save(ctx, pauseKeyPrefix+topic, nil); err != nil {
			return err
		}
		// Table versions refused earlier must register afresh.
		for t, c := range e.codecs {
			if c.topic == topic {
				delete(e.codecs, t)
			}
		}
		e.logger.Info("table resumed: its held changes are in its topic again", "table", ps.Table)
	}
	return nil
}

// replay moves held records to the table's topic as long as the registry
// takes their schemas; done once the holding topic is drained.
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
		for _, r := range recs {
			kid, err := register(ps.Topic+"-key", string(r.Header(HeaderKeySchema)))
			var vid uint32
			if err == nil {
				vid, err = register(ps.Topic+"-value", string(r.Header(HeaderValueSchema)))
			}
			var inc *schema.IncompatibleError
			if errors.As(err, &inc) {
				break // still refused: stay paused
			}
			if err != nil {
				return false, err
			}
			pos := source.Position(r.Header(HeaderPosition))
			value := append(schema.AppendFrame(nil, vid), r.Value...)
			hs := []log.Header{{Key: HeaderPosition, Value: pos}, {Key: HeaderTxID, Value: r.Header(HeaderTxID)}}
			if kc := r.Header(HeaderKeyChange); kc != nil {
				hs = append(hs, log.Header{Key: HeaderKeyChange, Value: kc})
			}
			if r.Key == nil { // a truncate: every partition
				for p := int32(0); p < e.partitions; p++ {
					if last[p] == nil || pos.Compare(last[p]) > 0 {
						out = append(out, log.Record{Value: value, Headers: hs, Timestamp: r.Timestamp, Partition: p})
						newest[p] = pos
					}
				}
			} else {
				key := append(schema.AppendFrame(nil, kid), r.Key...)
				p := log.PartitionFor(r.Key, e.partitions)
				if last[p] == nil || pos.Compare(last[p]) > 0 {
					out = append(out, log.Record{Key: key, Value: value, Headers: hs, Timestamp: r.Timestamp, Partition: p})
					newest[p] = pos
				}
			}
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
		if ps.Replayed <= recs[0].Offset {
			return false, nil // the first held record is still refused
		}
	}
}

// Paused lists the paused tables.
func (e *emitter) Paused() []PausedTable {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []PausedTable
	for _, ps := range e.paused {
		held := int64(0)
		if info, err := e.lg.DescribeTopic(context.Background(), heldTopic(ps.Topic)); err == nil && len(info.Partitions) > 0 {
			held = info.Partitions[0].End - ps.Replayed
		}
		out = append(out, PausedTable{Table: ps.Table, Topic: ps.Topic, Since: ps.Since, Position: ps.Position, Reason: ps.Reason, Held: held,
			Resolve: "cdcd schema accept " + ps.Subject + "  (or: cdcd schema set-compat " + ps.Subject + " NONE)"})
	}
	return out
}

// pausedState reports whether the emitter holds topic's changes, since
// when and why.
func (e *emitter) pausedState(topic string) (bool, time.Time, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ps := e.paused[topic]; ps != nil {
		return true, ps.Since, ps.Reason
	}
	return false, time.Time{}, ""
}
