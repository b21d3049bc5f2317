// Package fptest gives tests that re-execute their own test binary as a
// child (to reach unexported hooks) a binary in which failpoints work.
package fptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
)

// TestBinary returns the test binary to run as a child that arms
// failpoints: this one when it was built with failpoint.BuildTag (make
// test does), else the current package's tests compiled again with the tag
// into t.TempDir() (go test runs a test in its package's directory), once
// per t.
func TestBinary(t testing.TB) string {
	t.Helper()
	if failpoint.Enabled {
		return os.Args[0]
	}
	mu.Lock()
	defer mu.Unlock()
	if bin, ok := built[t]; ok {
		return bin
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(os.Args[0]))
	cmd := exec.Command("go", "test", "-c", "-tags", failpoint.BuildTag, "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fptest: go test -c -tags %s: %v\n%s", failpoint.BuildTag, err, out)
	}
	built[t] = bin
	t.Cleanup(func() {
		mu.Lock()
		delete(built, t)
		mu.Unlock()
	})
	return bin
}

var (
	mu    sync.Mutex
	built = map[testing.TB]string{} // the binary TestBinary built for a test
)

// Arms reports whether env (KEY=VALUE entries) arms a failpoint.
func Arms(env []string) bool {
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, failpoint.Env+"="); ok && v != "" {
			return true
		}
	}
	return false
}
