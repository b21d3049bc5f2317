package snapshot

import (
	"encoding/json"
	"fmt"
	"time"
)

// Progress is a run's progress, for status and metrics.
type Progress struct {
	Table   string `json:"table"`
	ID      string `json:"id"`
	Replace bool   `json:"replace,omitempty"`
	Where   string `json:"where,omitempty"`
	Origin  string `json:"origin,omitempty"`
	// State is queued, running, paused, done or failed.
	State string `json:"state"`
	// Rows read and emitted (all sessions); Estimated from the database's
	// statistics when the run started; Percent -1 when unknown.
	Rows          int64         `json:"rows"`
	Estimated     int64         `json:"estimated"`
	Percent       float64       `json:"percent"`
	RowsPerSecond float64       `json:"rows_per_second"`
	ETA           time.Duration `json:"eta"`
	// Reread counts keys waiting to be read again.
	Reread   int       `json:"reread,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Error    string    `json:"error,omitempty"`
}

// Progress lists the runs queued or running, then the ones finished since
// start (newest last).
func (e *Engine) Progress() []Progress {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Progress
	running := false
	for _, r := range e.runs {
		p := r.progress(e.paused)
		if !running && !r.finished && !e.paused {
			p.State, running = "running", true
		}
		out = append(out, p)
	}
	return append(out, e.finished...)
}

// progress describes a run; State is queued or paused (the caller marks
// the running one).
func (r *run) progress(paused bool) Progress {
	p := Progress{Table: r.rec.Table, ID: r.rec.ID, Replace: r.rec.Replace, Where: r.rec.Where, Origin: r.rec.Origin,
		State: "queued", Rows: r.readRows, Estimated: r.rec.Estimate, Percent: -1, Reread: len(r.reread), Started: r.rec.Started}
	if paused {
		p.State = "paused"
	}
	if r.finished {
		p.State = "running" // emitted; waiting for durability
	}
	if p.Estimated > 0 {
		p.Percent = min(99.9, 100*float64(p.Rows)/float64(p.Estimated))
	}
	if !r.began.IsZero() {
		if el := time.Since(r.began).Seconds(); el > 0 {
			p.RowsPerSecond = float64(r.readRows-r.beganRows) / el
		}
		if p.RowsPerSecond > 0 && p.Estimated > p.Rows {
			p.ETA = time.Duration(float64(p.Estimated-p.Rows) / p.RowsPerSecond * float64(time.Second))
		}
	}
	return p
}

// logProgress writes a progress line per running run.
func (e *Engine) logProgress() {
	for _, p := range e.Progress() {
		if p.State != "running" {
			continue
		}
		e.logger.Info("snapshot progress", "table", p.Table, "rows", p.Rows, "estimated", p.Estimated,
			"percent", p.Percent, "rows_per_second", int64(p.RowsPerSecond), "eta", p.ETA.Round(time.Second))
	}
}

// SavedRuns lists the runs queued or running in an engine's saved state
// (the value stored under Config.StateKey; nil: none), for readers outside
// the engine (cdcd reconcile leaves a table being replaced out of its
// round). A run stays in the saved state until its rows are durable.
func SavedRuns(state []byte) ([]Request, error) {
	if state == nil {
		return nil, nil
	}
	var s saved
	if err := json.Unmarshal(state, &s); err != nil {
		return nil, fmt.Errorf("snapshot: saved state: %w", err)
	}
	out := make([]Request, len(s.Runs))
	for i, r := range s.Runs {
		out[i] = r.Request
	}
	return out, nil
}
