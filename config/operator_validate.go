package config

import (
	"fmt"
	"strings"
	"time"
)

// minSaltLen is the shortest masking salt accepted: a short key makes the
// hashes of low-entropy values (phone numbers, national ids) guessable.
const minSaltLen = 16

// minAlertInterval bounds how often the slot is polled.
const minAlertInterval = 100 * time.Millisecond

// operator validates the shutdown, alerts and masking sections.
func (v *validator) operator() {
	if v.c.Shutdown.Deadline <= 0 {
		v.fail("shutdown.deadline", ErrInvalid, "must be positive, got %s (the longest a graceful stop may take before it turns hard)", v.c.Shutdown.Deadline)
	}
	v.alerts()
	v.masking()
}

func (v *validator) alerts() {
	a := v.c.Alerts
	if a.Interval < minAlertInterval {
		v.fail("alerts.interval", ErrInvalid, "must be at least %s (each round queries PostgreSQL), got %s", minAlertInterval, a.Interval)
	}
	if a.RealertInterval <= 0 {
		v.fail("alerts.realert_interval", ErrInvalid, "must be positive, got %s", a.RealertInterval)
	}
	v.above("alerts.slot_lag_bytes", int64(a.SlotLagBytes.Warning), int64(a.SlotLagBytes.Critical), func(n int64) string { return ByteSize(n).String() })
	for _, l := range []struct {
		path string
		TimeLimit
	}{
		{"alerts.slot_lag_time", a.SlotLagTime}, {"alerts.consumer_lag", a.ConsumerLag},
		{"alerts.table_paused", a.TablePaused}, {"alerts.commit_stall", a.CommitStall},
	} {
		v.above(l.path, int64(l.Warning), int64(l.Critical), func(n int64) string { return time.Duration(n).String() })
	}
	p := a.SafeWALPercent
	for _, lv := range []struct {
		key string
		val int
	}{{"warning", p.Warning}, {"critical", p.Critical}} {
		if lv.val < 0 || lv.val > 100 {
			v.fail("alerts.safe_wal_percent."+lv.key, ErrInvalid, "must be a percentage from 0 to 100 (0 turns the level off), got %d", lv.val)
		}
	}
	if p.Warning > 0 && p.Critical > 0 && p.Critical > p.Warning {
		v.fail("alerts.safe_wal_percent.critical", ErrInvalid, "%d is above the warning level %d: this alert fires when safe_wal_size falls below a level, so critical must be the lower one", p.Critical, p.Warning)
	}
	if ic := v.c.Sink.Iceberg; ic != nil && ic.CommitInterval > 0 {
		for _, l := range []struct {
			key string
			d   time.Duration
		}{{"warning", a.CommitStall.Warning}, {"critical", a.CommitStall.Critical}} {
			if d := l.d; d > 0 && d <= ic.CommitInterval {
				v.fail("alerts.commit_stall."+l.key, ErrInvalid, "%s would fire between ordinary commits: make it longer than sink.iceberg.commit_interval (%s), e.g. %s", d, ic.CommitInterval, formatDuration(10*ic.CommitInterval))
			}
		}
	}
	if w := a.Webhook; w != nil {
		v.webhook(w)
	}
}

// above checks a threshold that fires at or above its levels.
func (v *validator) above(path string, warn, crit int64, show func(int64) string) {
	if warn < 0 {
		v.fail(path+".warning", ErrInvalid, "must not be negative (0 turns the level off), got %s", show(warn))
	}
	if crit < 0 {
		v.fail(path+".critical", ErrInvalid, "must not be negative (0 turns the level off), got %s", show(crit))
	}
	if warn > 0 && crit > 0 && crit < warn {
		v.fail(path+".critical", ErrInvalid, "%s is below the warning level %s: critical must be the higher level", show(crit), show(warn))
	}
}

