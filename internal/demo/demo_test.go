package demo

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
)

// TestDemo runs README's first command end to end and checks that what it
// reports adds up: for every table, snapshot reads plus inserts minus
// deletes equal the rows PostgreSQL holds.
func TestDemo(t *testing.T) {
	if err := pgserver.CheckInstalled(""); err != nil {
		dbtest.MissingBinaries(t, err)
	}
	out := &syncBuffer{}
	dir := filepath.Join(t.TempDir(), "demo")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, Options{DataDir: dir, Out: out, Keep: true}, slog.New(slog.DiscardHandler)) }()
	waitOutput(t, out, "Still capturing", ran)
	checkAdmin(t, out.String(), "demo.public.orders-value", "shop.orders")
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	re := regexp.MustCompile(`(shop\.\w+)  <-  PostgreSQL \S+\n    rows:       (\d+) in Iceberg, (\d+) in PostgreSQL — (.*) \((\d+) matched\)`)
	ms := re.FindAllStringSubmatch(text, -1)
	if len(ms) != 2 {
		t.Fatalf("want 2 tables in the summary, got %d:\n%s", len(ms), text)
	}
	for _, m := range ms {
		ice, _ := strconv.Atoi(m[2])
		pg, _ := strconv.Atoi(m[3])
		matched, _ := strconv.Atoi(m[5])
		if m[4] != "identical: every row compared" || ice != pg || matched != pg || pg < 10 {
			t.Errorf("%s: %s\n%s", m[1], m[0], text)
		}
	}
	if !strings.Contains(text, "deletion vectors") {
		t.Errorf("summary lacks the deletion vectors:\n%s", text)
	}
	for _, want := range []string{"Point cdcd at your own database", "a few rows"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	// A second run reuses its own directory; a foreign one is refused.
	if err := Run(t.Context(), Options{DataDir: t.TempDir() + "/..", Out: out}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("demo emptied a directory it did not make")
	}
}
