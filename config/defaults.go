package config

import (
	"github.com/cdcd-dev/cdcd/internal/pgident"
	"net/url"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// The defaults, as documented on the Config fields and in DESIGN.md.
const (
	defaultDataDir        = "./cdcd-data"
	defaultSnapshot       = "initial"
	defaultHeartbeat      = 10 * time.Second
	defaultBackend        = "embedded"
	defaultPartitions     = 8
	defaultRetention      = 168 * time.Hour
	defaultCatalogType    = "sql"
	defaultCatalogName    = "cdcd"
	defaultNamespace      = "cdc"
	defaultFormatVersion  = 3
	defaultMode           = "upsert"
	defaultCommitInterval = 10 * time.Second
	defaultRetryInterval  = 30 * time.Second
	defaultListen         = "127.0.0.1:8089"

	// defaultSchema is the schema of a bare table name.
	defaultSchema = "public"
	// slotPrefix starts the default slot and publication names.
	slotPrefix = "cdcd_"
)

// ApplyDefaults fills every zero field of a Config built in Go with its
// default, normalizes table names to schema.table and makes a relative
// file:// warehouse absolute. Parse does this itself. Calling it twice
// changes nothing.
func (c *Config) ApplyDefaults() {
	c.applyDefaults(func(string) bool { return false })
}

// applyDefaults is the one defaults function. explicit reports whether the
// file set a key (even to a zero value, which then stays and is validated).
func (c *Config) applyDefaults(explicit func(path string) bool) {
	orDefault(&c.DataDir, defaultDataDir, explicit("data_dir"))
	if pg := c.Source.Postgres; pg != nil {
		if c.Pipeline != "" {
			orDefault(&pg.Slot, slotPrefix+c.Pipeline, explicit("source.postgres.slot"))
			orDefault(&pg.Publication, slotPrefix+c.Pipeline, explicit("source.postgres.publication"))
		}
		orDefault(&pg.Snapshot, defaultSnapshot, explicit("source.postgres.snapshot"))
		orDefault(&pg.HeartbeatInterval, defaultHeartbeat, explicit("source.postgres.heartbeat_interval"))
		pg.Incremental.applyDefaults(explicit)
		for i, t := range pg.Tables {
			pg.Tables[i] = normalizeTable(t)
		}
	}
	c.mysqlDefaults(explicit)
	orDefault(&c.Log.Backend, defaultBackend, explicit("log.backend"))
	orDefault(&c.Log.Partitions, defaultPartitions, explicit("log.partitions"))
	orDefault(&c.Log.Retention, defaultRetention, explicit("log.retention"))
	orDefault(&c.Log.Tombstones, true, explicit("log.tombstones"))
	orDefault(&c.Log.Compression, "s2", explicit("log.compression"))
	c.kafkaDefaults(explicit)
	if c.Sink.Iceberg == nil {
		c.Sink.Iceberg = &Iceberg{}
	}
	c.Sink.Iceberg.applyDefaults(c.DataDir, explicit)
	if c.Admin.Listen == "" && explicit("admin.listen") {
		c.Admin.Listen = ListenOff
	}
	orDefault(&c.Admin.Listen, defaultListen, explicit("admin.listen"))
	if auth := c.Admin.Auth; auth != nil {
		orDefault(&auth.ProtectReads, !c.Admin.Loopback(), explicit("admin.auth.protect_reads"))
	}
	c.applyOperatorDefaults(explicit)
	c.outboxDefaults(explicit)
	c.Reconcile.applyDefaults(explicit)
}

func (ic *Iceberg) applyDefaults(dataDir string, explicit func(path string) bool) {
	const p = "sink.iceberg."
	cat := &ic.Catalog
	orDefault(&cat.Type, defaultCatalogType, explicit(p+"catalog.type"))
	if cat.Type == "sql" && dataDir != "" {
		orDefault(&cat.URI, "sqlite://"+uriDir(dataDir)+"/catalog.db", explicit(p+"catalog.uri"))
	}
	orDefault(&cat.Name, defaultCatalogName, explicit(p+"catalog.name"))
	if dataDir != "" && cat.Type != "rest" {
		orDefault(&ic.Warehouse, fileURL(filepath.Join(dataDir, "warehouse")), explicit(p+"warehouse"))
	}
	ic.Compaction.applyDefaults(explicit)
	if rest, ok := strings.CutPrefix(ic.Warehouse, "file://"); ok && rest != "" && !strings.HasPrefix(rest, "/") {
		ic.Warehouse = fileURL(rest)
	}
	if s3 := ic.S3; s3 != nil {
		orDefault(&s3.PathStyle, s3.Endpoint != "", explicit(p+"s3.path_style"))
	}
	orDefault(&ic.Namespace, defaultNamespace, explicit(p+"namespace"))
	orDefault(&ic.FormatVersion, defaultFormatVersion, explicit(p+"format_version"))
	orDefault(&ic.Mode, defaultMode, explicit(p+"mode"))
	orDefault(&ic.CommitInterval, defaultCommitInterval, explicit(p+"commit_interval"))
	orDefault(&ic.RetryInterval, defaultRetryInterval, explicit(p+"retry_interval"))
}

// orDefault sets *p to def when it is zero and the file did not set it.
func orDefault[T comparable](p *T, def T, explicit bool) {
	var zero T
	if *p == zero && !explicit {
		*p = def
	}
}

// normalizeTable turns a bare table name into public.name.
func normalizeTable(t string) string {
	if t == "" {
		return t
	}
	return pgident.Normalize(t) // public.name, quoted where SQL needs it
}

// uriDir writes a directory for a sqlite:// URI: slashes, and a leading
// ./ on relative paths so the first part is not taken for a host.
func uriDir(dir string) string {
	d := filepath.ToSlash(dir)
	if d != "/" {
		d = strings.TrimRight(d, "/")
	}
	if path.IsAbs(d) || strings.HasPrefix(d, "./") || strings.HasPrefix(d, "../") || d == "." || d == ".." {
		return d
	}
	return "./" + d
}

// fileURL returns the absolute file:// URL of a local path (relative paths
// are taken from the working directory).
func fileURL(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(p)}).String()
}

