// Package examples holds runnable configs; this test keeps them valid.
package examples

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
)

func TestExamplesValidate(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	env := func(name string) (string, bool) { return "secret-" + name, true }
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(b), "# Shows: ") {
			t.Errorf("%s: the first line must say what it shows (# Shows: ...)", f)
		}
		if _, err := config.Parse(b, f, config.WithLookupEnv(env)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
