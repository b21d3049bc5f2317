package config

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/internal/pgident"
)

// Validate reports every contradiction or invalid value in c as Errors,
// each with its key path (and, for a Config parsed from a file, the file,
// line and column of the key, or of the mapping that lacks it). It returns
// nil when c can be run. Parse calls it.
//
// REQUIRES: defaults applied (Parse does it; ApplyDefaults for a Config
// built in Go).
func (c *Config) Validate() error {
	return c.validate().err()
}

type validator struct {
	c    *Config
	errs Errors
}

func (c *Config) validate() Errors {
	v := &validator{c: c}
	v.pipeline()
	if c.DataDir == "" {
		v.fail("data_dir", ErrInvalid, "must not be empty (the default is %s)", defaultDataDir)
	}
	v.source()
	v.log()
	v.sink()
	v.admin()
	v.operator()
	v.outbox()
	v.reconcile()
	v.notYet()
	v.errs.sort()
	return v.errs
}

// fail records a problem at path, positioned at the key in the file.
func (v *validator) fail(path string, class error, format string, args ...any) {
	at := v.c.origin.at(path)
	e := &Error{Line: at.line, Column: at.col, Path: path, Msg: oneLine(fmt.Sprintf(format, args...)), Err: class}
	if v.c.origin != nil {
		e.File = v.c.origin.file
	}
	v.errs = append(v.errs, e)
}

// where says where path is in the file, for messages naming two places.
func (v *validator) where(path string) string {
	if at := v.c.origin.at(path); at.line > 0 {
		return fmt.Sprintf(" at line %d", at.line)
	}
	return ""
}

func (v *validator) pipeline() {
	p := v.c.Pipeline
	switch {
	case p == "":
		v.fail("pipeline", ErrInvalid, "required: name the pipeline, e.g. pipeline: shop")
	case !pipelineName.MatchString(p):
		v.fail("pipeline", ErrInvalid, "%s is not a valid pipeline name: use lowercase letters, digits and _, starting with a letter (it becomes part of the replication slot name %s<pipeline>)", shortQuote(p), slotPrefix)
	case len(slotPrefix)+len(p) > maxIdentLen:
		v.fail("pipeline", ErrInvalid, "too long (%d bytes): the slot name %s<pipeline> must fit PostgreSQL's %d-byte limit, so use at most %d bytes", len(p), slotPrefix, maxIdentLen, maxIdentLen-len(slotPrefix))
	}
}

// pipelineOK reports whether names derived from the pipeline are sound.
func (v *validator) pipelineOK() bool {
	p := v.c.Pipeline
	return pipelineName.MatchString(p) && len(slotPrefix)+len(p) <= maxIdentLen
}

func (v *validator) source() {
	pg := v.c.Source.Postgres
	if my := v.c.Source.MySQL; my != nil {
		if pg != nil {
			v.fail("source", ErrInvalid, "exactly one source: remove source.postgres or source.mysql")
		}
		v.mysqlSource(my)
		if s := scheme(my.DSN); s == "mysql" || s == "mariadb" {
			if msg := netURLProblem(my.DSN); msg != "" {
				v.fail("source.mysql.dsn", ErrInvalid, "the URL does not parse: %s (or set the password in an environment variable and write ${NAME}: cdcd escapes it)", msg)
			}
		}
		return
	}
	if pg == nil {
		v.fail("source", ErrInvalid, "exactly one source is required: add source.postgres (or source.mysql) with a dsn and tables")
		return
	}
	v.dsn(pg.DSN)
	v.pgName("source.postgres.slot", pg.Slot, slotName, "replication slot", "lowercase letters, digits and _")
	v.pgName("source.postgres.publication", pg.Publication, publicationName, "publication", "lowercase letters, digits and _, not starting with a digit")
	v.tables(pg.Tables)
	v.incremental(pg)
	if h := pg.HeartbeatInterval; h < 0 || h > 0 && h < 100*time.Millisecond {
		v.fail("source.postgres.heartbeat_interval", ErrInvalid, "must be 0 (off) or at least 100ms, got %s", h)
	}
}

var urlScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// scheme returns the lowercased scheme of a URL, or "" if it has none.
func scheme(s string) string {
	if m := urlScheme.FindStringSubmatch(s); m != nil {
		return strings.ToLower(m[1])
	}
	return ""
}

// dsn checks the form of a DSN without ever echoing it (it holds secrets).
func (v *validator) dsn(dsn string) {
	const path = "source.postgres.dsn"
	switch s := scheme(dsn); {
	case strings.TrimSpace(dsn) == "":
		v.fail(path, ErrInvalid, "required: a libpq URL such as postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop, or key=value pairs")
	case s != "" && s != "postgres" && s != "postgresql":
		v.fail(path, ErrInvalid, "a URL DSN must start with postgres:// or postgresql://, got %s://", s)
	case s == "" && strings.Contains(dsn, "://"):
		v.fail(path, ErrInvalid, "a URL DSN must start with postgres:// or postgresql://")
	case s == "" && !strings.Contains(dsn, "="):
		v.fail(path, ErrInvalid, "not a DSN: write a libpq URL (postgres://...) or key=value pairs (host=... dbname=...)")
	case s == "":
		if msg := kvProblem(dsn); msg != "" {
			v.fail(path, ErrInvalid, "the key=value DSN does not parse: %s; a password from ${ENV} is escaped for you", msg)
		}
	default:
		v.pgURL(path, dsn)
	}
}

// pgURL checks a postgres:// URL as libpq reads it, never echoing it.
func (v *validator) pgURL(path, u string) {
	if msg := pgURLProblem(u); msg != "" {
		v.fail(path, ErrInvalid, "the URL does not parse: %s (or set the password in an environment variable and write ${NAME}: cdcd escapes it)", msg)
	}
}

// pgName checks a slot or publication name. A name derived from a bad
// pipeline is left to the pipeline's own message.
func (v *validator) pgName(path, name string, re *regexp.Regexp, what, allowed string) {
	if name == slotPrefix+v.c.Pipeline && !v.pipelineOK() || name == "" && v.c.Pipeline == "" {
		return
	}
	if !re.MatchString(name) || len(name) > maxIdentLen {
		v.fail(path, ErrInvalid, "%s is not a valid PostgreSQL %s name: use %s, at most %d bytes", shortQuote(name), what, allowed, maxIdentLen)
	}
}

// tables checks names, duplicates and collisions of Iceberg targets.
func (v *validator) tables(tables []string) {
	const path = "source.postgres.tables"
	if len(tables) == 0 && v.c.Outbox == nil { // an outbox relay may run alone
		v.fail(path, ErrInvalid, "at least one table is required, e.g. tables: [public.orders]")
		return
	}
	ic := v.c.Sink.Iceberg
	seen := make(map[string]int, len(tables))
	targets := make(map[string]int, len(tables))
	topics := make(map[string]int, len(tables))
	for i, t := range tables {
		p := fmt.Sprintf("%s[%d]", path, i)
		if !validTable(t) {
			v.fail(p, ErrInvalid, "%s is not a table name: write schema.table (or table, for public.table) with letters, digits, _ and $, "+
				`and quote a part with other characters: public."Order Items"`, shortQuote(t))
			continue
		}
		name := normalizeTable(t)
		if j, dup := seen[name]; dup {
			v.fail(p, ErrInvalid, "%s is listed twice (also as tables[%d]%s): remove one", name, j, v.where(fmt.Sprintf("%s[%d]", path, j)))
			continue
		}
		seen[name] = i
		sch, tbl := splitTable(name)
		topic := pgident.TopicPart(sch) + "." + pgident.TopicPart(tbl)
		if j, clash := topics[topic]; clash {
			v.fail(p, ErrInvalid, "%s and %s (tables[%d]%s) both map to the topic <pipeline>.%s (a topic name takes only letters, digits, _ and -); capture only one of them",
				name, normalizeTable(tables[j]), j, v.where(fmt.Sprintf("%s[%d]", path, j)), topic)
			continue
		}
		topics[topic] = i
		if ic == nil || !validNamespace(ic.Namespace) {
			continue
		}
		ns, tbl := ic.TableIdent(name)
		target := strings.ToLower(ns + "." + tbl)
		if j, clash := targets[target]; clash {
			v.fail(p, ErrInvalid, "%s and %s (tables[%d]%s) both map to the Iceberg table %s.%s; capture only one of them (per-table target names are not configurable yet)",
				name, normalizeTable(tables[j]), j, v.where(fmt.Sprintf("%s[%d]", path, j)), ns, tbl)
			continue
		}
		targets[target] = i
	}
}

