package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// subcommands is every cdcd command line up to its flags.
var subcommands = [][]string{
	{"run"}, {"validate"}, {"demo"}, {"bench"}, {"version"}, {"status"}, {"compact"}, {"reconcile"},
	{"log"}, {"log", "topics"}, {"log", "describe"}, {"log", "produce"}, {"log", "consume"}, {"log", "groups"},
	{"log", "reset-offsets"}, {"log", "migrate"},
	{"schema"}, {"schema", "list"}, {"schema", "show"}, {"schema", "set-compat"}, {"schema", "test"},
	{"schema", "rejected"}, {"schema", "accept"},
	{"snapshot"}, {"snapshot", "status"}, {"snapshot", "stop"}, {"snapshot", "pause"}, {"snapshot", "resume"},
	{"maintenance"}, {"maintenance", "status"}, {"maintenance", "verify"},
	{"table"}, {"table", "skip"},
}

// TestHelpEverywhere: -h, -help and --help on every subcommand print its
// usage on stdout, nothing on stderr, and exit 0 (half of them printed on
// stderr and exited 2).
func TestHelpEverywhere(t *testing.T) {
	for _, cmd := range subcommands {
		for _, h := range []string{"-h", "--help", "-help"} {
			var stdout, stderr bytes.Buffer
			args := append(append([]string(nil), cmd...), h)
			code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			name := strings.Join(args, " ")
			if code != exitOK || stderr.Len() > 0 || !strings.Contains(strings.ToLower(stdout.String()), "usage") {
				t.Errorf("cdcd %s: exit %d, stdout %q, stderr %q; want the usage on stdout and exit 0", name, code, head(stdout.String()), head(stderr.String()))
			}
		}
	}
}

// TestFlagsAfterArguments: every command reads flags after its positional
// arguments (-c FILE after TABLE reaches the config loader), and a command
// that takes none refuses one by name, with exit 2.
func TestFlagsAfterArguments(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	takesArgs := map[string]bool{"compact": true, "reconcile": true, "snapshot": true, "snapshot stop": true,
		"maintenance verify": true, "table skip": true, "schema show": true, "schema set-compat": true,
		"schema test": true, "schema accept": true, "schema list": true, "schema rejected": true}
	for _, cmd := range subcommands {
		name := strings.Join(cmd, " ")
		switch name {
		case "log", "schema", "maintenance", "table", "version":
			continue // a group's first word is its subcommand
		}
		var stdout, stderr bytes.Buffer
		args := append(append([]string(nil), cmd...), "ARG")
		if takesArgs[name] {
			args = append(args, "-c", missing)
		}
		code := run(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
		out := stderr.String()
		if takesArgs[name] {
			if !strings.Contains(out, "missing.yaml") || strings.Contains(out, "not defined") {
				t.Errorf("cdcd %s TABLE -c FILE: exit %d, stderr %q; want -c read after the argument (the missing file named)", name, code, head(out))
			}
			continue
		}
		if code != exitUsage || !strings.Contains(out, `unexpected argument "ARG"`) {
			t.Errorf("cdcd %s ARG: exit %d, stderr %q; want exit 2 naming the unexpected argument", name, code, head(out))
		}
	}
}

func head(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
