package config

import "time"

// The operator's sections: how the daemon stops, what it alerts on, and
// which columns it masks before anything reaches the log.

// Shutdown configures how `cdcd run` stops on SIGTERM or SIGINT.
type Shutdown struct {
	// Deadline bounds the graceful stop: stop reading the source, let the
	// log append in flight finish, acknowledge the flushed position to the
	// database, commit what each table consumed. When it passes, or at a
	// second signal, the process stops hard (exit code 3; a restart is
	// safe). Default 30s.
	Deadline time.Duration `yaml:"deadline"`
}

// Alerts configures the daemon's alert rules and their delivery. Every
// threshold has a warning and a critical level; an explicit 0 turns a
// level off. Alerts are logged (WARN for warning, ERROR for critical),
// exported as the cdcd_alert_firing gauge, and sent to the webhook when
// one is configured; examples/prometheus-rules.yml has the same rules for
// Prometheus.
type Alerts struct {
	// Interval is how often the replication slot is polled and the rules
	// evaluated; default 15s.
	Interval time.Duration `yaml:"interval"`
	// RealertInterval is how often an alert that keeps firing is logged
	// and sent again; default 10m. The webhook's endsAt is three intervals
	// ahead, so Alertmanager resolves it by itself if cdcd goes away.
	RealertInterval time.Duration `yaml:"realert_interval"`
	// SlotLagBytes: WAL the slot holds beyond its confirmed_flush_lsn
	// (pg_current_wal_lsn() - confirmed_flush_lsn). Default warning 1GiB,
	// critical 10GiB.
	SlotLagBytes SizeLimit `yaml:"slot_lag_bytes"`
	// SlotLagTime: age of the oldest WAL the slot has not confirmed.
	// Default warning 5m, critical 30m.
	SlotLagTime TimeLimit `yaml:"slot_lag_time"`
	// SafeWALPercent: the slot's safe_wal_size as a percentage of
	// max_slot_wal_keep_size; fires when it falls below a level (only when
	// the server sets max_slot_wal_keep_size). Default warning 50,
	// critical 20. wal_status unreserved and lost are always critical.
	SafeWALPercent PercentLimit `yaml:"safe_wal_percent"`
	// ConsumerLag: age of the oldest change in the log a table has not
	// committed yet (not evaluated during the initial load). Default
	// warning 5m, critical 30m.
	ConsumerLag TimeLimit `yaml:"consumer_lag"`
	// TablePaused: how long a table has been paused (e.g. a schema change
	// the registry refused). Default warning 1m, critical 30m.
	TablePaused TimeLimit `yaml:"table_paused"`
	// CommitStall: how long changes have waited in the log while the table
	// made no successful commit (failing or stuck commits). Each level
	// must exceed sink.iceberg.commit_interval. Default warning 5m,
	// critical 15m.
	CommitStall TimeLimit `yaml:"commit_stall"`
	// Webhook, when set, receives every alert that fires or resolves.
	Webhook *Webhook `yaml:"webhook"`
}

// SizeLimit is an alert threshold in bytes, fired at or above a level.
type SizeLimit struct {
	Warning  ByteSize `yaml:"warning"`
	Critical ByteSize `yaml:"critical"`
}

// TimeLimit is an alert threshold in time, fired at or above a level.
type TimeLimit struct {
	Warning  time.Duration `yaml:"warning"`
	Critical time.Duration `yaml:"critical"`
}

// PercentLimit is an alert threshold in percent (0-100), fired below a level.
type PercentLimit struct {
	Warning  int `yaml:"warning"`
	Critical int `yaml:"critical"`
}

// Webhook sends alerts as Alertmanager-compatible JSON: a POST of an array
// of {labels, annotations, startsAt, endsAt, generatorURL}, the body of
// Alertmanager's /api/v2/alerts.
type Webhook struct {
	// URL receives the alerts, e.g. http://alertmanager:9093/api/v2/alerts.
	// Required. A password in it is redacted by Config.String.
	URL string `yaml:"url" secret:"true"`
	// Timeout bounds one request; default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// Retries after a failed request (an error or a non-2xx status), with
	// a backoff that starts at Backoff and doubles up to 1m; default 5.
	Retries int `yaml:"retries"`
	// Backoff is the first wait between retries; default 1s.
	Backoff time.Duration `yaml:"backoff"`
}

// Masking transforms columns before changes are encoded, so their values
// never reach the log, the Iceberg tables or any file cdcd writes.
type Masking struct {
	// Salt is the HMAC-SHA256 key of hashed columns. Required when a table
	// hashes a column; write it as ${ENV}. Redacted by Config.String.
	// Changing it changes every hash (a hashed key column then needs a new
	// snapshot).
	Salt string `yaml:"salt" secret:"all"`
	// Tables lists the masked tables.
	Tables []MaskTable `yaml:"tables"`
}

// MaskTable masks the columns of one source table. A column may appear in
// one list only; key columns may be hashed but not excluded or redacted.
type MaskTable struct {
	// Table is "schema.table" (a bare name means public), one of
	// source.postgres.tables.
	Table string `yaml:"table"`
	// Exclude lists columns left out entirely: absent from the Avro schema,
	// the log and the Iceberg table.
	Exclude []string `yaml:"exclude"`
	// Hash lists columns replaced by the lowercase hex HMAC-SHA256 of their
	// value's text with Masking.Salt (a string column); equal values hash
	// alike, so joins and counts still work.
	Hash []string `yaml:"hash"`
	// Redact lists columns whose non-NULL values are replaced by "***" (a
	// string column); NULL stays NULL.
	Redact []string `yaml:"redact"`
}

// MaskingFor returns the masking rules of a "schema.table" name, or nil.
func (c *Config) MaskingFor(table string) *MaskTable {
	if c.Masking == nil {
		return nil
	}
	for i := range c.Masking.Tables {
		if normalizeTable(c.Masking.Tables[i].Table) == normalizeTable(table) {
			return &c.Masking.Tables[i]
		}
	}
	return nil
}