func (v *validator) webhook(w *Webhook) {
	const p = "alerts.webhook."
	if s := scheme(w.URL); s != "http" && s != "https" {
		v.fail(p+"url", ErrInvalid, "must be an http:// or https:// URL (e.g. http://alertmanager:9093/api/v2/alerts), got %s", describeScheme(w.URL, s))
	} else if msg := netURLProblem(w.URL); msg != "" {
		v.fail(p+"url", ErrInvalid, "%s (e.g. http://alertmanager:9093/api/v2/alerts; a password from ${NAME} is escaped for you)", msg)
	}
	if w.Timeout <= 0 {
		v.fail(p+"timeout", ErrInvalid, "must be positive, got %s", w.Timeout)
	}
	if w.Retries < 0 {
		v.fail(p+"retries", ErrInvalid, "must not be negative, got %d", w.Retries)
	}
	if w.Backoff <= 0 {
		v.fail(p+"backoff", ErrInvalid, "must be positive, got %s", w.Backoff)
	}
}

func (v *validator) masking() {
	m := v.c.Masking
	if m == nil {
		return
	}
	var captured map[string]bool
	if pg := v.c.Source.Postgres; pg != nil {
		captured = make(map[string]bool, len(pg.Tables))
		for _, t := range pg.Tables {
			captured[normalizeTable(t)] = true
		}
	}
	hashes := false
	seen := map[string]int{}
	for i, mt := range m.Tables {
		p := fmt.Sprintf("masking.tables[%d]", i)
		switch {
		case mt.Table == "":
			v.fail(p+".table", ErrInvalid, "required: the schema.table to mask, one of source.postgres.tables")
		case !validTable(mt.Table):
			v.fail(p+".table", ErrInvalid, "%s is not a table name: write schema.table", shortQuote(mt.Table))
		case captured != nil && !captured[mt.Table]:
			v.fail(p+".table", ErrInvalid, "%s is not captured: list it in source.postgres.tables, or remove this entry", mt.Table)
		default:
			if j, dup := seen[mt.Table]; dup {
				v.fail(p+".table", ErrInvalid, "%s is masked twice (also masking.tables[%d]%s): merge the two entries", mt.Table, j, v.where(fmt.Sprintf("masking.tables[%d]", j)))
			}
			seen[mt.Table] = i
		}
		if len(mt.Exclude)+len(mt.Hash)+len(mt.Redact) == 0 {
			v.fail(p, ErrInvalid, "masks nothing: list columns under exclude, hash or redact")
		}
		hashes = hashes || len(mt.Hash) > 0
		v.maskColumns(p, mt)
	}
	switch {
	case hashes && m.Salt == "":
		v.fail("masking.salt", ErrInvalid, "required when a column is hashed: set it from the environment, e.g. salt: ${CDCD_MASK_SALT}, with a random secret (openssl rand -hex 32)")
	case hashes && len(m.Salt) < minSaltLen:
		v.fail("masking.salt", ErrInvalid, "too short (%d bytes): use a random secret of at least %d bytes (openssl rand -hex 32), or hashes of short values can be guessed", len(m.Salt), minSaltLen)
	}
}

// maskColumns checks that each column is named once across the lists.
func (v *validator) maskColumns(p string, mt MaskTable) {
	where := map[string]string{}
	for _, l := range []struct {
		key  string
		cols []string
	}{{"exclude", mt.Exclude}, {"hash", mt.Hash}, {"redact", mt.Redact}} {
		for i, c := range l.cols {
			cp := fmt.Sprintf("%s.%s[%d]", p, l.key, i)
			if strings.TrimSpace(c) == "" {
				v.fail(cp, ErrInvalid, "a column name is required")
				continue
			}
			if prev, dup := where[c]; dup {
				v.fail(cp, ErrInvalid, "column %s is already masked by %s: a column takes one treatment", shortQuote(c), prev)
				continue
			}
			where[c] = cp
		}
	}
}