// The defaults of the shutdown, alerts and masking sections (operator.go).
const (
	defaultShutdownDeadline = 30 * time.Second
	defaultAlertInterval    = 15 * time.Second
	defaultRealert          = 10 * time.Minute
	defaultWebhookTimeout   = 5 * time.Second
	defaultWebhookRetries   = 5
	defaultWebhookBackoff   = time.Second
)

var (
	defaultSlotLagBytes   = SizeLimit{Warning: 1 << 30, Critical: 10 << 30}
	defaultSlotLagTime    = TimeLimit{Warning: 5 * time.Minute, Critical: 30 * time.Minute}
	defaultSafeWALPercent = PercentLimit{Warning: 50, Critical: 20}
	defaultConsumerLag    = TimeLimit{Warning: 5 * time.Minute, Critical: 30 * time.Minute}
	defaultTablePaused    = TimeLimit{Warning: time.Minute, Critical: 30 * time.Minute}
	defaultCommitStall    = TimeLimit{Warning: 5 * time.Minute, Critical: 15 * time.Minute}
)

// applyOperatorDefaults fills the shutdown, alerts and masking sections.
func (c *Config) applyOperatorDefaults(explicit func(path string) bool) {
	orDefault(&c.Shutdown.Deadline, defaultShutdownDeadline, explicit("shutdown.deadline"))
	a := &c.Alerts
	orDefault(&a.Interval, defaultAlertInterval, explicit("alerts.interval"))
	orDefault(&a.RealertInterval, defaultRealert, explicit("alerts.realert_interval"))
	limit(&a.SlotLagBytes.Warning, &a.SlotLagBytes.Critical, defaultSlotLagBytes.Warning, defaultSlotLagBytes.Critical, "alerts.slot_lag_bytes", explicit)
	limit(&a.SlotLagTime.Warning, &a.SlotLagTime.Critical, defaultSlotLagTime.Warning, defaultSlotLagTime.Critical, "alerts.slot_lag_time", explicit)
	limit(&a.SafeWALPercent.Warning, &a.SafeWALPercent.Critical, defaultSafeWALPercent.Warning, defaultSafeWALPercent.Critical, "alerts.safe_wal_percent", explicit)
	limit(&a.ConsumerLag.Warning, &a.ConsumerLag.Critical, defaultConsumerLag.Warning, defaultConsumerLag.Critical, "alerts.consumer_lag", explicit)
	limit(&a.TablePaused.Warning, &a.TablePaused.Critical, defaultTablePaused.Warning, defaultTablePaused.Critical, "alerts.table_paused", explicit)
	limit(&a.CommitStall.Warning, &a.CommitStall.Critical, defaultCommitStall.Warning, defaultCommitStall.Critical, "alerts.commit_stall", explicit)
	if w := a.Webhook; w != nil {
		orDefault(&w.Timeout, defaultWebhookTimeout, explicit("alerts.webhook.timeout"))
		orDefault(&w.Retries, defaultWebhookRetries, explicit("alerts.webhook.retries"))
		orDefault(&w.Backoff, defaultWebhookBackoff, explicit("alerts.webhook.backoff"))
	}
	if m := c.Masking; m != nil {
		for i := range m.Tables {
			m.Tables[i].Table = normalizeTable(m.Tables[i].Table)
		}
	}
}

func limit[T comparable](warn, crit *T, dw, dc T, path string, explicit func(string) bool) {
	orDefault(warn, dw, explicit(path+".warning"))
	orDefault(crit, dc, explicit(path+".critical"))
}
