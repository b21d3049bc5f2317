package mysql

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// TLS to the server. The dsn's query parameters use the names of MySQL's
// own client (--ssl-mode, --ssl-ca, --ssl-cert, --ssl-key), dashes or
// underscores:
//
//	mysql://cdc:pw@db.example.com:3306/shop?ssl-mode=verify-identity&ssl-ca=/etc/cdcd/mysql-ca.pem
//
// The modes: disabled (the default: go-mysql, which the binlog reader
// uses, cannot fall back to plaintext, so MySQL's PREFERRED is not
// offered), required (encrypted, the server's certificate not checked;
// with ssl-ca it is checked as verify-ca, as MySQL's client does),
// verify-ca (the certificate must chain to ssl-ca, or to the system's
// roots without it) and verify-identity (verify-ca, and the certificate
// must name the dsn's host). Every connection cdcd opens to the server
// uses it: the query pool, the binlog dump, the load's chunk readers.

// sslMode is a dsn's ssl-mode.
type sslMode string

const (
	sslDisabled       sslMode = "disabled"
	sslRequired       sslMode = "required"
	sslVerifyCA       sslMode = "verify-ca"
	sslVerifyIdentity sslMode = "verify-identity"
)

// tlsParams are the dsn's TLS parameters.
type tlsParams struct {
	mode          sslMode
	ca, cert, key string
}

// dsnParams reads the URL form's query parameters: only the TLS ones
// exist; any other is refused by name (a misspelt ssl-mode must not
// leave the connection in plaintext unnoticed).
func dsnParams(q url.Values) (tlsParams, error) {
	var p tlsParams
	for name, vals := range q {
		v := ""
		if len(vals) > 0 {
			v = vals[len(vals)-1]
		}
		switch strings.ReplaceAll(strings.ToLower(name), "_", "-") {
		case "ssl-mode", "sslmode":
			m := sslMode(strings.ReplaceAll(strings.ToLower(v), "_", "-"))
			switch m {
			case sslDisabled, sslRequired, sslVerifyCA, sslVerifyIdentity:
				p.mode = m
			case "preferred":
				return p, fmt.Errorf("mysql: dsn: ssl-mode=preferred is not supported (the binlog reader cannot fall back to plaintext): use required, verify-ca or verify-identity, or disabled")
			default:
				return p, fmt.Errorf("mysql: dsn: ssl-mode=%q: want disabled, required, verify-ca or verify-identity", v)
			}
		case "ssl-ca":
			p.ca = v
		case "ssl-cert":
			p.cert = v
		case "ssl-key":
			p.key = v
		default:
			return p, fmt.Errorf("mysql: dsn: unknown parameter %q (cdcd reads ssl-mode, ssl-ca, ssl-cert and ssl-key; its session settings are its own)", name)
		}
	}
	if p.mode == "" {
		p.mode = sslDisabled
		if p.ca != "" {
			p.mode = sslVerifyCA // MySQL's client: --ssl-ca alone verifies
		}
	}
	return p, nil
}

// config returns the TLS configuration for host, nil when disabled. Files
// are read here, so a missing or bad one stops the start, named.
func (p tlsParams) config(host string) (*tls.Config, error) {
	if p.mode == sslDisabled {
		if p.ca != "" || p.cert != "" || p.key != "" {
			return nil, errors.New("mysql: dsn: ssl-ca, ssl-cert or ssl-key with ssl-mode=disabled: set ssl-mode, or drop them")
		}
		return nil, nil
	}
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if (p.cert == "") != (p.key == "") {
		return nil, errors.New("mysql: dsn: ssl-cert and ssl-key go together (a client certificate and its key)")
	}
	if p.cert != "" {
		pair, err := tls.LoadX509KeyPair(p.cert, p.key)
		if err != nil {
			return nil, fmt.Errorf("mysql: dsn: client certificate ssl-cert=%s, ssl-key=%s: %w", p.cert, p.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	mode := p.mode
	if p.ca != "" {
		pem, err := os.ReadFile(p.ca)
		if err != nil {
			return nil, fmt.Errorf("mysql: dsn: ssl-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mysql: dsn: ssl-ca=%s holds no PEM certificate", p.ca)
		}
		if mode == sslRequired {
			mode = sslVerifyCA
		}
	}
	switch mode {
	case sslRequired:
		cfg.InsecureSkipVerify = true
	case sslVerifyCA:
		// Go verifies the chain and the name together; the chain alone is
		// checked here, after the handshake.
		cfg.InsecureSkipVerify = true
		roots := cfg.RootCAs
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("mysql: the server sent no certificate (ssl-mode=verify-ca)")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return fmt.Errorf("mysql: the server's certificate (ssl-mode=verify-ca): %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

// isLoopback reports whether host is this machine (localhost or a
// loopback address), where plaintext stays on the machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
