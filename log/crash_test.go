package log

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if d.Name() == lockFileName {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestWriteFailureIsSticky: once a write or sync fails, the partition
// refuses appends (the page cache is in an unknown state) until reopened,
// and nothing unsynced becomes visible.
func TestWriteFailureIsSticky(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l, err := Open(dir, Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.CreateTopic(ctx, "t", TopicConfig{Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := l.Produce(ctx, "t", []Record{{Value: []byte("ok"), Partition: 0}}); err != nil {
		t.Fatal(err)
	}
	p := l.topics["t"].parts[0]
	p.mu.Lock()
	_ = p.segs[len(p.segs)-1].f.Close() // every later write and sync fails
	p.mu.Unlock()
	err = l.Produce(ctx, "t", []Record{{Value: []byte("lost"), Partition: 0}})
	var we *WriteError
	if !errors.As(err, &we) || we.Topic != "t" {
		t.Fatalf("Produce after the file broke: %v", err)
	}
	if err := l.Produce(ctx, "t", []Record{{Value: []byte("again"), Partition: 0}}); !errors.As(err, &we) {
		t.Fatalf("second Produce: %v, want the sticky WriteError", err)
	}
	info, _ := l.DescribeTopic(ctx, "t")
	if info.Partitions[0].End != 1 {
		t.Fatalf("End = %d after failed appends, want 1", info.Partitions[0].End)
	}
	_ = l.Close()
	l, err = Open(dir, Options{CleanupInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := []Record{{Value: []byte("after reopen"), Partition: 0}}
	if err := l.Produce(ctx, "t", recs); err != nil || recs[0].Offset != 1 {
		t.Fatalf("Produce after reopen: offset %d, %v", recs[0].Offset, err)
	}
}
