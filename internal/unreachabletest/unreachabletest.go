// Package unreachabletest checks what a source reader logs while its
// database cannot be reached (source.LogConnectFailure), the same for
// every reader: warnings for the first attempts, then ERROR lines naming
// the server, the cause and what to check, never the password.
package unreachabletest

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// Password is what a test's DSN holds as its password; the log must never
// show it.
const Password = "s3cret-pw-do-not-log"

// Buffer is a log destination safe for a reader's goroutines.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ClosedAddr returns a loopback host:port that nothing listens on.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// Check fails t unless out, the text log of a reader that retried a server
// at addr that refused connections, has source.UnreachableAfter-1 warnings
// naming the server, then at least 3 ERROR lines each naming it, the
// cause, what to do and every string of wants, and nowhere the password.
func Check(t testing.TB, out, addr string, wants ...string) {
	t.Helper()
	if strings.Contains(out, Password) {
		t.Fatalf("the log shows the password:\n%s", out)
	}
	var errors, warns int
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.Contains(l, "level=ERROR"):
			errors++
			for _, want := range append([]string{`msg="cannot connect to the database; still retrying"`, "server=" + addr,
				"connection refused", "what_to_do="}, wants...) {
				if !strings.Contains(l, want) {
					t.Errorf("ERROR line lacks %q: %s", want, l)
				}
			}
		case strings.Contains(l, "level=WARN"):
			warns++
			if !strings.Contains(l, "server="+addr) {
				t.Errorf("WARN line does not name the server: %s", l)
			}
		}
	}
	if warns != source.UnreachableAfter-1 || errors < 3 {
		t.Errorf("%d WARN and %d ERROR lines; want %d warnings, then errors:\n%s", warns, errors, source.UnreachableAfter-1, out)
	}
}

// Retry runs a reader (run) until it has retried (reconnects) a few times
// past source.UnreachableAfter, then stops it; it fails t if the reader
// stops by itself or retries too slowly. logs is printed on failure.
func Retry(t testing.TB, run func(context.Context) error, reconnects func() int64, logs *Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(time.Minute)
	for reconnects() < source.UnreachableAfter+3 {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the reader stopped: %v\n%s", err, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d attempts in a minute:\n%s", reconnects(), logs)
		}
	}
}
