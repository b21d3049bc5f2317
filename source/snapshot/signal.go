package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
)

// Signals from a Debezium-compatible signal table (so existing runbooks
// work). A source decodes the table's inserted rows (columns id, type,
// data) and hands each to Engine.HandleSignal where its stream meets it;
// the table's changes never reach the log. Types:
//
//	execute-snapshot  data: {"data-collections": [...], "type": "incremental",
//	                  "additional-conditions": [{"data-collection", "filter"}]}
//	                  (cdcd also reads "additional-condition" and "replace": true)
//	stop-snapshot     data: {"data-collections": [...]}, or none for every run
//	pause-snapshot    every run holds after its current chunk
//	resume-snapshot
//
// Other types are logged and ignored.

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

// HandleSignal acts on one signal row: id, type and data are its columns.
// The id is saved first, so a signal delivered again (after a restart) acts
// once. table turns a data-collection into the table as the source names
// it, with an error when it is not a table of the pipeline. The error is
// the user's (bad data, an unknown table) or a failed save; the caller logs
// it and streams on.
func (e *Engine) HandleSignal(ctx context.Context, id, kind, data string, table func(string) (string, error)) error {
	if first, err := e.Signalled(ctx, id); err != nil || !first {
		if err != nil {
			return fmt.Errorf("saving its id failed: %w", err)
		}
		return nil
	}
	var d signalData
	if data != "" {
		if err := json.Unmarshal([]byte(data), &d); err != nil {
			return fmt.Errorf("%w: signal %s: its data is not JSON (%v): %s", ErrBadRequest, id, err, data)
		}
	}
	tables := make([]string, 0, len(d.DataCollections))
	for _, n := range d.DataCollections {
		t, err := table(n)
		if err != nil {
			return fmt.Errorf("%w: signal %s: data-collections: %w", ErrBadRequest, id, err)
		}
		tables = append(tables, t)
	}
	logger := e.logger.With("signal", id, "type", kind)
	switch kind {
	case "execute-snapshot":
		if d.Type != "" && d.Type != "incremental" && d.Type != "INCREMENTAL" {
			logger.Warn("only incremental snapshots are supported; running one", "requested", d.Type)
		}
		if len(tables) == 0 {
			return fmt.Errorf("%w: signal %s: execute-snapshot names no data-collections", ErrBadRequest, id)
		}
		reqs := make([]Request, 0, len(tables))
		for _, t := range tables {
			req := Request{Table: t, Replace: d.Replace, Origin: "signal", Where: d.AdditionalCondition}
			for _, ac := range d.AdditionalConditions {
				if n, err := table(ac.DataCollection); err == nil && n == t {
					req.Where = ac.Filter
				}
			}
			reqs = append(reqs, req)
		}
		return e.Submit(ctx, reqs...)
	case "stop-snapshot":
		stopped, err := e.Stop(ctx, tables...)
		logger.Info("snapshots stopped by signal", "tables", stopped)
		return err
	case "pause-snapshot":
		return e.Pause(ctx)
	case "resume-snapshot":
		return e.Resume(ctx)
	}
	logger.Info("signal type not handled by cdcd; ignored")
	return nil
}
