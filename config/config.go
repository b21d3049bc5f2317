// Package config turns cdcd's YAML file into a typed, validated Config.
//
// The keys are the user's contract (DESIGN.md "The config file"). Loading is
// strict: unknown or duplicate keys, wrong types and YAML 1.1 traps are
// errors that name the key path, line and column, and every problem of a
// file is reported at once (see Errors):
//
//	cdcd.yaml:7:3: log.partitions: 010 is ambiguous: YAML 1.1 reads a leading zero as octal (8), YAML 1.2 as decimal 10; write 10 (or 8 if you meant octal)
//	cdcd.yaml:11:5: sink.iceberg.comit_interval: unknown key comit_interval; did you mean commit_interval?
//
// String values may refer to the environment as ${NAME}; $${ is a literal ${.
// A key that is absent or null takes its default (documented on each
// field); a key set explicitly, even to a zero value, keeps that value and
// is validated. Relative paths are relative to the working directory, not
// to the file.
package config

import "time"

// Config is the whole file.
type Config struct {
	// Pipeline names the pipeline; it is the default slot and publication
	// name suffix and is stored in every Iceberg snapshot. Required.
	Pipeline string `yaml:"pipeline"`
	// DataDir holds the log, key indexes and local state. Default ./cdcd-data.
	DataDir string `yaml:"data_dir"`
	// Role is what this process runs: "all" (the source and the sink;
	// default), "source" (the source into the log) or "sink" (tables from
	// the log, shared with the pipeline's other sink processes). source and
	// sink need log.backend: kafka (kafka.go).
	Role string `yaml:"role"`

	Source Source `yaml:"source"`
	Log    Log    `yaml:"log"`
	Sink   Sink   `yaml:"sink"`
	// SchemaRegistry is the external registry of the Kafka backend (kafka.go).
	SchemaRegistry *SchemaRegistry `yaml:"schema_registry"`
	Admin          Admin           `yaml:"admin"`

	// Shutdown, Alerts and Masking: see operator.go.
	Shutdown Shutdown `yaml:"shutdown"`
	Alerts   Alerts   `yaml:"alerts"`
	// Masking is optional: absent, no column is masked.
	Masking *Masking `yaml:"masking"`
	// Outbox is optional: absent, no outbox is relayed (see outbox.go).
	Outbox *Outbox `yaml:"outbox"`
	// Reconcile configures cdcd reconcile (reconcile.go).
	Reconcile Reconcile `yaml:"reconcile"`

	// origin records where each key came from; nil for a Config built in Go.
	origin *origin
}

// Source configures exactly one database reader.
type Source struct {
	Postgres *Postgres `yaml:"postgres"`
	MySQL    *MySQL    `yaml:"mysql"` // see mysql.go
}

// Postgres configures the PostgreSQL reader.
type Postgres struct {
	// DSN is a libpq URL or key=value string; ${ENV} is expanded, and
	// escaped into the user info, query or value it stands in (dsn.go).
	// Required. Its password is redacted by Config.String.
	DSN string `yaml:"dsn" secret:"true"`
	// Slot is the logical replication slot; default cdcd_<pipeline>.
	Slot string `yaml:"slot"`
	// Publication is the publication; default cdcd_<pipeline>.
	Publication string `yaml:"publication"`
	// Tables lists "schema.table" names to capture; a bare name means
	// public.name. At least one.
	Tables []string `yaml:"tables"`
	// Snapshot is "initial" (load existing rows first; default),
	// "incremental" (read them by chunks while streaming) or "never".
	Snapshot string `yaml:"snapshot"`
	// HeartbeatInterval: when no change has arrived for this long, cdcd
	// writes a logical decoding message so the slot keeps advancing while
	// the captured tables are idle. Default 10s; an explicit 0 turns
	// heartbeats off; otherwise at least 100ms.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// Incremental configures incremental snapshots (snapshot.go).
	Incremental Incremental `yaml:"incremental"`
}

// Log configures the log backend.
type Log struct {
	// Backend is "embedded" (default) or "kafka".
	Backend string `yaml:"backend"`
	// Partitions per table topic, 1 to 1024; default 8.
	Partitions int `yaml:"partitions"`
	// Retention of table topics; default 168h; an explicit 0 keeps records
	// forever.
	Retention time.Duration `yaml:"retention"`
	// Tombstones: after each delete, a record with the deleted row's key
	// and no value, as Debezium's connectors write it
	// (tombstones.on.delete), so a compacted topic can forget the key;
	// default true.
	Tombstones bool `yaml:"tombstones"`
	// Compression of the embedded log's batches: "s2" (default: a batch's
	// records stored as one S2 block when that makes it a tenth smaller)
	// or "none". Either reads both; a log with compressed batches needs a
	// cdcd that knows them (log/doc.go, "Compressed batches"). The Kafka
	// backend compresses as its producer is configured.
	Compression string `yaml:"compression"`
	// Kafka configures backend kafka (see kafka.go).
	Kafka *Kafka `yaml:"kafka"`
}

