package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/reconcile"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Tables whose contents are being replaced are left out of a reconcile's
// round: until the initial load or a replacing snapshot (cdcd snapshot
// --replace, a table added to the pipeline) is durable in the log, the
// mirror lacks rows the source has, and nothing in the log says which.
// The source's own state (the _cdcd_state topic) says whether one is
// unfinished: the initial load's progress, and the snapshot engine's runs,
// which stay in its saved state until their rows are durable.

// busyState reads the source's state from the pipeline's log, following
// the records appended since it last read.
type busyState struct {
	ch  reconcile.Changes
	cfg *config.Config

	mu     sync.Mutex
	id     string  // the state topic's incarnation read
	next   []int64 // per partition, the next offset to read
	values map[string][]byte
}

func newBusyState(cfg *config.Config, ch reconcile.Changes) *busyState {
	return &busyState{ch: ch, cfg: cfg, values: map[string][]byte{}}
}

// why says why table (as the config names it) cannot be compared now;
// "" when it can.
func (b *busyState) why(ctx context.Context, table string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(ctx); errors.Is(err, log.ErrUnknownTopic) {
		return "the pipeline has not started (its log holds no source state yet)", nil
	} else if err != nil {
		return "", err
	}
	var loadKey, tablesKey, engineKey string
	switch {
	case b.cfg.Source.Postgres != nil:
		slot := b.cfg.Source.Postgres.Slot
		loadKey, tablesKey, engineKey = "postgres/"+slot, "postgres/"+slot+"/tables", "postgres/"+slot+"/incremental"
	case b.cfg.Source.MySQL != nil:
		tablesKey, engineKey = "mysql/tables", "mysql/incremental" // the MySQL load runs in the engine
	default:
		return "", nil
	}
	if loadKey != "" {
		if why, err := b.loadUnfinished(loadKey); why != "" || err != nil {
			return why, err
		}
	}
	ns, tbl := splitTable(table)
	if why, err := b.notCaptured(tablesKey, ns, tbl); why != "" || err != nil {
		return why, err
	}
	runs, err := snapshot.SavedRuns(b.values[engineKey])
	if err != nil {
		return "", fmt.Errorf("reconcile: the source's state %s: %w", engineKey, err)
	}
	for _, r := range runs {
		rns, rtbl := splitTable(r.Table)
		if rns != ns || rtbl != tbl {
			continue
		}
		if r.Replace {
			return fmt.Sprintf("a snapshot that replaces its contents (%s) is queued or running; compare it once it is done (cdcd snapshot status)",
				originName(r.Origin)), nil
		}
		if r.After != nil { // the mirror lacks the rows after After until the run reads them
			return fmt.Sprintf("a snapshot that fills its rows after a key (%s) is queued or running; compare it once it is done (cdcd snapshot status)",
				originName(r.Origin)), nil
		}
	}
	return "", nil
}

// originName names who asked for a replacing snapshot.
func originName(origin string) string {
	switch origin {
	case "initial":
		return "the initial load"
	case "load-resumed":
		return "the rest of an interrupted initial load"
	case "added":
		return "the table was added to the pipeline"
	case "cli", "api":
		return "cdcd snapshot --replace"
	case "signal":
		return "a signal"
	}
	return "origin " + origin
}

// value reads the source's state under key as it is now (nil when absent).
func (b *busyState) value(ctx context.Context, key string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.refreshLocked(ctx); errors.Is(err, log.ErrUnknownTopic) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return b.values[key], nil
}

// loadUnfinished says whether source/postgres's state (key) records an
// initial load not finished yet, or no state at all (the pipeline has not
// started: no load either).
func (b *busyState) loadUnfinished(key string) (string, error) {
	v := b.values[key]
	if v == nil {
		return "the pipeline has not started (no initial load yet)", nil
	}
	// The fields of source/postgres's sourceState read here.
	var st struct {
		SnapshotDone bool `json:"snapshot_done"`
	}
	if err := json.Unmarshal(v, &st); err != nil {
		return "", fmt.Errorf("reconcile: the source's state %s: %w", key, err)
	}
	if !st.SnapshotDone {
		return "the initial load has not finished; compare it once it is done (cdcd status)", nil
	}
	return "", nil
}

// notCaptured says whether the source's list of captured tables (key)
// lacks the table: added to the config, its snapshot not queued yet. No
// list: a pipeline from before lists were kept, which captures them all.
func (b *busyState) notCaptured(key, ns, tbl string) (string, error) {
	v := b.values[key]
	if v == nil {
		return "", nil
	}
	var names []string
	if err := json.Unmarshal(v, &names); err != nil {
		return "", fmt.Errorf("reconcile: the source's state %s: %w", key, err)
	}
	for _, n := range names {
		if nns, ntbl := splitTable(n); nns == ns && ntbl == tbl {
			return "", nil
		}
	}
	return "the table was added to the pipeline and its snapshot is not queued yet; compare it once it is done (cdcd snapshot status)", nil
}

// refreshLocked reads the state topic's records appended since the last
// read (all of them when the topic is new to it or was compacted past
// what it read).
func (b *busyState) refreshLocked(ctx context.Context) error {
	info, err := b.ch.Describe(ctx, TopicState)
	if err != nil {
		return fmt.Errorf("reconcile: read the source's state (%s): %w", TopicState, err)
	}
	fresh := info.ID != b.id || len(b.next) != len(info.Partitions)
	for i := 0; !fresh && i < len(b.next); i++ {
		p := info.Partitions[i]
		fresh = b.next[i] < p.Start || b.next[i] > p.End
	}
	if fresh {
		b.id, b.next, b.values = info.ID, make([]int64, len(info.Partitions)), map[string][]byte{}
		for i, p := range info.Partitions {
			b.next[i] = p.Start
		}
	}
	for i, p := range info.Partitions {
		from := b.next[i]
		for from < p.End {
			recs, err := b.ch.Fetch(ctx, TopicState, p.Partition, from, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				return fmt.Errorf("reconcile: read %s/%d@%d: %w", TopicState, p.Partition, from, err)
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				if r.Offset >= p.End {
					break
				}
				if r.Value == nil {
					delete(b.values, string(r.Key))
				} else {
					b.values[string(r.Key)] = r.Value
				}
				from = r.Offset + 1
			}
		}
		b.next[i] = from
	}
	return nil
}
