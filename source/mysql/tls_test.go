package mysql

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source"
)

// TestDSNParams: the URL form's TLS parameters, and every other parameter
// refused by name, never with the password in the error.
func TestDSNParams(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	writeCA(t, ca)
	for _, c := range []struct {
		dsn      string
		mode     sslMode
		insecure bool   // the config skips Go's own verification
		err      string // substring of the error; "" for none
	}{
		{dsn: "mysql://u:secret@h:3306/db", mode: sslDisabled},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=REQUIRED", mode: sslRequired, insecure: true},
		{dsn: "mysql://u:secret@h:3306/db?ssl_mode=verify_identity&ssl_ca=" + ca, mode: sslVerifyIdentity},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=verify-ca&ssl-ca=" + ca, mode: sslVerifyCA, insecure: true},
		{dsn: "mysql://u:secret@h:3306/db?ssl-ca=" + ca, mode: sslVerifyCA, insecure: true},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=required&ssl-ca=" + ca, mode: sslRequired, insecure: true},
		{dsn: "u:secret@tcp(h:3306)/db?tls=true", mode: sslVerifyIdentity},
		{dsn: "u:secret@tcp(h:3306)/db?tls=skip-verify", mode: sslRequired, insecure: true},
		{dsn: "mysql://u:secret@h:3306/db?sslmod=required", err: `unknown parameter "sslmod"`},
		{dsn: "mysql://u:secret@h:3306/db?tls=true", err: `unknown parameter "tls"`},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=preferred", err: "ssl-mode=preferred is not supported"},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=sometimes", err: "want disabled, required, verify-ca or verify-identity"},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=required&ssl-ca=/nonexistent/ca.pem", err: "/nonexistent/ca.pem"},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=required&ssl-cert=" + ca, err: "ssl-cert and ssl-key go together"},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=disabled&ssl-ca=" + ca, err: "with ssl-mode=disabled"},
		{dsn: "mysql://u:secret@h:3306/db?ssl-mode=verify-ca&ssl-ca=" + filepath.Join(dir, "."), err: "ssl-ca"},
	} {
		ci, err := parseDSN(c.dsn)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error %v, want one with %q and without the password", c.dsn, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.dsn, err)
			continue
		}
		if ci.sslMode != c.mode || (ci.tls == nil) != (c.mode == sslDisabled) {
			t.Errorf("%s: mode %s (config %v), want %s", c.dsn, ci.sslMode, ci.tls != nil, c.mode)
			continue
		}
		if ci.tls != nil && (ci.tls.InsecureSkipVerify != c.insecure || ci.tls.ServerName != "h") {
			t.Errorf("%s: InsecureSkipVerify %v, ServerName %q; want %v, h", c.dsn, ci.tls.InsecureSkipVerify, ci.tls.ServerName, c.insecure)
		}
	}
}

