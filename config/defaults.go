package config

import (
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
		for i, t := range pg.Tables {
			pg.Tables[i] = normalizeTable(t)
		}
	}
	orDefault(&c.Log.Backend, defaultBackend, explicit("log.backend"))
	orDefault(&c.Log.Partitions, defaultPartitions, explicit("log.partitions"))
	orDefault(&c.Log.Retention, defaultRetention, explicit("log.retention"))
	if c.Sink.Iceberg == nil {
		c.Sink.Iceberg = &Iceberg{}
	}
	c.Sink.Iceberg.applyDefaults(c.DataDir, explicit)
	if c.Admin.Listen == "" && explicit("admin.listen") {
		c.Admin.Listen = ListenOff
	}
	orDefault(&c.Admin.Listen, defaultListen, explicit("admin.listen"))
}

func (ic *Iceberg) applyDefaults(dataDir string, explicit func(path string) bool) {
	const p = "sink.iceberg."
	cat := &ic.Catalog
	orDefault(&cat.Type, defaultCatalogType, explicit(p+"catalog.type"))
	if cat.Type == "sql" && dataDir != "" {
		orDefault(&cat.URI, "sqlite://"+uriDir(dataDir)+"/catalog.db", explicit(p+"catalog.uri"))
	}
	orDefault(&cat.Name, defaultCatalogName, explicit(p+"catalog.name"))
	if dataDir != "" {
		orDefault(&ic.Warehouse, fileURL(filepath.Join(dataDir, "warehouse")), explicit(p+"warehouse"))
	}
	if rest, ok := strings.CutPrefix(ic.Warehouse, "file://"); ok && rest != "" && !strings.HasPrefix(rest, "/") {
		ic.Warehouse = fileURL(rest)
	}
	orDefault(&ic.Namespace, defaultNamespace, explicit(p+"namespace"))
	orDefault(&ic.FormatVersion, defaultFormatVersion, explicit(p+"format_version"))
	orDefault(&ic.Mode, defaultMode, explicit(p+"mode"))
	orDefault(&ic.CommitInterval, defaultCommitInterval, explicit(p+"commit_interval"))
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
	if t == "" || strings.Contains(t, ".") {
		return t
	}
	return defaultSchema + "." + t
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
