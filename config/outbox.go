package config

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Outbox configures the outbox relay (outbox:): events services write in
// their own transactions, relayed in order per aggregate to the log and
// to webhooks (package outbox). It may run beside the table mirror of the
// same source, or alone (source tables may then be empty).
type Outbox struct {
	// Table is the outbox table: "schema.table" for PostgreSQL (a bare
	// name means public), "database.table" for MySQL. Its inserts are the
	// events; it is captured even when it is not one of the source's
	// tables (it is mirrored only when it is). One of Table and
	// MessagePrefix is required; both may be set.
	Table string `yaml:"table"`
	// MessagePrefix relays transactional logical decoding messages
	// (pg_logical_emit_message(true, prefix, content), a JSON object with
	// the event's fields) with this prefix: no table at all. PostgreSQL
	// only.
	MessagePrefix string `yaml:"message_prefix"`
	// Columns names the event's columns (and message fields); defaults are
	// Debezium's.
	Columns OutboxColumns `yaml:"columns"`
	// Topic is the topic template; ${aggregatetype} is replaced by the
	// event's aggregate type (characters a topic name does not take become
	// _). Default outbox.${aggregatetype}.
	Topic string `yaml:"topic"`
	// Payload is as_is (the payload as stored; default) or expanded
	// (always JSON; JSON stored as a JSON string is unwrapped).
	Payload string `yaml:"payload"`
	// Headers lists further columns carried as record (and webhook)
	// headers: "column", or "column:header-name".
	Headers []string `yaml:"headers"`
	// Targets receive every event; at least one.
	Targets []OutboxTarget `yaml:"targets"`
	// Alerts sets the relay's alert thresholds.
	Alerts OutboxAlerts `yaml:"alerts"`
}

// OutboxColumns names the outbox table's columns.
type OutboxColumns struct {
	ID            string `yaml:"id"`             // default id
	AggregateType string `yaml:"aggregate_type"` // default aggregatetype
	AggregateID   string `yaml:"aggregate_id"`   // default aggregateid
	Type          string `yaml:"type"`           // default type
	Payload       string `yaml:"payload"`        // default payload
	// Timestamp, when set, is a timestamp column that becomes the record's
	// timestamp; default none (the transaction's commit time).
	Timestamp string `yaml:"timestamp"`
}

// OutboxTarget is one target: exactly one of its keys.
type OutboxTarget struct {
	// Log appends to the log (the embedded log, or Kafka when
	// log.backend is kafka): exactly once.
	Log *OutboxLog `yaml:"log"`
	// Webhook POSTs each event: at least once, with a stable id.
	Webhook *OutboxWebhook `yaml:"webhook"`
}

// OutboxLog configures the log target; its topics take log.partitions
// and log.retention.
type OutboxLog struct{}

// OutboxWebhook configures a webhook target.
type OutboxWebhook struct {
	// Name identifies the target (metrics, saved progress, the dead-letter
	// topic); default webhook, webhook-2, ... in order.
	Name string `yaml:"name"`
	// URL receives the POSTs; https://, or http:// to a loopback address.
	// Required. A password in it is redacted by Config.String.
	URL string `yaml:"url" secret:"true"`
	// Secret signs each request (Standard Webhooks: webhook-signature,
	// HMAC-SHA256); a "whsec_<base64>" secret is decoded. Use ${ENV};
	// redacted. Empty: requests are not signed.
	Secret string `yaml:"secret" secret:"all"`
	// Timeout bounds one request; default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Concurrency is how many aggregates are delivered at once (one
	// request at a time per aggregate); default 16.
	Concurrency int `yaml:"concurrency"`
	// BackoffMin and BackoffMax bound the jittered exponential wait
	// between attempts (a Retry-After answer replaces it); defaults 500ms
	// and 1m.
	BackoffMin time.Duration `yaml:"backoff_min"`
	BackoffMax time.Duration `yaml:"backoff_max"`
	// GiveUpAfter: an event failing this long after its first attempt
	// goes to the dead-letter topic; default 10m. Meanwhile the slot's
	// confirmed position waits before it (the database keeps the WAL);
	// other aggregates and the table mirror go on.
	GiveUpAfter time.Duration `yaml:"give_up_after"`
	// DeadLetterTopic; default _cdcd_dead.outbox.<name>.
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// CAFile is a PEM file of certificate authorities to trust besides
	// the system's (a private CA).
	CAFile string `yaml:"ca_file"`
}

