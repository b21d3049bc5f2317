package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestValidateReportsEveryProblemWithLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	bad := `pipeline: shop
source:
  postgres:
    dsn: postgres://localhost/shop
    tables: [orders]
log:
  partitions: 010
sink:
  iceberg:
    mode: append
    comit_interval: 10s
`
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "validate", "-c", path)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
	}
	for _, want := range []string{
		path + ":7:3: log.partitions: 010 is ambiguous",
		path + ":11:5: sink.iceberg.comit_interval: unknown key",
		"did you mean commit_interval?",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestValidateAcceptsGoodConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ok.yaml")
	good := `pipeline: shop
source:
  postgres:
    dsn: postgres://cdc:hunter2@localhost/shop
    tables: [orders]
sink:
  iceberg:
    mode: append
`
	if err := os.WriteFile(path, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, "validate", "-c", path); code != exitOK || !strings.Contains(out, "ok") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// -print: the effective config, defaults filled in, the password hidden.
	code, out, stderr := runCLI(t, "validate", "-c", path, "-print")
	if code != exitOK || strings.Contains(out, "hunter2") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	for _, want := range []string{"tables:\n      - public.orders", "slot: cdcd_shop", "heartbeat_interval: 10s", "mode: append", "target_file_size_mb: 128"} {
		if !strings.Contains(out, want) {
			t.Errorf("-print lacks %q:\n%s", want, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"bogus"}, {"validate"}, {"run"}, {"maintenance"}, {"maintenance", "verify"}} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("cdcd %v: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, _ := runCLI(t, "validate", "-c", "/nonexistent/cdcd.yaml"); code != exitUsage {
		t.Errorf("missing file: exit %d", code)
	}
}

func TestLogTakesConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cdcd.yaml")
	cfg := "pipeline: p\ndata_dir: " + dir + "\nsource:\n  postgres:\n    dsn: postgres://x/y\n    tables: [t]\nsink:\n  iceberg:\n    mode: append\n"
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	args, err := withLogDir([]string{"describe", "-c", path, "--topic", "x"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"describe", "--topic", "x", "--log-dir=" + filepath.Join(dir, "log")}
	if strings.Join(args, " ") != strings.Join(want, " ") {
		t.Fatalf("args %q, want %q", args, want)
	}
	if _, err := withLogDir([]string{"topics", "-c"}); err == nil {
		t.Fatal("-c without a file accepted")
	}
}
