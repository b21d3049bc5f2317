package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// Internal topics, compacted changelogs of state.
//
// TopicState holds one partition of key/value records; the newest record
// of a key is its value (JSON), a nil value deletes it. This is the one
// list of its keys (frozen; the value types are documented where they are
// defined):
//
//	postgres/<slot>              source/postgres sourceState: the server's system
//	                             id, the slot and whether this pipeline created it,
//	                             the slot being created, the newest LSN confirmed
//	                             to the server, an unfinished initial load's progress
//	postgres/<slot>/load-plan    the initial load's chunk plan, saved before rows
//	                             are emitted (source/postgres plan.go)
//	postgres/<slot>/tables       the tables the pipeline captures and which of them
//	                             still wait for their snapshot (incremental_tables.go)
//	postgres/<slot>/incremental  the incremental snapshot engine's queue and
//	                             progress (source/snapshot)
//	mysql/checkpoint             source/mysql's checkpoint: the server flavor, the
//	                             GTID set done and the ordinal of the next change
//	mysql/tables                 as postgres/<slot>/tables, for MySQL
//	mysql/incremental            as postgres/<slot>/incremental, for MySQL
//	pause/<topic>                a paused table's pauseState: why, the fix, where
//	                             its held changes are (daemon/pause.go)
//	outbox/webhook/<name>        a webhook's delivery progress (outbox/webhook.go)
const (
	TopicSchemas = "_schemas"    // the registry (Confluent's layout)
	TopicState   = "_cdcd_state" // sources' own state (slot, system id, snapshot progress)
)

// ensureTopic creates topic unless it exists.
func ensureTopic(ctx context.Context, lg log.Log, name string, cfg log.TopicConfig) error {
	err := lg.CreateTopic(ctx, name, cfg)
	if err == nil || errors.Is(err, log.ErrTopicExists) {
		return nil
	}
	return fmt.Errorf("daemon: create topic %s: %w", name, err)
}

// readAll calls fn for every record of a one-partition topic, in order.
func readAll(ctx context.Context, lg log.Log, topic string, fn func(r *log.Record) error) error {
	info, err := lg.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				return fmt.Errorf("daemon: read %s/%d at %d: %w", topic, p.Partition, off, err)
			}
			if len(recs) == 0 {
				break
			}
			for i := range recs {
				if err := fn(&recs[i]); err != nil {
					return err
				}
				off = recs[i].Offset + 1
			}
		}
	}
	return nil
}

// schemaStore keeps the registry in the _schemas topic.
type schemaStore struct{ lg log.Log }

var _ schema.Store = schemaStore{}

func (s schemaStore) Load(ctx context.Context, fn func(key, value []byte) error) error {
	return readAll(ctx, s.lg, TopicSchemas, func(r *log.Record) error { return fn(r.Key, r.Value) })
}

func (s schemaStore) Append(ctx context.Context, key, value []byte) error {
	return s.lg.Produce(ctx, TopicSchemas, []log.Record{{Key: key, Value: value, Partition: 0}})
}

// stateStore is a key/value store over the _cdcd_state topic, cached in
// memory: the newest record of a key is its value.
type stateStore struct {
	lg log.Log

	mu     sync.Mutex
	values map[string][]byte
}

func openStateStore(ctx context.Context, lg log.Log) (*stateStore, error) {
	s := &stateStore{lg: lg, values: map[string][]byte{}}
	err := readAll(ctx, lg, TopicState, func(r *log.Record) error {
		if r.Value == nil {
			delete(s.values, string(r.Key))
		} else {
			s.values[string(r.Key)] = r.Value
		}
		return nil
	})
	return s, err
}

func (s *stateStore) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[key], nil
}

// Keys returns the keys with prefix that have a value, sorted.
func (s *stateStore) Keys(prefix string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, v := range s.values {
		if v != nil && strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (s *stateStore) Save(ctx context.Context, key string, value []byte) error {
	if err := s.lg.Produce(ctx, TopicState, []log.Record{{Key: []byte(key), Value: value, Partition: 0}}); err != nil {
		return fmt.Errorf("daemon: save state %s: %w", key, err)
	}
	s.mu.Lock()
	s.values[key] = value
	s.mu.Unlock()
	return nil
}
