package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/schema"
)

const cliToken = "cli-test-token-0123456789"

// guardedAdmin serves a registry and stand-ins for the daemon's own
// endpoints behind the daemon's admin guard with admin.auth set, and
// writes a config naming it, whose token is ${CDCD_TEST_ADMIN_TOKEN}.
func guardedAdmin(t *testing.T) (cfgPath string, posts *[]string) {
	t.Helper()
	reg, srv, _ := registryServer(t)
	srv.Close()
	var got []string
	mux := http.NewServeMux()
	mux.Handle("/", schema.NewHandler(reg))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(sampleStatus(time.Now()))
	})
	mux.HandleFunc("GET /cdcd/maintenance", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "[]") })
	mux.HandleFunc("POST /cdcd/compact/{table}", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "compaction requested\n")
	})
	mux.HandleFunc("POST /cdcd/snapshot", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "snapshot requested\n")
	})
	mux.HandleFunc("POST /cdcd/tables/{table}/skip", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.URL.Path)
		_ = json.NewEncoder(w).Encode(daemon.SkipResult{Table: r.PathValue("table"), Skipped: "a change", Resumed: true})
	})
	admin := config.Admin{Listen: "127.0.0.1:0", Auth: &config.AdminAuth{Token: cliToken}}
	h, err := daemon.GuardAdmin(admin, mux, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	guarded := httptest.NewServer(h)
	t.Cleanup(guarded.Close)
	addr := strings.TrimPrefix(guarded.URL, "http://")
	cfgPath = filepath.Join(t.TempDir(), "cdcd.yaml")
	cfg := "pipeline: shop\nsource: {postgres: {dsn: \"postgres://u:${PGPASSWORD}@h/db\", tables: [t]}}\nsink: {iceberg: {}}\n" +
		"admin: {listen: \"" + addr + "\", auth: {token: \"${CDCD_TEST_ADMIN_TOKEN}\"}}\n"
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath, &got
}

// TestCommandsSendTheToken: every command that changes state through the
// admin API authenticates with the config's token (or CDCD_ADMIN_TOKEN);
// without it the daemon's answer says how to authenticate; reads work
// without one.
func TestCommandsSendTheToken(t *testing.T) {
	cfgPath, posts := guardedAdmin(t)
	writes := [][]string{
		{"compact", "-c", cfgPath, "cdc.orders"},
		{"table", "skip", "-c", cfgPath, "public.orders"},
		{"snapshot", "-c", cfgPath, "--replace", "public.orders"},
		{"schema", "set-compat", "-c", cfgPath, "--subject", "shop.public.orders-value", "FULL"},
	}
	accept := []string{"schema", "accept", "-c", cfgPath, "shop.public.orders-value"}
	reads := [][]string{
		{"status", "-c", cfgPath},
		{"maintenance", "status", "-c", cfgPath},
		{"schema", "list", "-c", cfgPath},
	}

	// The token's variable unset: writes are refused, reads are served.
	for _, args := range append(writes, accept) {
		code, _, stderr := runCLI(t, args...)
		if code == exitOK || !strings.Contains(stderr, "authentication required") && !strings.Contains(stderr, "401") {
			t.Errorf("%v without a token: exit %d, %s", args, code, stderr)
		}
	}
	if len(*posts) != 0 {
		t.Errorf("requests without a token reached the handlers: %v", *posts)
	}
	for _, args := range reads {
		if code, _, stderr := runCLI(t, args...); code != exitOK {
			t.Errorf("%v without a token: exit %d, %s", args, code, stderr)
		}
	}

	// A wrong CDCD_ADMIN_TOKEN: refused.
	t.Setenv(envAdminToken, "wrong-token-0123456789")
	if code, _, stderr := runCLI(t, writes[0]...); code == exitOK || !strings.Contains(stderr, "token is wrong") {
		t.Errorf("a wrong token: exit %d, %s", code, stderr)
	}

	// The token from the config; then from CDCD_ADMIN_TOKEN alone.
	for _, env := range [][2]string{{"CDCD_TEST_ADMIN_TOKEN", cliToken}, {envAdminToken, cliToken}} {
		os.Unsetenv("CDCD_TEST_ADMIN_TOKEN")
		t.Setenv(envAdminToken, "")
		t.Setenv(env[0], env[1])
		*posts = nil
		for _, args := range writes {
			if code, _, stderr := runCLI(t, args...); code != exitOK {
				t.Errorf("%v with %s: exit %d, %s", args, env[0], code, stderr)
			}
		}
		if len(*posts) != 3 {
			t.Errorf("with %s the daemon saw %v, want the compact, the skip and the snapshot", env[0], *posts)
		}
		// Nothing to accept: the registry's own answer, past the guard.
		if code, _, stderr := runCLI(t, accept...); code == exitOK || strings.Contains(stderr, "authentication") || strings.Contains(stderr, "token") {
			t.Errorf("accept with %s: exit %d, %s", env[0], code, stderr)
		}
	}
}
