// Package dbtest holds the test-side rules internal/pgtest and
// internal/mariadbtest share: what to do when a server's binaries are
// missing, and how to make names unique per test.
package dbtest

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// CI reports whether the CI environment variable says this is a CI run
// (CI=true, or any other value strconv.ParseBool reads as true).
func CI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// MissingBinaries ends a test that needs a database server whose binaries
// are not installed: under CI it fails (CI never skips silently), elsewhere
// it skips. err's message names the package to install.
func MissingBinaries(t testing.TB, err error) {
	t.Helper()
	if CI() {
		t.Fatalf("%v\n(CI is set: tests that need this server fail instead of skipping)", err)
	} else {
		t.Skip(err)
	}
}

// maxName is the longest name PostgreSQL (NAMEDATALEN-1) and MariaDB (64)
// both accept.
const maxName = 63

// UniqueName returns "<kind>_<test>_<n>" with test lower-cased, every run of
// characters other than [a-z0-9] turned into one '_', and shortened so the
// whole fits in 63 bytes. Valid unquoted as a PostgreSQL identifier, a
// replication slot name and a MariaDB identifier. n makes it unique; callers
// pass a counter.
func UniqueName(test, kind string, n uint64) string {
	var b strings.Builder
	under := false
	for _, r := range strings.ToLower(test) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			under = false
		} else if !under {
			b.WriteByte('_')
			under = true
		}
	}
	suffix := "_" + strconv.FormatUint(n, 10)
	mid := strings.Trim(b.String(), "_")
	if room := maxName - len(kind) - 1 - len(suffix); len(mid) > room {
		mid = strings.TrimRight(mid[:max(room, 0)], "_")
	}
	if mid == "" {
		return kind + suffix
	}
	return kind + "_" + mid + suffix
}
