package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/config"
)

const testToken = "0123456789abcdef-admin-token"

// guardCase is one request to a guard and what must come of it.
type guardCase struct {
	name, method, path string
	header             map[string]string
	host               string // default 127.0.0.1:8089
	user, password     string // basic auth when password != ""
	code               int
	body               string // a piece of the answer
}

func runGuard(t *testing.T, admin config.Admin, cases []guardCase) {
	t.Helper()
	g, err := newGuard(admin, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "served")
	}), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, "http://127.0.0.1:8089"+tc.path, nil)
		if tc.host != "" {
			r.Host = tc.host
		}
		for k, v := range tc.header {
			r.Header.Set(k, v)
		}
		if tc.password != "" {
			r.SetBasicAuth(tc.user, tc.password)
		}
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		body := w.Body.String()
		if w.Code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %s %s: %d %q, want %d with %q", tc.name, tc.method, tc.path, w.Code, body, tc.code, tc.body)
		}
		if strings.Contains(body, testToken) {
			t.Errorf("%s: the answer holds the token", tc.name)
		}
		if w.Code == http.StatusUnauthorized && !strings.Contains(w.Header().Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: a 401 without WWW-Authenticate: Bearer", tc.name)
		}
	}
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

func TestGuardToken(t *testing.T) {
	admin := config.Admin{Listen: "127.0.0.1:8089", Hosts: []string{"cdcd.internal"}, Auth: &config.AdminAuth{Token: testToken}}
	json := map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/json"}
	runGuard(t, admin, []guardCase{
		{name: "no token", method: "POST", path: "/cdcd/compact/cdc.orders", code: 401, body: "Authorization: Bearer TOKEN"},
		{name: "no token says how", method: "POST", path: "/cdcd/subjects/s/accept", code: 401, body: "CDCD_ADMIN_TOKEN"},
		{name: "delete subject", method: "DELETE", path: "/subjects/s", code: 401, body: "authentication required"},
		{name: "compatibility NONE", method: "PUT", path: "/config", code: 401, body: "authentication required"},
		{name: "register", method: "POST", path: "/subjects/s/versions", code: 401, body: "authentication required"},
		{name: "wrong token", method: "POST", path: "/cdcd/compact/cdc.orders", header: bearer(testToken + "x"), code: 403, body: "token is wrong"},
		{name: "token", method: "POST", path: "/cdcd/compact/cdc.orders", header: bearer(testToken), code: 200, body: "served"},
		{name: "basic auth password", method: "DELETE", path: "/subjects/s", user: "registry-client", password: testToken, code: 200, body: "served"},
		{name: "wrong basic auth", method: "DELETE", path: "/subjects/s", user: "u", password: "nope", code: 403, body: "token is wrong"},
		{name: "registry content type", method: "POST", path: "/subjects/s/versions", header: map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "application/vnd.schemaregistry.v1+json"}, code: 200, body: "served"},
		{name: "json", method: "PUT", path: "/config", header: json, code: 200, body: "served"},
		{name: "GET stays open", method: "GET", path: "/status", code: 200, body: "served"},
		{name: "metrics open", method: "GET", path: "/metrics", code: 200, body: "served"},
		{name: "registry read open", method: "GET", path: "/subjects", code: 200, body: "served"},
		{name: "text/plain form", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "text/plain"}, code: 415, body: "send JSON"},
		{name: "urlencoded form", method: "POST", path: "/cdcd/subjects/s/accept", header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, code: 415, body: "form"},
		{name: "foreign origin", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Authorization": "Bearer " + testToken, "Origin": "http://evil.example"}, code: 403, body: "cross-origin"},
		{name: "foreign origin GET", method: "GET", path: "/status", header: map[string]string{"Origin": "https://evil.example"}, code: 403, body: "cross-origin"},
		{name: "null origin", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Origin": "null"}, code: 403, body: "cross-origin"},
		{name: "cross-site fetch", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Sec-Fetch-Site": "cross-site"}, code: 403, body: "cross-origin"},
		{name: "own origin", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Authorization": "Bearer " + testToken, "Origin": "http://127.0.0.1:8089"}, code: 200, body: "served"},
		{name: "rebinding host", method: "GET", path: "/status", host: "evil.example:8089", code: 403, body: "admin.hosts"},
		{name: "rebinding host POST", method: "POST", path: "/cdcd/compact/x", host: "evil.example", header: bearer(testToken), code: 403, body: "admin.hosts"},
		{name: "localhost", method: "GET", path: "/status", host: "localhost:8089", code: 200, body: "served"},
		{name: "an address", method: "GET", path: "/metrics", host: "10.1.2.3:8089", code: 200, body: "served"},
		{name: "ipv6 address", method: "GET", path: "/metrics", host: "[::1]:8089", code: 200, body: "served"},
		{name: "configured name", method: "GET", path: "/metrics", host: "CDCD.internal:8089", code: 200, body: "served"},
	})
}

func TestGuardProtectReads(t *testing.T) {
	admin := config.Admin{Listen: ":8089", Auth: &config.AdminAuth{Token: testToken, ProtectReads: true}}
	runGuard(t, admin, []guardCase{
		{name: "status", method: "GET", path: "/status", code: 401, body: "authentication required"},
		{name: "metrics", method: "GET", path: "/metrics", code: 401, body: "authentication required"},
		{name: "registry read", method: "GET", path: "/subjects", code: 401, body: "authentication required"},
		{name: "metrics with token", method: "GET", path: "/metrics", header: bearer(testToken), code: 200, body: "served"},
		{name: "healthz", method: "GET", path: "/healthz", code: 200, body: "served"},
		{name: "readyz", method: "GET", path: "/readyz", code: 200, body: "served"},
	})
}

// TestGuardWithoutAuth: no admin.auth leaves requests unauthenticated, but
// a browser still cannot send them.
func TestGuardWithoutAuth(t *testing.T) {
	runGuard(t, config.Admin{Listen: "127.0.0.1:8089"}, []guardCase{
		{name: "cli", method: "POST", path: "/cdcd/compact/x", code: 200, body: "served"},
		{name: "form", method: "POST", path: "/cdcd/compact/x", header: map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, code: 415, body: "form"},
		{name: "foreign origin", method: "POST", path: "/cdcd/subjects/s/accept", header: map[string]string{"Origin": "http://evil.example"}, code: 403, body: "cross-origin"},
		{name: "rebinding", method: "POST", path: "/cdcd/compact/x", host: "evil.example:8089", code: 403, body: "admin.hosts"},
	})
}

func TestGuardTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runGuard(t, config.Admin{Listen: "127.0.0.1:8089", Auth: &config.AdminAuth{TokenFile: path}}, []guardCase{
		{name: "token from file", method: "POST", path: "/cdcd/compact/x", header: bearer(testToken), code: 200, body: "served"},
		{name: "none", method: "POST", path: "/cdcd/compact/x", code: 401, body: "authentication required"},
	})
}

// TestGuardClientCertificate: with admin.tls.client_ca, a verified client
// certificate authenticates a write without a token; a client without one
// cannot connect.
func TestGuardClientCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, "cdcd test CA", dir, "ca")
	newCert(t, ca, caKey, "127.0.0.1", dir, "server")
	newCert(t, ca, caKey, "operator", dir, "client")
	admin := config.Admin{Listen: "127.0.0.1:8089", Auth: &config.AdminAuth{},
		TLS: &config.AdminTLS{Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server.key"), ClientCA: filepath.Join(dir, "ca.pem")}}
	serverTLS, err := admin.ServerTLS()
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGuard(admin, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "served") }), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(g)
	srv.TLS = serverTLS
	srv.StartTLS()
	defer srv.Close()

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	client := func(withCert bool) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if withCert {
			pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
	}
	resp, err := client(true).Post(srv.URL+"/cdcd/compact/x", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "served" {
		t.Errorf("with a client certificate: %d %q", resp.StatusCode, b)
	}
	if resp, err := client(false).Get(srv.URL + "/status"); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate was answered %d", resp.StatusCode)
	}
}

// newCert writes dir/name.pem and dir/name.key: a CA when parent is nil,
// else a certificate for cn (an IP address or a client name) signed by it.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn, dir, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, kind string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+".key", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
