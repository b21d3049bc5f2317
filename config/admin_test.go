package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// adminSrc is full with its admin section (lines 22 onwards) replaced.
func adminSrc(t *testing.T, admin string) string {
	t.Helper()
	return edit(t, "admin:\n  listen: 127.0.0.1:8089", strings.TrimRight(admin, "\n"))
}

func adminEnv(name string) (string, bool) {
	v, ok := map[string]string{"PGPASSWORD": "pw", "CDCD_ADMIN_TOKEN": "0123456789abcdef0123"}[name]
	return v, ok
}

func TestAdminAuth(t *testing.T) {
	src := adminSrc(t, "admin:\n  listen: 127.0.0.1:8089\n  auth: {token: \"${CDCD_ADMIN_TOKEN}\"}\n  hosts: [cdcd.internal]")
	c, err := Parse([]byte(src), "cdcd.yaml", WithLookupEnv(adminEnv))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Admin.AdminToken()
	if err != nil || tok != "0123456789abcdef0123" {
		t.Errorf("AdminToken = %q, %v", tok, err)
	}
	if c.Admin.Auth.ProtectReads {
		t.Error("reads are protected by default on a loopback listener")
	}
	if s := c.String(); strings.Contains(s, tok) || !strings.Contains(s, "token: '***'") && !strings.Contains(s, `token: "***"`) {
		t.Errorf("String shows the token or no ***:\n%s", s)
	}
	if !contains(c.Secrets(), tok) {
		t.Errorf("Secrets() lacks the admin token")
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings on a loopback listener with auth: %v", w)
	}

	// Every interface: reads protected by default, unless said otherwise.
	src = adminSrc(t, "admin:\n  listen: \":8089\"\n  auth: {token: \"${CDCD_ADMIN_TOKEN}\"}")
	if c, err = Parse([]byte(src), "cdcd.yaml", WithLookupEnv(adminEnv)); err != nil || !c.Admin.Auth.ProtectReads {
		t.Errorf("on :8089 reads are not protected by default (%v)", err)
	}
	src = adminSrc(t, "admin:\n  listen: \":8089\"\n  auth: {token: \"${CDCD_ADMIN_TOKEN}\", protect_reads: false}")
	if c, err = Parse([]byte(src), "cdcd.yaml", WithLookupEnv(adminEnv)); err != nil || c.Admin.Auth.ProtectReads {
		t.Errorf("an explicit protect_reads: false is not kept (%v)", err)
	}

	// A token file.
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("  file-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src = adminSrc(t, "admin:\n  listen: 127.0.0.1:8089\n  auth: {token_file: "+path+"}")
	if c, err = Parse([]byte(src), "cdcd.yaml", WithLookupEnv(adminEnv)); err != nil {
		t.Fatal(err)
	}
	if tok, err := c.Admin.AdminToken(); err != nil || tok != "file-token-0123456789" || !contains(c.Secrets(), tok) {
		t.Errorf("token_file: %q %v", tok, err)
	}
}

func TestAdminAuthInvalid(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		admin string
		want  want
	}{
		{"admin:\n  listen: 127.0.0.1:8089\n  auth: {}",
			want{"admin.auth", 24, 3, ErrInvalid, "needs token (e.g. token: ${CDCD_ADMIN_TOKEN}) or token_file"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  auth: {token: short}",
			want{"admin.auth.token", 24, 10, ErrInvalid, "is 5 bytes; use at least 16 (e.g. openssl rand -hex 32)"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  auth: {token: 0123456789abcdef0, token_file: /x}",
			want{"admin.auth.token_file", 24, 36, ErrInvalid, "set token or token_file, not both"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  auth: {token_file: /nonexistent/token}",
			want{"admin.auth.token_file", 24, 10, ErrInvalid, "cannot be read"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  auth: {token_file: " + short + "}",
			want{"admin.auth.token_file", 24, 10, ErrInvalid, "holds 3 bytes; the token needs at least 16"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  hosts: [\"cdcd.internal:8089\"]",
			want{"admin.hosts[0]", 24, 11, ErrInvalid, "without scheme or port"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  tls: {cert: /nonexistent.pem}",
			want{"admin.tls", 24, 3, ErrInvalid, "needs cert and key"}},
		{"admin:\n  listen: 127.0.0.1:8089\n  tls: {cert: /nonexistent.pem, key: /nonexistent.key}",
			want{"admin.tls.cert", 24, 9, ErrInvalid, "cannot load the certificate and key"}},
	}
	for _, tc := range cases {
		expect(t, adminSrc(t, tc.admin), tc.want)
	}
}

// TestAdminWarnings: a listener other machines reach without auth is
// valid, and warned about with its key path and line.
func TestAdminWarnings(t *testing.T) {
	for _, listen := range []string{`":8089"`, "0.0.0.0:8089", "10.0.0.5:8089", `"[::]:8089"`} {
		c, err := Parse([]byte(adminSrc(t, "admin:\n  listen: "+listen)), "cdcd.yaml", testEnv)
		if err != nil {
			t.Fatal(err)
		}
		w := c.Warnings()
		if len(w) != 1 || w[0].Path != "admin.listen" || w[0].Line != 23 || !errors.Is(w[0], ErrInsecure) ||
			!strings.Contains(w[0].Msg, "without admin.auth anyone who reaches it can delete schemas") {
			t.Errorf("listen %s: warnings %v", listen, w)
		}
	}
	for _, listen := range []string{"127.0.0.1:8089", "localhost:8089", `"[::1]:8089"`, `"off"`} {
		c, err := Parse([]byte(adminSrc(t, "admin:\n  listen: "+listen)), "cdcd.yaml", testEnv)
		if err != nil {
			t.Fatal(err)
		}
		if w := c.Warnings(); len(w) != 0 {
			t.Errorf("listen %s: warnings %v", listen, w)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
