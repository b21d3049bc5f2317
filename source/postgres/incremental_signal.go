package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
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

// signalData is a signal's data column.
type signalData struct {
	DataCollections      []string `json:"data-collections"`
	Type                 string   `json:"type"`
	AdditionalCondition  string   `json:"additional-condition"`
	AdditionalConditions []struct {
		DataCollection string `json:"data-collection"`
		Filter         string `json:"filter"`
	} `json:"additional-conditions"`
	Replace bool `json:"replace"`
}

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

// handleSignal acts on one inserted signal row.
func (in *incStream) handleSignal(c *source.Change) {
	col := func(name string) string {
		if i := c.Table.ColumnIndex(name); i >= 0 && i < len(c.After) {
			if s, ok := c.After[i].(string); ok {
				return s
			}
		}
		return ""
	}
	id, kind, data := col("id"), col("type"), col("data")
	logger := in.s.r.logger.With("signal", id, "type", kind)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if first, err := in.eng.Signalled(ctx, id); err != nil || !first {
		if err != nil {
			logger.Error("signal not applied: saving it failed", "err", err)
		}
		return
	}
	var d signalData
	if data != "" {
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			logger.Error("signal ignored: its data is not JSON", "err", err, "data", data)
			return
		}
	}
	if err := in.applySignal(ctx, kind, d, logger); err != nil {
		logger.Error("signal not applied", "err", err)
	}
}

func (in *incStream) applySignal(ctx context.Context, kind string, d signalData, logger interface {
	Info(string, ...any)
	Warn(string, ...any)
}) error {
	tables, err := in.signalTables(d.DataCollections)
	if err != nil {
		return err
	}
	switch kind {
	case "execute-snapshot":
		if d.Type != "" && d.Type != "incremental" && d.Type != "INCREMENTAL" {
			logger.Warn("only incremental snapshots are supported; running one", "requested", d.Type)
		}
		if len(tables) == 0 {
			return fmt.Errorf("execute-snapshot names no data-collections")
		}
		var reqs []snapshot.Request
		for _, t := range tables {
			req := snapshot.Request{Table: t, Replace: d.Replace, Origin: "signal", Where: d.AdditionalCondition}
			for _, ac := range d.AdditionalConditions {
				if name, err := in.signalTables([]string{ac.DataCollection}); err == nil && len(name) == 1 && name[0] == t {
					req.Where = ac.Filter
				}
			}
			reqs = append(reqs, req)
		}
		return in.eng.Submit(ctx, reqs...)
	case "stop-snapshot":
		stopped, err := in.eng.Stop(ctx, tables...)
		logger.Info("snapshots stopped by signal", "tables", stopped)
		return err
	case "pause-snapshot":
		return in.eng.Pause(ctx)
	case "resume-snapshot":
		return in.eng.Resume(ctx)
	}
	logger.Info("signal type not handled by cdcd; ignored")
	return nil
}

// signalTables normalises data-collections to configured "schema.table"
// names; a name that is not captured is an error.
func (in *incStream) signalTables(names []string) ([]string, error) {
	var out []string
	for _, n := range names {
		s, t := splitTable(n)
		q := s + "." + t
		if !slices.ContainsFunc(in.s.r.cfg.Tables, func(c string) bool { cs, ct := splitTable(c); return cs+"."+ct == q }) {
			return nil, fmt.Errorf("data-collection %q is not a table of this pipeline (source.postgres.tables)", n)
		}
		out = append(out, q)
	}
	return out, nil
}