// TestTLSServer: against a MariaDB whose replication user must use TLS
// (REQUIRE SSL), a reader with ssl-mode=verify-identity loads and streams
// a table (its query pool, binlog dump and chunk readers all encrypted,
// or the server refuses them); without ssl-mode the server refuses it; a
// certificate from another CA, or one that does not name the host, is
// refused by the modes that check it and accepted by those that do not.
func TestTLSServer(t *testing.T) {
	t.Parallel()
	// mariadbd runs as another user: the files must be readable to it.
	dir, err := os.MkdirTemp("", "cdcd-tls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caCert, caKey := newCA(t, "cdcd test CA")
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", caCert.Raw)
	otherCA, _ := newCA(t, "another CA")
	writePEM(t, filepath.Join(dir, "other-ca.pem"), "CERTIFICATE", otherCA.Raw)
	// The server's certificate names 127.0.0.1 only, not localhost.
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mariadb test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(mariadbserver.Host)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "server.pem"), "CERTIFICATE", der)
	kb, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "server-key.pem"), "EC PRIVATE KEY", kb)

	srv := mariadbtest.NewServer(t, mariadbserver.Options{ServerID: 1, Args: []string{
		"--ssl-ca=" + filepath.Join(dir, "ca.pem"), "--ssl-cert=" + filepath.Join(dir, "server.pem"),
		"--ssl-key=" + filepath.Join(dir, "server-key.pem")}})
	root, err := srv.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	name := mariadbtest.UniqueName(t, "db")
	for _, q := range []string{
		"ALTER USER '" + mariadbserver.ReplUser + "'@'%' REQUIRE SSL",
		"CREATE DATABASE " + name,
		"CREATE TABLE " + name + ".t (id INT PRIMARY KEY, v VARCHAR(20))",
		"INSERT INTO " + name + ".t VALUES (1, 'loaded'), (2, 'loaded')",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn := func(host, params string) string {
		u := url.URL{Scheme: "mysql", User: url.UserPassword(mariadbserver.ReplUser, mariadbserver.ReplPassword),
			Host: net.JoinHostPort(host, fmt.Sprint(srv.Port())), Path: "/" + name, RawQuery: params}
		return u.String()
	}
	ca, other := "ssl-ca="+filepath.Join(dir, "ca.pem"), "ssl-ca="+filepath.Join(dir, "other-ca.pem")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ping := func(d string) error {
		ci, err := parseDSN(d)
		if err != nil {
			return err
		}
		db, err := ci.open()
		if err != nil {
			return err
		}
		defer db.Close()
		return db.PingContext(ctx)
	}
	for _, c := range []struct {
		host, params string
		err          string // substring; "" for a connection
	}{
		{mariadbserver.Host, "", "Access denied"},
		{mariadbserver.Host, "ssl-mode=required", ""},
		{mariadbserver.Host, "ssl-mode=verify-identity&" + ca, ""},
		{mariadbserver.Host, "ssl-mode=verify-ca&" + other, "certificate"},
		{mariadbserver.Host, "ssl-mode=verify-identity&" + other, "certificate"},
		{"localhost", "ssl-mode=verify-ca&" + ca, ""},
		{"localhost", "ssl-mode=verify-identity&" + ca, "localhost"},
		{"localhost", "ssl-mode=required", ""},
	} {
		err := ping(dsn(c.host, c.params))
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s ?%s: %v; want %q", c.host, c.params, err, c.err)
		}
	}

	e := &env{dsn: srv.DSN(name), db: root, srv: srv, name: name}
	d := newDedupe(4)
	wt := e.grantWatermarks(t)
	e.reader(t, newMemState(), d, "t", func(c *Config) {
		c.DSN, c.WatermarkTable, c.Load = dsn(mariadbserver.Host, "ssl-mode=verify-identity&"+ca), wt, true
	})
	rows := func(cs []source.Change) (m map[string]string) {
		m = map[string]string{}
		for _, c := range cs {
			if (c.Op == source.OpRead || c.Op == source.OpCreate) && c.Table != nil && c.Table.QualifiedName() == name+".t" {
				m[fmt.Sprint(c.Op, c.After)] = ""
			}
		}
		return m
	}
	// The load first (its one chunk read), so the insert is streamed only.
	d.waitFor(t, "2 loaded rows", func(cs []source.Change) bool { return len(rows(cs)) >= 2 })
	e.exec(t, "INSERT INTO "+name+".t VALUES (3, 'streamed')")
	got := d.waitFor(t, "2 loaded rows and 1 streamed", func(cs []source.Change) bool { return len(rows(cs)) >= 3 })
	want := map[string]string{"r [1 loaded]": "", "r [2 loaded]": "", "c [3 streamed]": ""}
	if m := rows(got); fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("over TLS: %v, want %v", m, want)
	}
}

func newCA(t *testing.T, cn string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writeCA(t *testing.T, path string) {
	t.Helper()
	c, _ := newCA(t, "cdcd test CA")
	writePEM(t, path, "CERTIFICATE", c.Raw)
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}
