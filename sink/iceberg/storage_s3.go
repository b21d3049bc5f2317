package iceberg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"

	icebergio "github.com/apache/iceberg-go/io"
	// iceberg-go reaches s3:// (and s3a://, s3n://) locations only through
	// a file IO registered for the scheme, and this package registers it
	// in its init: it exports no registration function, and the catalogs
	// build every table's IO through that registry (io.LoadFS). So the
	// import is blank on purpose. It links the AWS SDK but no other cloud's.
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	"github.com/aws/smithy-go"
)

// s3Props turns S3Config into iceberg-go's s3.* IO properties. A zero
// S3Config sets none, leaving the AWS SDK's and iceberg-go's defaults
// (which include AWS_S3_ENDPOINT and path-style addressing with it).
func s3Props(c S3Config) map[string]string {
	if c == (S3Config{}) {
		return nil
	}
	props := map[string]string{
		// Explicit: iceberg-go's default depends on the endpoint.
		icebergio.S3ForceVirtualAddressing: strconv.FormatBool(!c.PathStyle),
	}
	set := func(k, v string) {
		if v != "" {
			props[k] = v
		}
	}
	set(icebergio.S3EndpointURL, c.Endpoint)
	set(icebergio.S3Region, c.Region)
	set(icebergio.S3AccessKeyID, c.AccessKeyID)
	set(icebergio.S3SecretAccessKey, c.SecretAccessKey)
	return props
}

// probeName starts the name of the object checkWarehouse writes and
// removes again.
const probeName = ".cdcd-probe-"

// checkWarehouse writes a small object under the warehouse and removes it,
// so that a missing bucket, rejected credentials or an unreachable object
// store fail at start. Only s3:// warehouses are probed (a local one was
// created by ensureWarehouse, and a rest catalog's warehouse may be a name
// or a path on the server's machine).
func checkWarehouse(ctx context.Context, cfg CatalogConfig) error {
	w := cfg.Warehouse
	if scheme(w) != "s3" {
		return nil
	}
	_, rest, _ := strings.Cut(w, "://")
	bucket, _, _ := strings.Cut(rest, "/")
	fsys, err := icebergio.LoadFS(ctx, ioProps(cfg), w)
	if err != nil {
		return storageError(cfg, bucket, "set up S3 access", err)
	}
	if c, ok := fsys.(io.Closer); ok {
		defer c.Close()
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return openErr(ErrWarehouse, nil, "the file IO for %s cannot write", w)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	probe := strings.TrimSuffix(w, "/") + "/" + probeName + hex.EncodeToString(id[:])
	if err := wfs.WriteFile(probe, []byte("cdcd checks at start that it can write here; safe to delete\n")); err != nil {
		return storageError(cfg, bucket, "write to the warehouse", err)
	}
	if err := wfs.Remove(probe); err != nil {
		return storageError(cfg, bucket, "remove a file from the warehouse", err)
	}
	return nil
}

// storageError classifies an object-store failure by the S3 error code
// (or a network error) and says what to check.
func storageError(cfg CatalogConfig, bucket, doing string, err error) error {
	where := "AWS S3"
	if cfg.S3.Endpoint != "" {
		where = "the S3 endpoint " + safeURI(cfg.S3.Endpoint)
	}
	if cfg.S3.Region != "" {
		where += " (region " + cfg.S3.Region + ")"
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		code := apiErr.ErrorCode()
		switch code {
		case "NoSuchBucket":
			return openErr(ErrBucketMissing, err, "bucket %q at %s (%s): create the bucket, or fix sink.iceberg.warehouse", bucket, where, apiErr.ErrorMessage())
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed":
			return openErr(ErrStorageAuth, err, "%s refused the credentials for bucket %q (%s: %s): check sink.iceberg.s3.access_key_id and secret_access_key (or the AWS_* environment)", where, bucket, code, apiErr.ErrorMessage())
		case "AccessDenied", "Forbidden", "AllAccessDisabled":
			return openErr(ErrStorageAuth, err, "%s denied access to bucket %q (%s: %s): check the credentials and that they may get, put, delete and list objects under %s", where, bucket, code, apiErr.ErrorMessage(), cfg.Warehouse)
		case "PermanentRedirect", "AuthorizationQueryParametersError", "IllegalLocationConstraintException":
			return openErr(ErrWarehouse, err, "bucket %q is not in the region configured for %s (%s: %s): set sink.iceberg.s3.region to the bucket's region", bucket, where, code, apiErr.ErrorMessage())
		}
		return openErr(ErrWarehouse, err, "%s at %s, bucket %q: %v", doing, where, bucket, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return openErr(ErrStorageUnreachable, err, "cannot reach %s: %v; check sink.iceberg.s3.endpoint and that the service is running", where, err)
	}
	if msg := err.Error(); strings.Contains(msg, "failed to retrieve credentials") || strings.Contains(msg, "no EC2 IMDS role found") {
		return openErr(ErrStorageAuth, err, "no S3 credentials found for bucket %q: set sink.iceberg.s3.access_key_id and secret_access_key, or the AWS_* environment: %v", bucket, err)
	}
	return openErr(ErrWarehouse, err, "%s at %s, bucket %q: %v", doing, where, bucket, err)
}
