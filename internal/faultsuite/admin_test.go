package faultsuite

// The admin developer's faults (issue 24): what a config file may hold
// (item 9: a byte order mark, a huge unknown key, bytes that are not
// UTF-8) and who may use the admin API (item 11). Item 8, a password that
// splits its DSN, needs a server that checks passwords:
// daemon/secrets_e2e_test.go.

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const adminToken = "faultsuite-admin-token-0123456789"

// withAdmin adds lines (indented by two spaces) under the config's admin
// section and rewrites the file; prefix goes before the whole file.
func (p *pipeline) withAdmin(lines, prefix string) {
	p.t.Helper()
	listen := "admin:\n  listen: \"" + p.Admin + "\"\n"
	cfg := p.config()
	if !strings.Contains(cfg, listen) {
		p.t.Fatalf("faultsuite: no admin section in the config:\n%s", cfg)
	}
	cfg = prefix + strings.Replace(cfg, listen, listen+lines, 1)
	if err := os.WriteFile(p.CfgPath, []byte(cfg), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// cdcdEnv is cdcd with env as the whole of its environment besides PATH
// and HOME.
func (p *pipeline) cdcdEnv(env []string, args ...string) (stdout, stderr string, code int) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(p.t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		p.t.Fatalf("cdcd %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errb.String(), code
}

// adminRequest sends one request to the daemon's admin listener.
func (p *pipeline) adminRequest(method, path string, header map[string]string, body string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequestWithContext(p.ctx, method, "http://"+p.Admin+path, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminAuthentication: with admin.auth, no request that changes state
// is served without the token (compaction, subject deletion, compatibility
// NONE), a browser's cross-origin or rebinding request is refused even
// with it, reads stay open, and the cdcd commands authenticate with the
// token of the config. The mirror is untouched by what was refused.
func TestAdminAuthentication(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT g, 'x' || g FROM generate_series(1, 20) g`,
		Tables: []string{"public.a"},
	})
	tokenFile := filepath.Join(p.Dir, "admin-token")
	if err := os.WriteFile(tokenFile, []byte(adminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.withAdmin("  auth: {token_file: \""+tokenFile+"\"}\n", "")
	p.start()
	p.waitCaughtUp()

	bearer := "Bearer " + adminToken
	json := "application/vnd.schemaregistry.v1+json"
	subject := "fault.public.a-value"
	for _, tc := range []struct {
		name, method, path string
		header             map[string]string
		body               string
		code               int
		words              string
	}{
		{"compact without a token", "POST", "/cdcd/compact/cdc.a", nil, "", 401, "CDCD_ADMIN_TOKEN"},
		{"delete a subject without a token", "DELETE", "/subjects/" + subject, nil, "", 401, "Authorization: Bearer"},
		{"compatibility NONE without a token", "PUT", "/config", map[string]string{"Content-Type": json}, `{"compatibility":"NONE"}`, 401, "authentication required"},
		{"register without a token", "POST", "/subjects/x-value/versions", map[string]string{"Content-Type": json}, `{"schema":"\"string\""}`, 401, "authentication required"},
		{"accept without a token", "POST", "/cdcd/subjects/" + subject + "/accept", nil, "", 401, "authentication required"},
		{"a wrong token", "PUT", "/config", map[string]string{"Authorization": "Bearer nope-nope-nope-nope", "Content-Type": json}, `{"compatibility":"NONE"}`, 403, "token is wrong"},
		{"a form from a web page", "POST", "/cdcd/compact/cdc.a", map[string]string{"Authorization": bearer, "Content-Type": "text/plain"}, "x", 415, "form"},
		{"a foreign origin", "POST", "/cdcd/subjects/" + subject + "/accept", map[string]string{"Authorization": bearer, "Origin": "http://evil.example"}, "", 403, "cross-origin"},
		{"a rebinding host", "POST", "/cdcd/compact/cdc.a", map[string]string{"Authorization": bearer, "Host": "evil.example:8089"}, "", 403, "admin.hosts"},
		{"status stays open", "GET", "/status", nil, "", 200, `"pipeline": "fault"`},
		{"metrics stay open", "GET", "/metrics", nil, "", 200, "cdcd_build_info"},
		{"registry reads stay open", "GET", "/config", nil, "", 200, "BACKWARD"},
		{"compact with the token", "POST", "/cdcd/compact/cdc.a", map[string]string{"Authorization": bearer}, "", 202, "compaction requested"},
		{"basic auth, as registry clients send", "PUT", "/config/" + subject, map[string]string{"Authorization": "Basic " + basic("any", adminToken), "Content-Type": json}, `{"compatibility":"BACKWARD"}`, 200, "BACKWARD"},
	} {
		code, body := p.adminRequest(tc.method, tc.path, tc.header, tc.body)
		if code != tc.code || !strings.Contains(body, tc.words) {
			t.Errorf("%s: %s %s: %d %.300q, want %d with %q", tc.name, tc.method, tc.path, code, body, tc.code, tc.words)
		}
	}
	if _, body := p.adminRequest("GET", "/config", nil, ""); !strings.Contains(body, "BACKWARD") {
		t.Errorf("the refused requests changed the compatibility: %s", body)
	}

	// The commands: the token comes from the config (-c) or from
	// CDCD_ADMIN_TOKEN, which wins; without either, the daemon says how.
	if _, stderr, code := p.cdcdEnv(nil, "compact", "--admin", p.Admin, "cdc.a"); code == 0 || !strings.Contains(stderr, "authentication required") {
		t.Errorf("cdcd compact without the token: exit %d, %s", code, stderr)
	}
	if _, stderr, code := p.cdcdEnv([]string{"CDCD_ADMIN_TOKEN=wrong-wrong-wrong-wrong"}, "compact", "-c", p.CfgPath, "cdc.a"); code == 0 || !strings.Contains(stderr, "token is wrong") {
		t.Errorf("cdcd compact with a wrong CDCD_ADMIN_TOKEN: exit %d, %s", code, stderr)
	}
	for _, tc := range []struct {
		env  []string
		args []string
	}{
		{nil, []string{"compact", "-c", p.CfgPath, "cdc.a"}},
		{[]string{"CDCD_ADMIN_TOKEN=" + adminToken}, []string{"compact", "--admin", p.Admin, "cdc.a"}},
		{nil, []string{"schema", "set-compat", "-c", p.CfgPath, "--subject", subject, "FULL"}},
		{nil, []string{"status", "--admin", p.Admin}},
		{nil, []string{"schema", "list", "--admin", p.Admin}},
		{nil, []string{"validate", "-c", p.CfgPath}},
	} {
		stdout, stderr, code := p.cdcdEnv(tc.env, tc.args...)
		if code != 0 || strings.Contains(stderr, "warning") {
			t.Errorf("cdcd %s: exit %d\n%s%s", strings.Join(tc.args, " "), code, stdout, stderr)
		}
	}

	p.exec(`UPDATE a SET v = 'y' WHERE id <= 5`)
	p.waitCaughtUp()
	p.requireMirror("public.a")
	if p.logContains(adminToken) {
		t.Error("the daemon's log holds the admin token")
	}
}

// TestAdminOpenListenerWarns: a listener on every interface without
// admin.auth runs, and says loudly, at start and in validate, that anyone
// who reaches it may change state.
func TestAdminOpenListenerWarns(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: `CREATE TABLE a (id int PRIMARY KEY); INSERT INTO a VALUES (1)`, Tables: []string{"public.a"}})
	_, port, _ := strings.Cut(p.Admin, ":")
	cfg := strings.Replace(p.config(), "  listen: \""+p.Admin+"\"", "  listen: \"0.0.0.0:"+port+"\"", 1)
	if err := os.WriteFile(p.CfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := p.cdcd("validate", "-c", p.CfgPath); code != 0 || !strings.Contains(stderr, "warning:") || !strings.Contains(stderr, "admin.listen") || !strings.Contains(stderr, "admin.auth") {
		t.Errorf("validate: exit %d, %s", code, stderr)
	}
	p.start()
	p.waitCaughtUp()
	if !p.logContains("INSECURE") {
		t.Error("the daemon did not warn about its open admin listener")
	}
	p.stop()
}

// TestConfigFileBytes (issue 24 item 9): a config saved with a byte order
// mark runs; a 5 MB unknown key is refused at once and shown cut; bytes
// that are not UTF-8 are refused with their line and column.
func TestConfigFileBytes(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT g, 'x' FROM generate_series(1, 10) g`,
		Tables: []string{"public.a"},
	})
	good := p.config()
	write := func(s string) {
		if err := os.WriteFile(p.CfgPath, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	write(good + strings.Repeat("k", 5<<20) + ": 1\n")
	began := time.Now()
	_, stderr, code := p.cdcd("validate", "-c", p.CfgPath)
	t.Logf("validate of a 5 MB unknown key took %s", time.Since(began).Round(time.Millisecond))
	if code != 2 || len(stderr) > 1000 || !strings.Contains(stderr, "unknown key") || !strings.Contains(stderr, "(5242880 bytes)") {
		t.Errorf("a 5 MB key: exit %d, %d bytes: %.500s", code, len(stderr), stderr)
	}

	write(strings.Replace(good, "namespace: cdc", "namespace: c\xffdc", 1))
	if _, stderr, code := p.cdcd("validate", "-c", p.CfgPath); code != 2 || !strings.Contains(stderr, "invalid UTF-8 (byte 0xFF)") || !strings.Contains(stderr, "cdcd.yaml:") {
		t.Errorf("invalid UTF-8: exit %d, %s", code, stderr)
	}

	write("\uFEFF" + good)
	if _, stderr, code := p.cdcd("validate", "-c", p.CfgPath); code != 0 {
		t.Errorf("a byte order mark: exit %d, %s", code, stderr)
	}
	p.start()
	p.waitCaughtUp()
	p.requireMirror("public.a")
	p.stop()
}

// basic is the value of a basic Authorization header.
func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}
