package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// SlotStatus is the replication slot as the monitor last saw it in
// pg_replication_slots.
type SlotStatus struct {
	Name string `json:"name"`
	// Up: the last poll succeeded. Error says why it did not.
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
	// Exists: the slot is there (false before cdcd creates it, or after
	// someone dropped it).
	Exists bool `json:"exists"`
	Active bool `json:"active"`
	// WALStatus is reserved, extended, unreserved or lost.
	WALStatus         string `json:"wal_status,omitempty"`
	ConfirmedFlushLSN string `json:"confirmed_flush_lsn,omitempty"`
	ConfirmedFlush    uint64 `json:"confirmed_flush"`
	RestartLSN        string `json:"restart_lsn,omitempty"`
	CurrentLSN        string `json:"current_lsn,omitempty"`
	// LagBytes is pg_current_wal_lsn() - confirmed_flush_lsn; RetainedBytes
	// is pg_current_wal_lsn() - restart_lsn (the WAL the slot keeps).
	LagBytes      int64 `json:"lag_bytes"`
	RetainedBytes int64 `json:"retained_bytes"`
	// LagSeconds is the age of the oldest WAL not confirmed, a lower bound
	// with the poll interval's resolution: the time since the first poll
	// that saw the server's WAL position beyond confirmed_flush_lsn.
	LagSeconds float64 `json:"lag_seconds"`
	// SafeWALSize is safe_wal_size: bytes that can be written before the
	// slot is in danger; nil when max_slot_wal_keep_size is -1 or the slot
	// is lost.
	SafeWALSize *int64 `json:"safe_wal_size,omitempty"`
	// MaxWALKeep is max_slot_wal_keep_size in bytes; -1 for unlimited.
	MaxWALKeep int64     `json:"max_slot_wal_keep_size"`
	PolledAt   time.Time `json:"polled_at,omitzero"`
}

// SafeWALPercent is SafeWALSize as a percentage of MaxWALKeep, and
// whether both are known.
func (s *SlotStatus) SafeWALPercent() (float64, bool) {
	if s.SafeWALSize == nil || s.MaxWALKeep <= 0 {
		return 0, false
	}
	return float64(*s.SafeWALSize) / float64(s.MaxWALKeep) * 100, true
}

// walSample is the server's WAL position at a poll.
type walSample struct {
	at  time.Time
	lsn uint64
}

// maxWALSamples bounds the history behind LagSeconds.
const maxWALSamples = 4096

// SlotMonitor queries pg_replication_slots on the source's DSN (an ordinary
// connection, not a replication one, kept between polls) and estimates
// table sizes for the initial load's progress. Poll and Close are called
// from one goroutine; Status and Estimate from any.
type SlotMonitor struct {
	dsn, slot string
	tables    []string
	logger    *slog.Logger

	conn *pgx.Conn // owned by the goroutine that polls

	mu        sync.Mutex
	cur       SlotStatus
	samples   []walSample
	estimates map[string]int64 // "schema.table" -> pg_class.reltuples
	lastErr   time.Time        // when a poll error was last logged
}

// NewSlotMonitor watches slot on dsn; tables ("schema.table") are the
// captured tables whose row estimates Estimate reports.
func NewSlotMonitor(dsn, slot string, tables []string, logger *slog.Logger) *SlotMonitor {
	return &SlotMonitor{dsn: dsn, slot: slot, tables: tables, logger: logger,
		cur: SlotStatus{Name: slot, MaxWALKeep: -1}, estimates: map[string]int64{}}
}

// Status returns the last poll's result.
func (p *SlotMonitor) Status() SlotStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Estimate returns the estimated rows of a table, 0 when unknown.
func (p *SlotMonitor) Estimate(table string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.estimates[table]
}

// Close closes the connection; a later Poll opens a new one.
func (p *SlotMonitor) Close() {
	if p.conn != nil {
		_ = p.conn.Close(context.Background())
		p.conn = nil
	}
}

const slotQuery = `
SELECT s.active, coalesce(s.wal_status, ''), s.safe_wal_size,
       coalesce(s.confirmed_flush_lsn::text, ''), coalesce(s.restart_lsn::text, ''), w.lsn::text,
       coalesce(pg_wal_lsn_diff(w.lsn, s.confirmed_flush_lsn), 0)::bigint,
       coalesce(pg_wal_lsn_diff(w.lsn, s.restart_lsn), 0)::bigint,
       pg_size_bytes(current_setting('max_slot_wal_keep_size'))
FROM (SELECT pg_current_wal_lsn() AS lsn) w
LEFT JOIN pg_replication_slots s ON s.slot_name = $1`

