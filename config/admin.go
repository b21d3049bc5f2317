package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Admin configures the admin HTTP listener: /metrics, /healthz, /readyz,
// /status, the operator's POST endpoints and the schema registry API.
//
// Every request is checked before it is served: its Host header must name
// this listener (an IP address, localhost, the listen host, or one of
// Hosts), a browser's request must come from the listener's own origin,
// and a request that changes state (POST, PUT, DELETE) must not carry a
// content type an HTML form can send. With Auth, state-changing requests
// (and reads, with protect_reads) need the token or a client certificate.
type Admin struct {
	// Listen is host:port; default 127.0.0.1:8089; "off" (quoted in YAML)
	// disables it, and so does an explicit "", which loads as "off". A
	// listener other machines can reach (":8089", "0.0.0.0:8089", a
	// non-loopback address) without Auth is warned about by validate and
	// at start.
	Listen string `yaml:"listen"`
	// Hosts are the names, besides IP addresses, localhost and the listen
	// host, that clients reach cdcd by (e.g. cdcd.internal). A request
	// whose Host header names anything else is refused: a web page can
	// point a name it controls at cdcd's address (DNS rebinding).
	Hosts []string `yaml:"hosts,omitempty"`
	// Auth, when set, requires a token or a client certificate.
	Auth *AdminAuth `yaml:"auth"`
	// TLS, when set, serves HTTPS.
	TLS *AdminTLS `yaml:"tls"`
}

// AdminAuth requires credentials for requests that change state (POST,
// PUT, DELETE, including the schema registry's writes), and for reads with
// ProtectReads. A request authenticates with the token, as
// "Authorization: Bearer TOKEN" or as the password of HTTP basic auth (any
// user name; what schema registry clients send), or with a client
// certificate that TLS.ClientCA signed. /healthz and /readyz stay open.
type AdminAuth struct {
	// Token is the shared secret; write it as ${ENV}. At least 16 bytes
	// (e.g. openssl rand -hex 32). Redacted by Config.String. Set Token or
	// TokenFile.
	Token string `yaml:"token,omitempty" secret:"all"`
	// TokenFile is a file holding the token (surrounding white space is
	// ignored), e.g. a mounted secret.
	TokenFile string `yaml:"token_file,omitempty"`
	// ProtectReads requires credentials for reads too (/metrics, /status,
	// the registry's reads). Default false when Listen is a loopback
	// address, true otherwise.
	ProtectReads bool `yaml:"protect_reads"`
}

// AdminTLS serves the admin listener over HTTPS.
type AdminTLS struct {
	// Cert and Key are PEM files: the server's certificate (chain) and key.
	// Required.
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	// ClientCA is a PEM file of the CA certificates that sign client
	// certificates. When set, every client must present one (mutual TLS),
	// and a verified certificate authenticates its requests as the token
	// does.
	ClientCA string `yaml:"client_ca,omitempty"`
}

// ListenOff is the Admin.Listen value that disables the admin listener.
const ListenOff = "off"

// minTokenLen is the shortest admin token accepted.
const minTokenLen = 16

// Enabled reports whether the admin listener should run: not for "off",
// nor for "" (a Config built in Go before ApplyDefaults).
func (a Admin) Enabled() bool { return a.Listen != "" && a.Listen != ListenOff }

