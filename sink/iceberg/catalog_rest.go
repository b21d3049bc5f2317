package iceberg

import (
	"context"
	"errors"
	"net"

	"github.com/apache/iceberg-go/catalog/rest"
)

// openREST opens an Iceberg REST catalog. iceberg-go's client fetches the
// server's /v1/config while opening (after exchanging a credential for a
// token), so an unreachable server or rejected credentials fail here.
func openREST(ctx context.Context, cfg CatalogConfig) (*rest.Catalog, error) {
	var opts []rest.Option
	if cfg.Warehouse != "" {
		opts = append(opts, rest.WithWarehouseLocation(cfg.Warehouse))
	}
	switch {
	case cfg.Credential != "" && cfg.Token != "":
		return nil, openErr(ErrCatalog, nil, "set a credential or a token for the rest catalog, not both (sink.iceberg.catalog)")
	case cfg.Credential != "":
		opts = append(opts, rest.WithCredential(cfg.Credential))
	case cfg.Token != "":
		opts = append(opts, rest.WithOAuthToken(cfg.Token))
	}
	// Tables' file IO is built from the catalog's properties merged with
	// the server's: the S3 settings reach it this way.
	if props := ioProps(cfg); len(props) > 0 {
		opts = append(opts, rest.WithAdditionalProps(props))
	}
	cat, err := rest.NewCatalog(ctx, cfg.Name, cfg.URI, opts...)
	if err != nil {
		return nil, restOpenError(safeURI(cfg.URI), err)
	}
	return cat, nil
}

// restOpenError classifies a failure to open a REST catalog.
func restOpenError(where string, err error) error {
	switch {
	case errors.Is(err, rest.ErrUnauthorized), errors.Is(err, rest.ErrForbidden),
		errors.Is(err, rest.ErrOAuthError), errors.Is(err, rest.ErrAuthorizationExpired):
		return openErr(ErrCatalogAuth, err, "the REST catalog at %s refused the credentials (%v): check sink.iceberg.catalog.credential (client_id:client_secret) or sink.iceberg.catalog.token", where, err)
	case errors.Is(err, rest.ErrRESTError):
		return openErr(ErrCatalog, err, "the REST catalog at %s answered with an error (%v): check that sink.iceberg.catalog.uri is the catalog's base URL (without /v1) and the warehouse is one it knows", where, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
		return openErr(ErrCatalogUnreachable, err, "cannot reach the REST catalog at %s: %v; check sink.iceberg.catalog.uri and that the catalog server is running", where, err)
	}
	return openErr(ErrCatalog, err, "open the REST catalog at %s: %v", where, err)
}