// OutboxAlerts are the relay's alert thresholds; an explicit 0 turns a
// level off.
type OutboxAlerts struct {
	// Lag: how long the oldest event handed to the targets has waited
	// since its commit (CdcdOutboxLag). Default warning 1m, critical 10m.
	Lag TimeLimit `yaml:"lag"`
	// TableBytes: the outbox table's size on disk (CdcdOutboxTableSize).
	// Default warning 1GiB, critical 10GiB.
	TableBytes SizeLimit `yaml:"table_bytes"`
}

// Payload modes.
const (
	PayloadAsIs     = "as_is"
	PayloadExpanded = "expanded"
)

// OutboxTopicVar is the topic template's variable (${routedByValue},
// Debezium's name, is taken too).
const OutboxTopicVar = "${aggregatetype}"

// topicTemplateLiteral escapes the topic template's variables so that
// ${NAME} expansion keeps them: ${aggregatetype} -> $${aggregatetype}.
func topicTemplateLiteral(s string) string {
	for _, v := range []string{OutboxTopicVar, "${routedByValue}"} {
		var b strings.Builder
		for {
			i := strings.Index(s, v)
			if i < 0 {
				break
			}
			b.WriteString(s[:i])
			if i == 0 || s[i-1] != '$' {
				b.WriteByte('$')
			}
			b.WriteString(v)
			s = s[i+len(v):]
		}
		b.WriteString(s)
		s = b.String()
	}
	return s
}

func (c *Config) outboxDefaults(explicit func(string) bool) {
	o := c.Outbox
	if o == nil {
		return
	}
	const p = "outbox."
	if c.Source.Postgres != nil && o.Table != "" {
		o.Table = normalizeTable(o.Table)
	}
	cols := &o.Columns
	orDefault(&cols.ID, "id", explicit(p+"columns.id"))
	orDefault(&cols.AggregateType, "aggregatetype", explicit(p+"columns.aggregate_type"))
	orDefault(&cols.AggregateID, "aggregateid", explicit(p+"columns.aggregate_id"))
	orDefault(&cols.Type, "type", explicit(p+"columns.type"))
	orDefault(&cols.Payload, "payload", explicit(p+"columns.payload"))
	orDefault(&o.Topic, "outbox."+OutboxTopicVar, explicit(p+"topic"))
	orDefault(&o.Payload, PayloadAsIs, explicit(p+"payload"))
	n := 0
	for i := range o.Targets {
		w := o.Targets[i].Webhook
		if w == nil {
			continue
		}
		n++
		wp := fmt.Sprintf("%stargets[%d].webhook.", p, i)
		name := "webhook"
		if n > 1 {
			name = fmt.Sprintf("webhook-%d", n)
		}
		orDefault(&w.Name, name, explicit(wp+"name"))
		orDefault(&w.Timeout, 10*time.Second, explicit(wp+"timeout"))
		orDefault(&w.Concurrency, 16, explicit(wp+"concurrency"))
		orDefault(&w.BackoffMin, 500*time.Millisecond, explicit(wp+"backoff_min"))
		orDefault(&w.BackoffMax, time.Minute, explicit(wp+"backoff_max"))
		orDefault(&w.GiveUpAfter, 10*time.Minute, explicit(wp+"give_up_after"))
		orDefault(&w.DeadLetterTopic, "_cdcd_dead.outbox."+w.Name, explicit(wp+"dead_letter_topic"))
	}
	a := &o.Alerts
	orDefault(&a.Lag.Warning, time.Minute, explicit(p+"alerts.lag.warning"))
	orDefault(&a.Lag.Critical, 10*time.Minute, explicit(p+"alerts.lag.critical"))
	orDefault(&a.TableBytes.Warning, ByteSize(1<<30), explicit(p+"alerts.table_bytes.warning"))
	orDefault(&a.TableBytes.Critical, ByteSize(10<<30), explicit(p+"alerts.table_bytes.critical"))
}