func (v *validator) log() {
	l := v.c.Log
	if l.Backend != "embedded" && l.Backend != "kafka" {
		v.fail("log.backend", ErrInvalid, "must be embedded or kafka, got %s", shortQuote(l.Backend))
	}
	if l.Partitions < 1 || l.Partitions > 1024 {
		v.fail("log.partitions", ErrInvalid, "must be from 1 to 1024, got %d", l.Partitions)
	}
	if l.Compression != "s2" && l.Compression != "none" {
		v.fail("log.compression", ErrInvalid, "must be s2 or none, got %s", shortQuote(l.Compression))
	}
	if l.Retention < 0 {
		v.fail("log.retention", ErrInvalid, "must not be negative, got %s (0 keeps records forever)", l.Retention)
	}
	v.kafka()
}

func (v *validator) sink() {
	ic := v.c.Sink.Iceberg
	if ic == nil {
		v.fail("sink.iceberg", ErrInvalid, "required: add sink.iceberg (e.g. sink: {iceberg: {mode: append}})")
		return
	}
	v.catalog(ic.Catalog)
	v.warehouse(ic.Warehouse, ic.Catalog.Type)
	v.s3(ic)
	if !validNamespace(ic.Namespace) {
		v.fail("sink.iceberg.namespace", ErrInvalid, "%s is not a namespace: use letters, digits, _ and -, with . between levels", shortQuote(ic.Namespace))
	}
	if ic.FormatVersion != 2 && ic.FormatVersion != 3 {
		v.fail("sink.iceberg.format_version", ErrInvalid, "must be 3 (deletion vectors) or 2 (position delete files), got %d", ic.FormatVersion)
	}
	if ic.Mode != "upsert" && ic.Mode != "append" {
		v.fail("sink.iceberg.mode", ErrInvalid, "must be upsert or append, got %s", shortQuote(ic.Mode))
	}
	if ic.CommitInterval <= 0 {
		v.fail("sink.iceberg.commit_interval", ErrInvalid, "must be positive, got %s", ic.CommitInterval)
	}
	if ic.RetryInterval < time.Second {
		v.fail("sink.iceberg.retry_interval", ErrInvalid, "must be at least 1s (each look loads the table from the catalog), got %s", ic.RetryInterval)
	}
	v.icebergTables(ic)
	v.compaction(ic.Compaction)
}

func (v *validator) catalog(cat Catalog) {
	const p = "sink.iceberg.catalog."
	s := scheme(cat.URI)
	switch cat.Type {
	case "sql":
		switch s {
		case "postgres", "postgresql":
			v.pgURL(p+"uri", cat.URI)
		case "sqlite":
		default:
			v.fail(p+"uri", ErrInvalid, "a sql catalog needs a sqlite:// or postgres:// URI, got %s", describeScheme(cat.URI, s))
		}
	case "rest":
		if s != "http" && s != "https" {
			v.fail(p+"uri", ErrInvalid, "a rest catalog needs an http:// or https:// URI, got %s", describeScheme(cat.URI, s))
		}
	default:
		v.fail(p+"type", ErrInvalid, "must be sql or rest, got %s", shortQuote(cat.Type))
	}
	if cat.Name == "" {
		v.fail(p+"name", ErrInvalid, "must not be empty (the default is %s)", defaultCatalogName)
	}
	for _, k := range []struct{ key, val string }{{"credential", cat.Credential}, {"token", cat.Token}} {
		if k.val != "" && cat.Type == "sql" {
			v.fail(p+k.key, ErrInvalid, "is for rest catalogs only: a sql catalog's credentials go in its uri (postgres://user:${PGPASSWORD}@host/db)")
		}
	}
	if cat.Type == "rest" && cat.Credential != "" && cat.Token != "" {
		v.fail(p+"token", ErrInvalid, "set credential (OAuth2 client credentials, exchanged for a token) or token (a bearer token), not both (credential is set%s)", v.where(p+"credential"))
	}
}

