package iceberg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
)

// The classes of problems OpenCatalog reports. Each error it returns wraps
// exactly one of them (test with errors.Is) and says what failed, where,
// and what to do.
var (
	// ErrCatalogUnreachable: the catalog's server (PostgreSQL, REST) could
	// not be reached or did not answer in time.
	ErrCatalogUnreachable = errors.New("iceberg: catalog unreachable")
	// ErrCatalogAuth: the catalog rejected the credentials.
	ErrCatalogAuth = errors.New("iceberg: catalog credentials rejected")
	// ErrCatalog: any other failure to open the catalog (a bad URI, a
	// database that does not exist, a server that answered with an error).
	ErrCatalog = errors.New("iceberg: cannot open catalog")
	// ErrStorageUnreachable: the object store could not be reached.
	ErrStorageUnreachable = errors.New("iceberg: storage unreachable")
	// ErrStorageAuth: the object store rejected the credentials, or they
	// may not write to the warehouse.
	ErrStorageAuth = errors.New("iceberg: storage credentials rejected")
	// ErrBucketMissing: the warehouse's bucket does not exist.
	ErrBucketMissing = errors.New("iceberg: bucket does not exist")
	// ErrWarehouse: any other failure to write to the warehouse.
	ErrWarehouse = errors.New("iceberg: warehouse not writable")
)

// OpenError is an error of OpenCatalog: its class (one of the Err*
// variables above), a one-line message saying what failed, where and
// what to do, and the underlying error. errors.Is sees the class and
// errors.As the cause (e.g. a *pgconn.PgError or a smithy.APIError).
type OpenError struct {
	Class error
	Msg   string
	Cause error
}

func (e *OpenError) Error() string { return e.Class.Error() + ": " + e.Msg }

func (e *OpenError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Class}
	}
	return []error{e.Class, e.Cause}
}

// openErr builds an *OpenError; the message is made one line (causes such
// as pgx's connect errors span several).
func openErr(class, cause error, format string, args ...any) error {
	msg := strings.Join(strings.Fields(fmt.Sprintf(format, args...)), " ")
	return &OpenError{Class: class, Msg: msg, Cause: cause}
}

// openTimeout bounds OpenCatalog's connection and its probes, so a daemon
// pointed at a black hole fails at start rather than hangs.
const openTimeout = 30 * time.Second

// CatalogConfig says which catalog to open and how to reach the warehouse.
// The daemon fills it from sink.iceberg (config package); the key names in
// OpenCatalog's error messages are those keys.
type CatalogConfig struct {
	// Type is "sql" (default) or "rest".
	Type string
	// URI is, for sql, sqlite://PATH (the embedded catalog; its directory
	// is created) or postgres://USER:PASSWORD@HOST/DB (or postgresql://);
	// for rest, the catalog's base http(s):// URL, without /v1.
	URI string
	// Name of the catalog.
	Name string
	// Warehouse is the root of new tables' locations: file://PATH (created
	// if missing) or s3://BUCKET/PATH. A rest catalog is sent it as its
	// "warehouse" and may also know it by name; "" lets the server choose.
	Warehouse string
	// Credential is a rest catalog's OAuth2 client credential
	// ("client_id:client_secret", or a bare secret), exchanged at
	// <URI>/v1/oauth/tokens for a bearer token. Not together with Token.
	Credential string
	// Token is a bearer token for a rest catalog.
	Token string
	// S3 reaches s3:// warehouses and locations.
	S3 S3Config
}

// S3Config configures the S3 (or S3-compatible) object store. Zero fields
// leave the AWS SDK's defaults (environment, shared config, instance role).
type S3Config struct {
	// Endpoint is the URL of an S3-compatible service; "" for AWS S3.
	Endpoint string
	// Region of the bucket.
	Region string
	// PathStyle addresses objects as <endpoint>/<bucket>/<key>; false uses
	// virtual-hosted addressing (<bucket>.<endpoint>/<key>), which AWS S3
	// wants and most S3-compatible services don't (the config package
	// defaults it to true when an endpoint is set).
	PathStyle bool
	// AccessKeyID and SecretAccessKey are static credentials, both or
	// neither.
	AccessKeyID, SecretAccessKey string
}

// OpenCatalog opens (creating its tables if needed) the configured catalog
// and checks that it answers and that the warehouse can be written, so a
// bad URI, credential or bucket fails here, at start, with an error that
// wraps one of the ErrCatalog*, ErrStorage*, ErrBucketMissing or
// ErrWarehouse classes. The returned catalog implements Close (catalog.Closer).
func OpenCatalog(ctx context.Context, cfg CatalogConfig) (catalog.Catalog, error) {
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	var (
		cat catalog.Catalog
		err error
	)
	switch cfg.Type {
	case "", "sql":
		cat, err = openSQL(ctx, cfg)
	case "rest":
		cat, err = openREST(ctx, cfg)
	default:
		return nil, openErr(ErrCatalog, nil, "catalog type %q: use sql or rest (sink.iceberg.catalog.type)", cfg.Type)
	}
	if err != nil {
		return nil, err
	}
	if err := checkWarehouse(ctx, cfg); err != nil {
		if c, ok := cat.(catalog.Closer); ok {
			_ = c.Close()
		}
		return nil, err
	}
	return cat, nil
}

// ioProps are the properties from which iceberg-go builds a table's file
// IO: the warehouse and, for s3://, how to reach the object store.
func ioProps(cfg CatalogConfig) iceberg.Properties {
	props := iceberg.Properties{}
	if cfg.Warehouse != "" {
		props["warehouse"] = cfg.Warehouse
	}
	maps.Copy(props, s3Props(cfg.S3))
	return props
}

// scheme returns the lowercased scheme of a URI ("" without one).
func scheme(uri string) string {
	s, _, ok := strings.Cut(uri, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(s)
}

// safeURI shows a URI in messages without its secrets: no password, no
// query (it may hold one), no user info at all for http(s) (a token may
// stand there).
func safeURI(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Host == "" && u.Opaque != "" {
		if s := scheme(uri); s != "" {
			return s + "://…"
		}
		return "(unparsable)"
	}
	switch {
	case u.User == nil:
	case u.Scheme == "http" || u.Scheme == "https":
		u.User = nil
	default:
		u.User = url.User(u.User.Username())
	}
	u.RawQuery, u.ForceQuery, u.Fragment = "", false, ""
	return u.String()
}
