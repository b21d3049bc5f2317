package demo

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
)

// TestDemoMySQL runs `cdcd demo --mysql` end to end and checks that what
// it reports adds up: every table's mirror, compared row by row with
// MariaDB through iceberg-go's scan, is identical, and the loads were read
// (rows of the shop made before the pipeline started are there).
func TestDemoMySQL(t *testing.T) {
	if err := mariadbserver.CheckInstalled(mariadbserver.Options{}); err != nil {
		dbtest.MissingBinaries(t, err)
	}
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "demo")
	if err := Run(t.Context(), Options{DataDir: dir, MySQL: true, Out: &out}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	re := regexp.MustCompile(`(shop\.\w+)  <-  MariaDB \S+\n    rows:       (\d+) in Iceberg, (\d+) in MariaDB — (.*) \((-?\d+) matched\)`)
	ms := re.FindAllStringSubmatch(text, -1)
	if len(ms) != 2 {
		t.Fatalf("want 2 tables in the summary, got %d:\n%s", len(ms), text)
	}
	for _, m := range ms {
		ice, _ := strconv.Atoi(m[2])
		src, _ := strconv.Atoi(m[3])
		matched, _ := strconv.Atoi(m[5])
		if m[4] != "identical: every row compared" || ice != src || matched != src || src < 10 {
			t.Errorf("%s: %s\n%s", m[1], m[0], text)
		}
	}
	for _, want := range []string{"shop.shop_customers", "shop.shop_orders", "Ada Lovelace", "deletion vectors", "Point cdcd at your own MySQL"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q:\n%s", want, text)
		}
	}
}