// Poll reads the slot once; loading also refreshes the table estimates. A
// failure is kept in the status (Up false, Error) and logged at most once a
// minute; it never stops the caller.
func (p *SlotMonitor) Poll(ctx context.Context, loading bool) {
	err := p.query(ctx, loading)
	if err == nil {
		return
	}
	p.Close()
	p.mu.Lock()
	p.cur.Up, p.cur.Error = false, err.Error()
	logIt := time.Since(p.lastErr) >= time.Minute
	if logIt {
		p.lastErr = time.Now()
	}
	p.mu.Unlock()
	if logIt && ctx.Err() == nil {
		p.logger.Warn("cannot read the replication slot's state", "slot", p.slot, "err", err,
			"what_to_do", "check that the source is reachable; slot alerts cannot fire meanwhile")
	}
}

func (p *SlotMonitor) query(ctx context.Context, loading bool) error {
	if p.conn == nil {
		cfg, err := pgx.ParseConfig(p.dsn)
		if err != nil {
			return fmt.Errorf("postgres: slot monitor: %w", err)
		}
		cfg.RuntimeParams["application_name"] = "cdcd_monitor"
		if p.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return fmt.Errorf("postgres: slot monitor: connect: %w", err)
		}
	}
	var (
		active                             *bool
		walStatus, confirmed, restart, cur string
		safe                               *int64
		lag, retained, maxKeep             int64
	)
	err := p.conn.QueryRow(ctx, slotQuery, p.slot).Scan(&active, &walStatus, &safe, &confirmed, &restart, &cur, &lag, &retained, &maxKeep)
	if err != nil {
		return fmt.Errorf("postgres: slot monitor: query pg_replication_slots: %w", err)
	}
	now := time.Now()
	st := SlotStatus{Name: p.slot, Up: true, Exists: active != nil, WALStatus: walStatus, SafeWALSize: safe,
		ConfirmedFlushLSN: confirmed, RestartLSN: restart, CurrentLSN: cur, MaxWALKeep: maxKeep, PolledAt: now}
	if st.Exists {
		st.Active = *active
		st.LagBytes, st.RetainedBytes = max(lag, 0), max(retained, 0)
	}
	curLSN, _ := pglogrepl.ParseLSN(cur)
	confLSN, _ := pglogrepl.ParseLSN(confirmed)
	st.ConfirmedFlush = uint64(confLSN)

	var est map[string]int64
	if loading {
		if est, err = p.queryEstimates(ctx); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.samples = append(p.samples, walSample{at: now, lsn: uint64(curLSN)})
	if len(p.samples) > maxWALSamples {
		p.samples = append(p.samples[:0], p.samples[len(p.samples)-maxWALSamples:]...)
	}
	if st.Exists && st.WALStatus != "lost" {
		st.LagSeconds = lagSeconds(p.samples, uint64(confLSN), now)
	}
	// Forget samples the slot has confirmed, except the newest of them.
	for len(p.samples) > 1 && p.samples[1].lsn <= uint64(confLSN) {
		p.samples = p.samples[1:]
	}
	p.cur = st
	for t, n := range est {
		p.estimates[t] = n
	}
	return nil
}

// lagSeconds is now minus the time of the oldest sample whose WAL position
// is past confirmed: WAL not confirmed existed then.
func lagSeconds(samples []walSample, confirmed uint64, now time.Time) float64 {
	for _, s := range samples {
		if s.lsn > confirmed {
			return max(now.Sub(s.at).Seconds(), 0)
		}
	}
	return 0
}

// queryEstimates reads pg_class.reltuples of the captured tables (-1, for
// a table never analyzed, is reported as unknown).
func (p *SlotMonitor) queryEstimates(ctx context.Context) (map[string]int64, error) {
	rows, err := p.conn.Query(ctx, `SELECT n.nspname || '.' || c.relname, c.reltuples::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname || '.' || c.relname = ANY($1)`, p.tables)
	if err != nil {
		return nil, fmt.Errorf("postgres: slot monitor: table estimates: %w", err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		out[name] = max(n, 0)
	}
	if err := rows.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, fmt.Errorf("postgres: slot monitor: table estimates: %w", err)
	}
	return out, nil
}