// Sink configures where tables land.
type Sink struct {
	Iceberg *Iceberg `yaml:"iceberg"`
}

// Iceberg configures the Iceberg sink.
type Iceberg struct {
	Catalog Catalog `yaml:"catalog"`
	// Warehouse is the root of table locations: file://path or s3://bucket/path.
	// Default file://<data_dir>/warehouse for a sql catalog. A relative
	// file:// path is made absolute (table locations must be readable from
	// anywhere). A rest catalog is sent the warehouse (as its "warehouse"
	// property), which may there also be a name the server knows; it has no
	// default: the server then picks table locations.
	Warehouse string `yaml:"warehouse" secret:"true"`
	// S3 configures access to s3:// warehouses and locations. Absent, the
	// AWS SDK's own defaults apply (AWS_* environment variables, shared
	// config files, instance roles).
	S3 *S3 `yaml:"s3"`
	// Namespace receives the tables: public.orders -> <namespace>.orders,
	// other schemas -> <namespace>.<schema>_<table>. Default "cdc".
	Namespace string `yaml:"namespace"`
	// FormatVersion is 3 (deletion vectors; default) or 2 (position deletes).
	FormatVersion int `yaml:"format_version"`
	// Mode is "upsert" (mirror the source; default) or "append" (changelog).
	Mode string `yaml:"mode"`
	// CommitInterval is the longest time between commits; default 10s.
	// A table commits sooner when its buffer is full, at the end of a
	// backlog it read, and when the source catches up with its database
	// after a backlog (docs/internals.md, "A stream's catch-up").
	CommitInterval time.Duration `yaml:"commit_interval"`
	// RetryInterval is how often a paused table is looked at again (it
	// resumes by itself once the cause is gone), a table whose commits
	// fail past their budget is restarted, and an idle table's catalog is
	// checked for a rollback or a drop under it; default 30s.
	RetryInterval time.Duration `yaml:"retry_interval"`
	// Tables holds per-table settings (partition spec of new tables).
	Tables []IcebergTable `yaml:"tables"`
	// Compaction configures compaction and metadata maintenance.
	Compaction Compaction `yaml:"compaction"`
}

// Catalog configures the Iceberg catalog.
type Catalog struct {
	// Type is "sql" (default) or "rest".
	Type string `yaml:"type"`
	// URI: sqlite://path or postgres://... for sql; http(s)://... for rest.
	// Default sqlite://<data_dir>/catalog.db for sql; required for rest. Its
	// password is redacted by Config.String.
	URI string `yaml:"uri" secret:"true"`
	// Name of the catalog; default "cdcd".
	Name string `yaml:"name"`
	// Credential authenticates to a rest catalog with OAuth2 client
	// credentials: "client_id:client_secret" (or a bare secret), exchanged
	// at the catalog's /v1/oauth/tokens for a bearer token. Use ${ENV};
	// redacted by Config.String. Not together with Token.
	Credential string `yaml:"credential,omitempty" secret:"all"`
	// Token is a bearer token for a rest catalog. Use ${ENV}; redacted by
	// Config.String. Not together with Credential.
	Token string `yaml:"token,omitempty" secret:"all"`
}

// S3 configures the S3 (or S3-compatible) object store of the warehouse.
type S3 struct {
	// Endpoint is the http(s):// URL of an S3-compatible service (MinIO,
	// Ceph, R2, ...). Default: AWS S3 for the region.
	Endpoint string `yaml:"endpoint"`
	// Region of the bucket, e.g. us-east-1. Default: AWS_REGION or the
	// shared AWS config.
	Region string `yaml:"region"`
	// PathStyle addresses objects as <endpoint>/<bucket>/<key> rather than
	// <bucket>.<endpoint>/<key>. Default true when an endpoint is set (what
	// S3-compatible services expect), false for AWS S3.
	PathStyle bool `yaml:"path_style"`
	// AccessKeyID and SecretAccessKey are static credentials, both or
	// neither; default: the AWS SDK's credential chain. Use ${ENV}; both
	// are redacted by Config.String.
	AccessKeyID     string `yaml:"access_key_id" secret:"all"`
	SecretAccessKey string `yaml:"secret_access_key" secret:"all"`
}
