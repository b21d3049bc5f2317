package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/cdcd-dev/cdcd/config"
)

// How a cdcd command reaches the daemon's admin API (status, compact,
// maintenance status, schema, table, snapshot): the address from --admin, else
// admin.listen of -c FILE, else 127.0.0.1:8089; https when the config sets
// admin.tls; the token from CDCD_ADMIN_TOKEN, else admin.auth of -c FILE
// (token or token_file); a client certificate from CDCD_ADMIN_CLIENT_CERT
// and CDCD_ADMIN_CLIENT_KEY (PEM files) for a daemon that requires one.

// Environment variables the admin client reads.
const (
	envAdminToken      = "CDCD_ADMIN_TOKEN"
	envAdminClientCert = "CDCD_ADMIN_CLIENT_CERT"
	envAdminClientKey  = "CDCD_ADMIN_CLIENT_KEY"
)

// adminClient calls one daemon's admin API.
type adminClient struct {
	base  string // http(s)://host:port, no trailing slash
	token string // "" sends no credentials
	http  *http.Client
}

// unsetEnv stands for environment variables the config references but
// the command's environment lacks: finding the admin listener must not
// need the source's password. Long enough to pass as a token, so that
// validation does not fail on it; a token holding it is no token.
const unsetEnv = "cdcd-cli-unset-environment-variable"

// adminURL resolves the daemon's admin API from --admin, -c or the
// default, with the token and TLS settings to reach it.
func adminURL(admin, cfgPath string) (*adminClient, error) {
	var cfg *config.Config
	if cfgPath != "" {
		var err error
		cfg, err = config.Load(cfgPath, config.WithLookupEnv(func(name string) (string, bool) {
			if v, ok := os.LookupEnv(name); ok {
				return v, true
			}
			return unsetEnv, true
		}))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if admin == "" && !cfg.Admin.Enabled() {
			return nil, fmt.Errorf("%w: %s turns the admin listener off (admin.listen: off), so the daemon serves no admin API; enable it or pass --admin", errUsage, cfgPath)
		}
	}
	c := &adminClient{}
	base, err := adminBase(admin, cfg)
	if err != nil {
		return nil, err
	}
	c.base = base
	if c.token, err = adminToken(cfg); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	tlsCfg, err := adminClientTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	c.http = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg, Proxy: http.ProxyFromEnvironment}}
	return c, nil
}

// adminBase is the API's base URL.
func adminBase(admin string, cfg *config.Config) (string, error) {
	scheme := "http"
	if cfg != nil && cfg.Admin.TLS != nil {
		scheme = "https"
	}
	switch {
	case admin != "":
	case cfg != nil:
		admin = cfg.Admin.Listen
	default:
		admin = "127.0.0.1:8089"
	}
	if strings.Contains(admin, "://") {
		if _, err := url.Parse(admin); err != nil {
			return "", fmt.Errorf("%w: --admin %q: %v", errUsage, admin, err)
		}
		return strings.TrimRight(admin, "/"), nil
	}
	host, port, err := net.SplitHostPort(admin)
	if err != nil {
		return "", fmt.Errorf("%w: --admin %q is not HOST:PORT or a URL", errUsage, admin)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1" // a wildcard listener is reached on loopback
	}
	return scheme + "://" + net.JoinHostPort(host, port), nil
}

// adminToken is CDCD_ADMIN_TOKEN, else the config's admin token.
func adminToken(cfg *config.Config) (string, error) {
	if tok := os.Getenv(envAdminToken); tok != "" {
		return tok, nil
	}
	if cfg == nil {
		return "", nil
	}
	tok, err := cfg.Admin.AdminToken()
	if err != nil || strings.Contains(tok, unsetEnv) {
		return "", err
	}
	return tok, nil
}

// adminClientTLS trusts the system's roots and, for a daemon with
// admin.tls, its certificate (often self-signed); it presents the client
// certificate of CDCD_ADMIN_CLIENT_CERT/KEY. nil: the defaults.
func adminClientTLS(cfg *config.Config) (*tls.Config, error) {
	certFile, keyFile := os.Getenv(envAdminClientCert), os.Getenv(envAdminClientKey)
	withServerCert := cfg != nil && cfg.Admin.TLS != nil && cfg.Admin.TLS.Cert != ""
	if !withServerCert && certFile == "" {
		return nil, nil
	}
	out := &tls.Config{MinVersion: tls.VersionTLS12}
	if withServerCert {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		pem, err := os.ReadFile(cfg.Admin.TLS.Cert)
		if err != nil {
			return nil, fmt.Errorf("admin.tls.cert: %w", err)
		}
		roots.AppendCertsFromPEM(pem)
		out.RootCAs = roots
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w", envAdminClientCert, envAdminClientKey, err)
		}
		out.Certificates = []tls.Certificate{pair}
	}
	return out, nil
}

// newRequest is a request to path of the API, with the token.
func (c *adminClient) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// do sends a request built by newRequest.
func (c *adminClient) do(req *http.Request) (*http.Response, error) { return c.http.Do(req) }

// registryOpts are the options of a schema registry client for the API.
func (c *adminClient) registryOpts() []sr.ClientOpt {
	opts := []sr.ClientOpt{sr.URLs(c.base), sr.HTTPClient(c.http)}
	if c.token != "" {
		opts = append(opts, sr.BearerToken(c.token))
	}
	return opts
}
