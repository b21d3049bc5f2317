package log_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

func topicIDOf(t *testing.T, l *log.Embedded, name string) string {
	t.Helper()
	info, err := l.DescribeTopic(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// TestTopicIDLifecycle: a topic's ID is stable across reopening, differs
// between topics, and is new when the topic is deleted and created again
// or when the log directory is removed and created again.
func TestTopicIDLifecycle(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "log")
	l := openEmbedded(t, dir, log.Options{})
	for _, name := range []string{"a", "b"} {
		if err := l.CreateTopic(ctx, name, log.TopicConfig{Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	a, b := topicIDOf(t, l, "a"), topicIDOf(t, l, "b")
	if !regexp.MustCompile(`^[0-9a-f]{16}-[0-9a-f]{16}$`).MatchString(a) || a == b {
		t.Fatalf("IDs a=%q b=%q: want two different <log>-<topic> identities", a, b)
	}
	if !strings.HasPrefix(a, l.ID()+"-") || !strings.HasPrefix(b, l.ID()+"-") {
		t.Fatalf("IDs a=%q b=%q do not carry the log's identity %q", a, b, l.ID())
	}
	_ = l.Close()

	l = openEmbedded(t, dir, log.Options{})
	if got := topicIDOf(t, l, "a"); got != a {
		t.Fatalf("ID after reopen = %q, want %q", got, a)
	}
	if err := l.DeleteTopic(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "a", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if got := topicIDOf(t, l, "a"); got == a || got == "" {
		t.Fatalf("ID of the re-created topic = %q, want a new one (old %q)", got, a)
	}
	_ = l.Close()

	// A removed and recreated directory is a new log: the same topic name
	// gets a different identity.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	l = openEmbedded(t, dir, log.Options{})
	defer l.Close()
	if err := l.CreateTopic(ctx, "b", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if got := topicIDOf(t, l, "b"); got == b || got == "" {
		t.Fatalf("ID in a recreated directory = %q, want a new one (old %q)", got, b)
	}
}

// TestTopicIDGivenToOldLog: a log written before identities existed (no
// log.id, no id in topic.json) opens read-only with empty IDs and without
// writing anything, and gets identities at the first writable Open that
// stay the same afterwards.
func TestTopicIDGivenToOldLog(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openEmbedded(t, dir, log.Options{})
	if err := l.CreateTopic(ctx, "old", log.TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	// Make it look like an old log.
	if err := os.Remove(filepath.Join(dir, "log.id")); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, "topics", "old", "topic.json")
	b, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	old := regexp.MustCompile(`(?m),\n\s*"id": "[0-9a-f]+"`).ReplaceAll(b, nil)
	if string(old) == string(b) {
		t.Fatalf("topic.json has no id to strip:\n%s", b)
	}
	if err := os.WriteFile(meta, old, 0o644); err != nil {
		t.Fatal(err)
	}

	ro := openEmbedded(t, dir, log.Options{ReadOnly: true})
	if got := topicIDOf(t, ro, "old"); got != "" || ro.ID() != "" {
		t.Fatalf("read-only ID = %q (log %q), want empty", got, ro.ID())
	}
	_ = ro.Close()
	if _, err := os.Stat(filepath.Join(dir, "log.id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only Open wrote log.id: %v", err)
	}
	if b, _ := os.ReadFile(meta); string(b) != string(old) {
		t.Fatalf("read-only Open rewrote topic.json:\n%s", b)
	}

	l = openEmbedded(t, dir, log.Options{})
	id := topicIDOf(t, l, "old")
	if id == "" {
		t.Fatal("writable Open gave the old topic no ID")
	}
	_ = l.Close()
	for _, opts := range []log.Options{{}, {ReadOnly: true}} {
		l = openEmbedded(t, dir, opts)
		if got := topicIDOf(t, l, "old"); got != id {
			t.Fatalf("ID after reopen (read-only %v) = %q, want %q", opts.ReadOnly, got, id)
		}
		_ = l.Close()
	}
}

// TestBadLogIDRefused: a damaged log.id stops Open with an error naming
// the file, rather than silently giving the log a new identity.
func TestBadLogIDRefused(t *testing.T) {
	dir := t.TempDir()
	l := openEmbedded(t, dir, log.Options{})
	_ = l.Close()
	path := filepath.Join(dir, "log.id")
	if err := os.WriteFile(path, []byte("not-an-id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := log.Open(dir, log.Options{}, nil)
	if !errors.Is(err, log.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Open with a bad log.id: %v; want ErrCorrupt naming %s", err, path)
	}
	// The lock was released: after fixing the file the log opens.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	l = openEmbedded(t, dir, log.Options{})
	_ = l.Close()
}

func TestDataLossError(t *testing.T) {
	var err error = &log.DataLossError{Topic: "shop.public.orders", Partition: 3, From: 100, To: 250, Reason: "bad crc"}
	var dl *log.DataLossError
	if !errors.Is(err, log.ErrDataLost) || !errors.As(err, &dl) || dl.From != 100 {
		t.Fatalf("errors.Is/As on %v", err)
	}
	for _, want := range []string{"shop.public.orders/3", "[100, 250)", "bad crc", "--replace"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q does not say %q", err, want)
		}
	}
}
