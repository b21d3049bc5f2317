package demo

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
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
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "demo")
	if err := Run(t.Context(), Options{DataDir: dir, Out: &out}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	re := regexp.MustCompile(`(?s)(shop\.\w+)  <-  PostgreSQL \S+ \((\d+) rows there now\).*?changelog:  (\d+) rows  \(([^)]*)\)`)
	ms := re.FindAllStringSubmatch(text, -1)
	if len(ms) != 2 {
		t.Fatalf("want 2 tables in the summary, got %d:\n%s", len(ms), text)
	}
	for _, m := range ms {
		live, _ := strconv.Atoi(m[2])
		counts := map[string]int{}
		for _, kv := range regexp.MustCompile(`(\w): (\d+)`).FindAllStringSubmatch(m[4], -1) {
			counts[kv[1]], _ = strconv.Atoi(kv[2])
		}
		if counts["r"] != 4 {
			t.Errorf("%s: %d snapshot rows, want the 4 seeded ones", m[1], counts["r"])
		}
		if got := counts["r"] + counts["c"] - counts["d"]; got != live {
			t.Errorf("%s: r+c-d = %d but PostgreSQL has %d rows\n%s", m[1], got, live, text)
		}
		if counts["u"] == 0 || counts["c"] == 0 {
			t.Errorf("%s: no inserts or updates captured: %v", m[1], counts)
		}
	}
	for _, want := range []string{"Point cdcd at your own database", "latest 6 changes"} {
		if !bytes.Contains(out.Bytes(), []byte(want)) {
			t.Errorf("summary lacks %q", want)
		}
	}
	// A second run reuses its own directory; a foreign one is refused.
	if err := Run(t.Context(), Options{DataDir: t.TempDir() + "/..", Out: &out}, slog.New(slog.DiscardHandler)); err == nil {
		t.Error("demo emptied a directory it did not make")
	}
}
