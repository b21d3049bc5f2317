package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// The signal table, as Debezium defines it (so existing runbooks work):
//
//	CREATE TABLE debezium_signal (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048));
//	INSERT INTO debezium_signal VALUES ('ad-hoc-1', 'execute-snapshot',
//	    '{"data-collections": ["public.orders"], "type": "incremental"}');
//
// Types: execute-snapshot (data-collections, type incremental,
// additional-conditions [{data-collection, filter}]; cdcd also reads
// "replace": true), stop-snapshot (data-collections, or none for all),
// pause-snapshot, resume-snapshot. A signal acts where the stream meets
// its insert; its id is remembered, so one delivered again after a restart
// does not act twice. The table is added to the publication; its changes
// never reach the log.

// signals takes the signal table's changes out of batch[from:] and acts on
// its inserts.
func (in *incStream) signals(batch []source.Change, from int) []source.Change {
	out := from
	for i := from; i < len(batch); i++ {
		c := &batch[i]
		if !in.isSignal(c.Table) {
			batch[out] = batch[i]
			out++
			continue
		}
		if c.Op == source.OpCreate {
			in.handleSignal(c)
		}
	}
	clear(batch[out:])
	return batch[:out]
}

func (in *incStream) isSignal(t *schema.Table) bool {
	if t == nil {
		return false
	}
	sig, ok := in.signal[t]
	if !ok {
		s, n := splitTable(in.s.r.cfg.Incremental.SignalTable)
		sig = t.Namespace == s && t.Name == n
		in.signal[t] = sig
	}
	return sig
}

// handleSignal acts on one inserted signal row (snapshot.Engine.HandleSignal).
func (in *incStream) handleSignal(c *source.Change) {
	col := func(name string) string {
		if i := c.Table.ColumnIndex(name); i >= 0 && i < len(c.After) {
			if s, ok := c.After[i].(string); ok {
				return s
			}
		}
		return ""
	}
	id, kind := col("id"), col("type")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.eng.HandleSignal(ctx, id, kind, col("data"), in.signalTable); err != nil {
		in.s.r.logger.Error("signal not applied", "signal", id, "type", kind, "err", err)
	}
}

// signalTable normalises a data-collection to a configured "schema.table"
// name; a name that is not captured is an error.
func (in *incStream) signalTable(n string) (string, error) {
	s, t := splitTable(n)
	q := s + "." + t
	if !slices.ContainsFunc(in.s.r.cfg.Tables, func(c string) bool { cs, ct := splitTable(c); return cs+"."+ct == q }) {
		return "", fmt.Errorf("data-collection %q is not a table of this pipeline (source.postgres.tables)", n)
	}
	return q, nil
}
