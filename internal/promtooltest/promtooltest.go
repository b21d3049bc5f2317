// Package promtooltest runs Prometheus's promtool from tests: `promtool
// check metrics` on a scrape and `promtool check rules` on a rules file.
// When promtool is missing, the test is skipped with the Debian package to
// install (prometheus), except under CI=true, where it fails.
package promtooltest

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/dbtest"
)

// Package is the Debian package that provides promtool.
const Package = "prometheus"

// Path returns promtool's path, or ends the test (see the package doc).
func Path(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		dbtest.MissingBinaries(t, fmt.Errorf("promtool is not installed: apt-get install %s (%v)", Package, err))
	}
	return p
}

// CheckMetrics runs `promtool check metrics` on a scrape in the text
// format; it fails the test with promtool's findings.
func CheckMetrics(t testing.TB, scrape []byte) {
	t.Helper()
	cmd := exec.Command(Path(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}

// CheckRules runs `promtool check rules` on files.
func CheckRules(t testing.TB, files ...string) {
	t.Helper()
	out, err := exec.Command(Path(t), append([]string{"check", "rules"}, files...)...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil || errors.As(err, &ee) {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("promtool check rules: %s", bytes.TrimSpace(out))
}