// Loopback reports whether Listen only accepts connections from this
// machine (localhost, 127.0.0.0/8, ::1).
func (a Admin) Loopback() bool {
	host, _, err := net.SplitHostPort(a.Listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// AdminToken returns the admin token: Auth.Token, or the contents of
// Auth.TokenFile; "" without Auth or when neither is set.
func (a Admin) AdminToken() (string, error) {
	switch {
	case a.Auth == nil:
		return "", nil
	case a.Auth.TokenFile != "":
		b, err := os.ReadFile(a.Auth.TokenFile)
		if err != nil {
			return "", fmt.Errorf("config: admin.auth.token_file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return a.Auth.Token, nil
}

// ServerTLS returns the admin listener's TLS configuration; nil without
// TLS. With ClientCA it requires and verifies client certificates.
func (a Admin) ServerTLS() (*tls.Config, error) {
	t := a.TLS
	if t == nil {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("config: admin.tls: cert %s and key %s: %w", t.Cert, t.Key, err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if t.ClientCA != "" {
		pool, err := certPool(t.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("config: admin.tls.client_ca: %w", err)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certPool reads the PEM certificates of a file.
func certPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errors.New(path + " holds no PEM certificate")
	}
	return pool, nil
}

func (v *validator) admin() {
	a := v.c.Admin
	if !a.Enabled() {
		return
	}
	_, port, err := net.SplitHostPort(a.Listen)
	if err != nil {
		v.fail("admin.listen", ErrInvalid, "%s is not host:port (e.g. 127.0.0.1:8089); write \"off\" to disable the admin listener", shortQuote(a.Listen))
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		v.fail("admin.listen", ErrInvalid, "port %s is not a number from 0 to 65535", shortQuote(port))
	}
	for i, h := range a.Hosts {
		if h == "" || strings.ContainsAny(h, ":/@ \t") {
			v.fail(fmt.Sprintf("admin.hosts[%d]", i), ErrInvalid, "%s is not a host name: write the name alone (cdcd.internal), without scheme or port", shortQuote(h))
		}
	}
	v.adminAuth(a)
	v.adminTLS(a.TLS)
}

func (v *validator) adminAuth(a Admin) {
	const p = "admin.auth"
	auth := a.Auth
	if auth == nil {
		return
	}
	switch {
	case auth.Token != "" && auth.TokenFile != "":
		v.fail(p+".token_file", ErrInvalid, "set token or token_file, not both (token is set%s)", v.where(p+".token"))
	case auth.Token == "" && auth.TokenFile == "" && (a.TLS == nil || a.TLS.ClientCA == ""):
		v.fail(p, ErrInvalid, "needs token (e.g. token: ${CDCD_ADMIN_TOKEN}) or token_file, or admin.tls.client_ca for client certificates")
	case auth.Token != "" && len(auth.Token) < minTokenLen:
		v.fail(p+".token", ErrInvalid, "is %d bytes; use at least %d (e.g. openssl rand -hex 32)", len(auth.Token), minTokenLen)
	case auth.TokenFile != "":
		tok, err := a.AdminToken()
		switch {
		case err != nil:
			v.fail(p+".token_file", ErrInvalid, "cannot be read: %v", errors.Unwrap(err))
		case len(tok) < minTokenLen:
			v.fail(p+".token_file", ErrInvalid, "%s holds %d bytes; the token needs at least %d (e.g. openssl rand -hex 32 > %s)", auth.TokenFile, len(tok), minTokenLen, auth.TokenFile)
		}
	}
}

func (v *validator) adminTLS(t *AdminTLS) {
	const p = "admin.tls"
	if t == nil {
		return
	}
	if t.Cert == "" || t.Key == "" {
		v.fail(p, ErrInvalid, "needs cert and key (PEM files)")
		return
	}
	if _, err := tls.LoadX509KeyPair(t.Cert, t.Key); err != nil {
		v.fail(p+".cert", ErrInvalid, "cannot load the certificate and key: %v", err)
	}
	if t.ClientCA != "" {
		if _, err := certPool(t.ClientCA); err != nil {
			v.fail(p+".client_ca", ErrInvalid, "cannot load the client CA: %v", err)
		}
	}
}

// ErrInsecure classes the warnings of Warnings: settings that run but
// leave something open.
var ErrInsecure = errors.New("config: insecure setting")

// Warnings lists settings that are valid but unsafe, each with its key
// path and position, in the form of Errors: an admin listener other
// machines can reach without authentication.
func (c *Config) Warnings() Errors {
	v := &validator{c: c}
	if a := c.Admin; a.Enabled() && !a.Loopback() && a.Auth == nil {
		v.fail("admin.listen", ErrInsecure, "%s accepts connections from other machines, and without admin.auth anyone who reaches it can delete schemas, change compatibility and trigger compactions: set admin.auth (token: ${CDCD_ADMIN_TOKEN}) or listen on 127.0.0.1", shortQuote(a.Listen))
	}
	return v.errs
}