var (
	// topicChars are what a topic name takes.
	topicChars = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
	// headerName is an HTTP header name (RFC 9110 token).
	headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	// columnName is a plain column name.
	columnName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]*$`)
)

// reservedHeaders are set by the relay itself.
var reservedHeaders = []string{"id", "type", "content-type", "content-length", "host", "user-agent", "idempotency-key",
	"webhook-id", "webhook-timestamp", "webhook-signature"}

// outbox validates the outbox section.
func (v *validator) outbox() {
	o := v.c.Outbox
	if o == nil {
		return
	}
	const p = "outbox."
	mysql := v.c.Source.MySQL != nil
	switch {
	case o.Table == "" && o.MessagePrefix == "":
		v.fail("outbox", ErrInvalid, "set table (the outbox table, e.g. table: public.outbox) or message_prefix (logical decoding messages, PostgreSQL)")
	case o.MessagePrefix != "" && mysql:
		v.fail(p+"message_prefix", ErrInvalid, "logical decoding messages are PostgreSQL's: on MySQL relay an outbox table (table: shop.outbox)")
	}
	if o.Table != "" {
		v.outboxTable(o.Table, mysql)
	}
	if strings.TrimSpace(o.MessagePrefix) != o.MessagePrefix || strings.HasPrefix(o.MessagePrefix, "cdcd.heartbeat") {
		v.fail(p+"message_prefix", ErrInvalid, "%s is not usable: no surrounding spaces, and not cdcd's own heartbeat prefix", shortQuote(o.MessagePrefix))
	}
	v.outboxColumns(o)
	switch t := strings.ReplaceAll(strings.ReplaceAll(o.Topic, "${routedByValue}", "x"), OutboxTopicVar, "x"); {
	case !topicChars.MatchString(t) || len(t) > 200:
		v.fail(p+"topic", ErrInvalid, "%s is not a topic template: use letters, digits, '.', '_', '-' and ${aggregatetype}, e.g. outbox.${aggregatetype}", shortQuote(o.Topic))
	case strings.HasPrefix(t, "_") || strings.HasPrefix(t, v.c.Pipeline+"."):
		v.fail(p+"topic", ErrInvalid, "%s would mix with cdcd's own topics (those starting with _ or the pipeline name): pick another prefix, e.g. outbox.${aggregatetype}", shortQuote(o.Topic))
	}
	if o.Payload != PayloadAsIs && o.Payload != PayloadExpanded {
		v.fail(p+"payload", ErrInvalid, "must be as_is or expanded, got %s", shortQuote(o.Payload))
	}
	v.outboxTargets(o)
	a := o.Alerts
	v.above("outbox.alerts.lag", int64(a.Lag.Warning), int64(a.Lag.Critical), func(n int64) string { return time.Duration(n).String() })
	v.above("outbox.alerts.table_bytes", int64(a.TableBytes.Warning), int64(a.TableBytes.Critical), func(n int64) string { return ByteSize(n).String() })
}

// outboxTable checks the outbox table's name for the source's database.
func (v *validator) outboxTable(t string, mysql bool) {
	const path = "outbox.table"
	if mysql {
		if db, tbl, ok := strings.Cut(t, "."); !ok || db == "" || tbl == "" || strings.Contains(tbl, ".") {
			v.fail(path, ErrInvalid, "%s is not a table name: write database.table, e.g. shop.outbox", shortQuote(t))
		}
		return
	}
	if !validTable(t) {
		v.fail(path, ErrInvalid, "%s is not a table name: write schema.table (or table, for public.table)", shortQuote(t))
	}
}

func (v *validator) outboxColumns(o *Outbox) {
	const p = "outbox."
	c := o.Columns
	seen := map[string]string{}
	for _, f := range []struct{ key, name string }{{"id", c.ID}, {"aggregate_type", c.AggregateType}, {"aggregate_id", c.AggregateID},
		{"type", c.Type}, {"payload", c.Payload}, {"timestamp", c.Timestamp}} {
		if f.name == "" && f.key == "timestamp" {
			continue
		}
		if !columnName.MatchString(f.name) {
			v.fail(p+"columns."+f.key, ErrInvalid, "%s is not a column name", shortQuote(f.name))
			continue
		}
		if other, dup := seen[f.name]; dup {
			v.fail(p+"columns."+f.key, ErrInvalid, "%s is also columns.%s: each of the event's fields needs its own column", f.name, other)
		}
		seen[f.name] = f.key
	}
	names := map[string]int{}
	for i, h := range o.Headers {
		path := fmt.Sprintf("%sheaders[%d]", p, i)
		col, name, _ := strings.Cut(h, ":")
		if name == "" {
			name = col
		}
		switch lower := strings.ToLower(name); {
		case !columnName.MatchString(col):
			v.fail(path, ErrInvalid, "%s: write column or column:header-name, e.g. tenant_id:X-Tenant-Id", shortQuote(h))
		case !headerName.MatchString(name):
			v.fail(path, ErrInvalid, "%s is not a header name: use letters, digits and -", shortQuote(name))
		case containsFold(reservedHeaders, lower) || strings.HasPrefix(lower, "cdcd"):
			v.fail(path, ErrInvalid, "the header %s is the relay's own: name it differently (column:header-name)", name)
		default:
			if j, dup := names[lower]; dup {
				v.fail(path, ErrInvalid, "the header %s is also headers[%d]", name, j)
			}
			names[lower] = i
		}
	}
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

func (v *validator) outboxTargets(o *Outbox) {
	const p = "outbox.targets"
	if len(o.Targets) == 0 {
		v.fail(p, ErrInvalid, "at least one target is required, e.g. targets: [{log: {}}] or a webhook: {url: https://...}")
		return
	}
	logs := 0
	names := map[string]int{}
	for i, t := range o.Targets {
		path := fmt.Sprintf("%s[%d]", p, i)
		switch {
		case (t.Log == nil) == (t.Webhook == nil):
			v.fail(path, ErrInvalid, "each target is exactly one of log: {} and webhook: {url: ...}")
			continue
		case t.Log != nil:
			if logs++; logs > 1 {
				v.fail(path+".log", ErrInvalid, "the log is a target once")
			}
			continue
		}
		w := t.Webhook
		wp := path + ".webhook."
		v.webhookURL(wp+"url", w.URL)
		if !topicChars.MatchString(w.Name) {
			v.fail(wp+"name", ErrInvalid, "%s is not a target name: use letters, digits, '.', '_' and -", shortQuote(w.Name))
		} else if j, dup := names[w.Name]; dup {
			v.fail(wp+"name", ErrInvalid, "%s is also the name of targets[%d]: names keep each webhook's progress apart", w.Name, j)
		}
		names[w.Name] = i
		if w.Timeout <= 0 {
			v.fail(wp+"timeout", ErrInvalid, "must be positive, got %s", w.Timeout)
		}
		if w.Concurrency < 1 || w.Concurrency > 1024 {
			v.fail(wp+"concurrency", ErrInvalid, "must be from 1 to 1024, got %d", w.Concurrency)
		}
		if w.BackoffMin <= 0 || w.BackoffMax < w.BackoffMin {
			v.fail(wp+"backoff_max", ErrInvalid, "backoff_min must be positive and backoff_max at least backoff_min (got %s and %s)", w.BackoffMin, w.BackoffMax)
		}
		if w.GiveUpAfter < w.Timeout {
			v.fail(wp+"give_up_after", ErrInvalid, "must be at least the timeout (%s), got %s", w.Timeout, w.GiveUpAfter)
		}
		if !topicChars.MatchString(w.DeadLetterTopic) {
			v.fail(wp+"dead_letter_topic", ErrInvalid, "%s is not a topic name", shortQuote(w.DeadLetterTopic))
		}
	}
}

// webhookURL requires https, or http to a loopback address (a receiver on
// the same machine).
func (v *validator) webhookURL(path, raw string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		v.fail(path, ErrInvalid, "required: an https:// URL, e.g. https://orders.example.com/events")
		return
	}
	if u.Scheme == "http" {
		host := u.Hostname()
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			v.fail(path, ErrInvalid, "must be https:// (events and their signatures would cross the network in clear); http:// is for loopback addresses only")
		}
	}
}