// describeScheme names what a URI starts with, without echoing secrets.
func describeScheme(uri, s string) string {
	switch {
	case uri == "":
		return "nothing"
	case s == "":
		return "no scheme"
	}
	return s + "://"
}

func (v *validator) warehouse(w, catalogType string) {
	const path = "sink.iceberg.warehouse"
	s := scheme(w)
	if catalogType == "rest" && s != "file" && s != "s3" {
		// A rest catalog may know its warehouses by name, or pick
		// locations itself (no warehouse).
		if strings.TrimSpace(w) != w || strings.ContainsAny(w, "\n\r") {
			v.fail(path, ErrInvalid, "%s has surrounding spaces or line breaks: write the warehouse name or URL alone", shortQuote(w))
		}
		return
	}
	switch s {
	case "file":
		if !strings.HasPrefix(strings.TrimPrefix(w, "file://"), "/") {
			v.fail(path, ErrInvalid, "a file:// warehouse needs a path, e.g. file:///var/lib/cdcd/warehouse")
		}
	case "s3":
		if bucket, _, _ := strings.Cut(strings.TrimPrefix(w, "s3://"), "/"); bucket == "" {
			v.fail(path, ErrInvalid, "an s3:// warehouse needs a bucket: s3://bucket/path")
		}
	default:
		v.fail(path, ErrInvalid, "must be a file:// or s3:// URL, got %s", describeScheme(w, s))
	}
}

// s3 checks the object-store settings. They apply to s3:// warehouses,
// and to a rest catalog, whose server may hand out s3:// locations.
func (v *validator) s3(ic *Iceberg) {
	const p = "sink.iceberg.s3"
	s3 := ic.S3
	if s3 == nil {
		return
	}
	if scheme(ic.Warehouse) != "s3" && ic.Catalog.Type != "rest" {
		v.fail(p, ErrInvalid, "applies to s3:// warehouses, but the warehouse is %s%s: set warehouse: s3://bucket/path or remove sink.iceberg.s3",
			describeScheme(ic.Warehouse, scheme(ic.Warehouse)), v.where("sink.iceberg.warehouse"))
	}
	if e := s3.Endpoint; e != "" {
		if sc := scheme(e); sc != "http" && sc != "https" {
			v.fail(p+".endpoint", ErrInvalid, "must be an http:// or https:// URL such as http://127.0.0.1:9000, got %s", describeScheme(e, sc))
		} else if u, err := url.Parse(e); err != nil || u.Host == "" {
			v.fail(p+".endpoint", ErrInvalid, "%s is not a URL with a host, e.g. https://s3.example.com", shortQuote(e))
		}
	}
	if strings.ContainsAny(s3.Region, " /\t") {
		v.fail(p+".region", ErrInvalid, "%s is not a region name such as us-east-1", shortQuote(s3.Region))
	}
	switch {
	case s3.AccessKeyID != "" && s3.SecretAccessKey == "":
		v.fail(p+".secret_access_key", ErrInvalid, "required with access_key_id: set both (e.g. secret_access_key: ${AWS_SECRET_ACCESS_KEY}) or neither (the AWS SDK's credential chain)")
	case s3.AccessKeyID == "" && s3.SecretAccessKey != "":
		v.fail(p+".access_key_id", ErrInvalid, "required with secret_access_key: set both (e.g. access_key_id: ${AWS_ACCESS_KEY_ID}) or neither (the AWS SDK's credential chain)")
	}
}
