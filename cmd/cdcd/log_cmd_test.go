package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

// runLog runs `cdcd log args...` with stdin and returns exit code, stdout
// and stderr.
func runLog(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := logCommand(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func mustRun(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	code, out, errOut := runLog(t, stdin, args...)
	if code != 0 {
		t.Fatalf("cdcd log %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func TestLogCLI(t *testing.T) {
	dataDir := t.TempDir()
	dd := "--data-dir=" + dataDir
	mustRun(t, "", "topics", "--create", "--topic", "orders", "--partitions", "3", dd)
	mustRun(t, "", "topics", "--create", "--topic", "state", "--cleanup", "compact", dd)
	if _, err := os.Stat(filepath.Join(dataDir, "log", "topics", "orders")); err != nil {
		t.Fatalf("--data-dir should put the log in DIR/log: %v", err)
	}

	out := mustRun(t, "", "topics", dd)
	if out != "orders\nstate\n" {
		t.Fatalf("topics = %q", out)
	}
	if out := mustRun(t, "", "topics", "--internal", dd); !strings.Contains(out, log.OffsetsTopic) {
		t.Fatalf("topics --internal = %q", out)
	}

	var in strings.Builder
	for i := 0; i < 30; i++ {
		fmt.Fprintf(&in, "customer-%d:order %d: with a colon\n", i%5, i)
	}
	mustRun(t, in.String(), "produce", "--topic", "orders", dd)
	mustRun(t, "a|1\nb|2\na|DELETE\n", "produce", "--topic", "state", "--separator", "|", "--null", "DELETE", dd)

	out = mustRun(t, "", "consume", "--raw", "--topic", "orders", "--from-beginning", dd)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 30 {
		t.Fatalf("consumed %d lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 5 || !strings.HasPrefix(f[3], "customer-") || !strings.HasPrefix(f[4], "order ") {
			t.Fatalf("line %q: want partition, offset, timestamp, key, value", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, f[2]); err != nil {
			t.Fatalf("line %q: timestamp: %v", l, err)
		}
		key := f[3]
		if want := fmt.Sprint(log.PartitionFor([]byte(key), 3)); f[0] != want {
			t.Fatalf("key %s in partition %s, want %s", key, f[0], want)
		}
	}
	out = mustRun(t, "", "consume", "--raw", "--topic", "state", "--from-beginning", dd)
	if !strings.HasSuffix(out, "\ta\tnull\n") {
		t.Fatalf("tombstone not printed as null:\n%s", out)
	}
	out = mustRun(t, "", "consume", "--raw", "--topic", "orders", "--partition", "0", "--offset", "1", "--max", "2", dd)
	if n := strings.Count(out, "\n"); n != 2 || !strings.HasPrefix(out, "0\t1\t") {
		t.Fatalf("--offset 1 --max 2 =\n%s", out)
	}
	if out := mustRun(t, "", "consume", "--topic", "orders", dd); out != "" {
		t.Fatalf("default (latest) consume printed:\n%s", out)
	}
	out = mustRun(t, "", "consume", "--topic", "orders", "--timestamp", time.Now().Add(-time.Hour).Format(time.RFC3339), "--max", "5", dd)
	if strings.Count(out, "\n") != 5 {
		t.Fatalf("--timestamp an hour ago --max 5 =\n%s", out)
	}
	out = mustRun(t, "", "consume", "--topic", "orders", "--timestamp", time.Now().Add(time.Hour).Format(time.RFC3339), dd)
	if out != "" {
		t.Fatalf("--timestamp in the future printed:\n%s", out)
	}

	out = mustRun(t, "", "describe", "--topic", "orders", dd)
	if !strings.Contains(out, "Topic: orders\tPartitions: 3\tCleanup: delete") || strings.Count(out, "\n") != 5 {
		t.Fatalf("describe =\n%s", out)
	}

	// reset-offsets: dry run by default, then --execute; groups shows lag.
	code, out, errOut := runLog(t, "", "reset-offsets", "--group", "sink", "--topic", "orders", "--to-earliest", dd)
	if code != 0 || !strings.Contains(errOut, "Dry run") || !strings.Contains(out, "sink") {
		t.Fatalf("dry run: %d %q %q", code, out, errOut)
	}
	if out := mustRun(t, "", "groups", dd); strings.Contains(out, "sink") {
		t.Fatalf("dry run changed offsets:\n%s", out)
	}
	mustRun(t, "", "reset-offsets", "--group", "sink", "--topic", "orders", "--to-earliest", "--execute", dd)
	out = mustRun(t, "", "groups", "--group", "sink", dd)
	var lag int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		var g, tp string
		var p, committed, end, records int
		var secs float64
		if _, err := fmt.Sscan(l, &g, &tp, &p, &committed, &end, &records, &secs); err != nil {
			t.Fatalf("groups line %q: %v", l, err)
		}
		lag += records
		if records > 0 && secs <= 0 {
			t.Fatalf("lag in seconds is 0 with %d records behind: %q", records, l)
		}
	}
	if lag != 30 {
		t.Fatalf("total lag %d, want 30:\n%s", lag, out)
	}
	mustRun(t, "", "reset-offsets", "--group", "sink", "--topic", "orders", "--to-latest", "--execute", dd)
	out = mustRun(t, "", "groups", "--group", "sink", dd)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		if f := strings.Fields(l); f[5] != "0" || f[6] != "0.000" {
			t.Fatalf("after --to-latest: %q", l)
		}
	}
	mustRun(t, "", "topics", "--delete", "--topic", "state", dd)
	if out := mustRun(t, "", "topics", dd); out != "orders\n" {
		t.Fatalf("after delete: %q", out)
	}
}

// TestLogCLIWhileDaemonRuns: reading commands work beside a running
// writer; writing commands fail with the holder's PID.
func TestLogCLIWhileDaemonRuns(t *testing.T) {
	dir := t.TempDir()
	l, err := log.Open(dir, log.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Produce(ctx, "t", []log.Record{{Key: []byte("k"), Value: []byte("v"), Partition: -1}}); err != nil {
		t.Fatal(err)
	}
	ld := "--log-dir=" + dir
	if out := mustRun(t, "", "consume", "--raw", "--topic", "t", "--from-beginning", ld); !strings.HasSuffix(out, "\tk\tv\n") {
		t.Fatalf("consume beside the daemon = %q", out)
	}
	code, _, errOut := runLog(t, "k:v\n", "produce", "--topic", "t", ld)
	if code != 1 || !strings.Contains(errOut, fmt.Sprintf("process %d", os.Getpid())) || !strings.Contains(errOut, "stop the daemon") {
		t.Fatalf("produce beside the daemon: exit %d, %q", code, errOut)
	}
}

func TestLogCLIUsage(t *testing.T) {
	dd := "--data-dir=" + t.TempDir()
	cases := [][]string{
		{},
		{"nope"},
		{"consume", dd},
		{"consume", "--topic", "t", "--offset", "3", dd},
		{"consume", "--topic", "t", "--from-beginning", "--offset", "3", "--partition", "0", dd},
		{"reset-offsets", "--group", "g", "--topic", "t", dd},
		{"topics", "--create", dd},
		{"topics", "extra", dd},
	}
	for _, args := range cases {
		if code, _, errOut := runLog(t, "", args...); code != 2 || errOut == "" {
			t.Errorf("cdcd log %v: exit %d, stderr %q; want usage error 2", args, code, errOut)
		}
	}
	code, _, errOut := runLog(t, "no separator here\n", append([]string{"produce", "--topic", "x"}, dd)...)
	if code == 0 || !strings.Contains(errOut, "line 1") {
		t.Errorf("produce of a bad line: exit %d, %q", code, errOut)
	}
}
