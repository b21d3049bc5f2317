package iceberg

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestVerifyWhileRunning: verifying an index another process holds (a
// running daemon: here this test binary run again, holding it open) says
// to stop the daemon first, not "resource temporarily unavailable" alone.
func TestVerifyWhileRunning(t *testing.T) {
	if dir := os.Getenv("CDCD_TEST_HOLD_INDEX"); dir != "" {
		x, err := openIndex(dir, indexOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer x.close()
		fmt.Println("held")
		_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
		return
	}
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.buf = []change{{table: kv, env: &schema.Envelope{Op: 'c', After: []any{int64(1), "a", nil}}}}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestVerifyWhileRunning$")
	cmd.Env = append(os.Environ(), "CDCD_TEST_HOLD_INDEX="+filepath.Join(w.s.cfg.IndexDir, identString(w.cfg.Ident)))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("the holder said %q: %v", line, err)
	}
	_, err := VerifyIndex(t.Context(), w.tbl, w.s.cfg.IndexDir)
	if err == nil || !strings.Contains(err.Error(), "stop the daemon first") {
		t.Fatalf("verify while another process holds the index: %v", err)
	}
}
