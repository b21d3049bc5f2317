package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log/kafka"
)

// Roles (config role): a pipeline on Kafka may run as one source process
// and any number of sink processes. The source process runs the source
// and the emitter and no table; each sink process runs the tables the
// owners group gives it (one process per table, kafka.JoinOwners), and
// the sink fences a stale owner by the epoch its claim wrote into the
// table (sink/iceberg/owner.go). Compaction runs inside a table's loop,
// so only in its owner.

// ownersGroup is the consumer group of a pipeline's sink processes. It is
// not the sink's lag group (cdcd-sink-<pipeline>), whose offsets are
// committed outside any generation, which Kafka refuses for a group with
// members.
func ownersGroup(pipeline string) string { return "cdcd-owners-" + pipeline }

// runsSource and runsTables say what this process runs.
func (d *Daemon) runsSource() bool { return d.cfg.Role != config.RoleSink }
func (d *Daemon) runsTables() bool { return d.cfg.Role != config.RoleSource }

// tableOwners runs the tables the owners group gives this process.
type tableOwners struct {
	d      *Daemon
	ctx    context.Context // the sink stage's: its end drains every table
	logger *slog.Logger

	mu      sync.Mutex
	running map[string]*ownedTable // by topic
}

type ownedTable struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// runShared runs the sink of a sink process (role: sink) until ctx ends:
// it joins the owners group and runs each table while it owns it. At the
// end every owned table commits what it consumed, then the process leaves
// the group, so the others take its tables over at once.
func (d *Daemon) runShared(ctx context.Context) error {
	kl, ok := d.lg.(*kafka.Log)
	if !ok {
		return errors.New("daemon: role sink needs log.backend: kafka")
	}
	o := &tableOwners{d: d, ctx: ctx, logger: d.logger.With("component", "owners"), running: map[string]*ownedTable{}}
	d.owners.Store(o)
	m, err := kl.JoinOwners(ctx, kafka.OwnersConfig{Group: ownersGroup(d.cfg.Pipeline), Topics: d.topics,
		SessionTimeout: d.cfg.Log.Kafka.SessionTimeout, Assigned: o.assigned, Revoked: o.revoked})
	if err != nil {
		return err
	}
	<-ctx.Done()
	o.stop(o.topics())
	m.Close()
	return nil
}

func (o *tableOwners) assigned(topics []string, generation int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, topic := range topics {
		if o.running[topic] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(o.ctx)
		t := &ownedTable{cancel: cancel, done: make(chan struct{})}
		o.running[topic] = t
		go func() {
			defer close(t.done)
			if err := o.d.sink.RunTable(ctx, topic); err != nil {
				// Fenced: another process has the table; this one takes it
				// again only when the group gives it back.
				o.logger.Error("table given up: another sink process owns it", "topic", topic, "err", err)
			}
		}()
	}
	o.logger.Info("running tables", "topics", topics, "group_generation", generation)
}

// revoked stops the tables (each commits what it consumed) before the
// group gives them to another process.
func (o *tableOwners) revoked(topics []string, lost bool) {
	if lost {
		o.logger.Warn("this process was removed from the owners group (its session expired): its tables go to others; a commit it still makes is refused",
			"topics", topics)
	}
	o.stop(topics)
}

func (o *tableOwners) stop(topics []string) {
	o.mu.Lock()
	var wait []*ownedTable
	for _, topic := range topics {
		if t := o.running[topic]; t != nil {
			t.cancel()
			wait = append(wait, t)
			delete(o.running, topic)
		}
	}
	o.mu.Unlock()
	for _, t := range wait {
		<-t.done
	}
}

func (o *tableOwners) topics() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.running))
	for topic := range o.running {
		out = append(out, topic)
	}
	return out
}

// owns reports whether this process runs topic's table now.
func (o *tableOwners) owns(topic string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	t := o.running[topic]
	if t == nil {
		return false
	}
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// showsTable reports whether /status lists topic's table: a sink process
// lists the tables it runs.
func (d *Daemon) showsTable(topic string) bool {
	if d.cfg.Role != config.RoleSink {
		return true
	}
	o := d.owners.Load()
	return o != nil && o.owns(topic)
}

// runSink runs the tables this process runs: all of them (role all), the
// owned ones (role sink), or none (role source).
func (d *Daemon) runSink(ctx context.Context) error {
	var err error
	switch {
	case !d.runsTables():
		<-ctx.Done()
	case d.cfg.Sink.Iceberg != nil && d.sharedTables():
		err = d.runShared(ctx)
	default:
		err = d.sink.Run(ctx)
	}
	if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	return nil
}

// sharedTables: other sink processes share the tables.
func (d *Daemon) sharedTables() bool { return d.cfg.Role == config.RoleSink }
