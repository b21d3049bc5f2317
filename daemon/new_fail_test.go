package daemon_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
)

// TestNewLogUnopenable: a log that cannot be opened (its directory is a
// file here; a full disk did it in cdcd bench) makes New return the error.
// It panicked: the failed open's nil *log.Embedded went into the daemon's
// log interface, and the cleanup closed it.
func TestNewLogUnopenable(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "log"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(writeConfig(t, dir, "postgres://cdcd@127.0.0.1:1/none", "s_new_fail", "off"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		d.Close()
		t.Fatal("New opened a daemon whose log directory is a file")
	}
	t.Logf("New: %v", err)
}
