package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/cdcd-dev/cdcd/daemon"
)

// The progress line of `cdcd run` and `cdcd demo` on a terminal: while an
// initial load or an incremental snapshot runs, the terminal's last line
// says how far each one is (rows, per cent, rate, time left), redrawn
// every second; what else is written (the log, the demo's narrative) goes
// above it. Not on a terminal, nothing changes: logs collected from a
// pipe or a file get no control characters.

// termLine writes through to a terminal, keeping one status line below
// what it writes.
type termLine struct {
	mu    sync.Mutex
	w     io.Writer
	width int // the terminal's columns: a longer line would wrap and not be erased
	line  string
}

// newTermLine returns a termLine on w, or nil when w is not a terminal.
func newTermLine(w io.Writer) *termLine {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return &termLine{w: w, width: termWidth(f)}
}

// termWidth asks the terminal for its width; 80 when it does not say.
func termWidth(f *os.File) int {
	var ws struct{ Row, Col, X, Y uint16 }
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(syscall.TIOCGWINSZ), uintptr(unsafe.Pointer(&ws)))
	if errno != 0 || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}

// Write writes p above the status line.
func (t *termLine) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.line != "" {
		if _, err := io.WriteString(t.w, "\r\x1b[K"); err != nil {
			return 0, err
		}
	}
	n, err := t.w.Write(p)
	if err == nil && t.line != "" {
		_, err = io.WriteString(t.w, t.line)
	}
	return n, err
}

// set replaces the status line with line (cut to the width); "" clears it.
func (t *termLine) set(line string) {
	if r := []rune(line); len(r) > t.width-1 {
		line = string(r[:max(t.width-2, 0)]) + "…"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if line == t.line {
		return
	}
	_, _ = io.WriteString(t.w, "\r\x1b[K"+line)
	t.line = line
}

// follow shows status's progress every interval until the returned func is
// called (which clears the line). On a nil termLine it does nothing.
func (t *termLine) follow(ctx context.Context, status func() daemon.Status, interval time.Duration) (stop func()) {
	if t == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				t.set(progressText(status()))
			}
		}
	}()
	return func() {
		cancel()
		<-done
		t.set("")
	}
}

// progressText is the status line for st: the initial load's progress and
// each unfinished incremental snapshot's as read, then each table's load
// as committed to Iceberg until all of it is; "" when no load runs.
func progressText(st daemon.Status) string {
	var parts []string
	if st.State == daemon.StateLoading {
		p := fmt.Sprintf("initial load: %s rows", thousands(st.Source.SnapshotRows))
		parts = append(parts, p+rateText(st.Source.LoadRowsPerSecond, st.Source.LoadETASeconds))
	}
	for _, s := range st.Snapshots {
		if !s.Finished.IsZero() {
			continue
		}
		p := fmt.Sprintf("snapshot %s %s: %s rows", s.Table, s.State, thousands(s.Rows))
		if s.Percent >= 0 {
			p += fmt.Sprintf(" (%.0f%%)", math.Floor(s.Percent))
		}
		parts = append(parts, p+rateText(s.RowsPerSecond, s.ETA.Seconds()))
	}
	for _, t := range st.Tables {
		s := t.Snapshot
		if s.AllCommitted || s.Committed == 0 && s.Rows == 0 {
			continue
		}
		p := fmt.Sprintf("%s into iceberg: %s rows", t.Table, thousands(s.Committed))
		if s.CommittedPercent >= 0 {
			p += fmt.Sprintf(" (%.0f%%)", math.Floor(s.CommittedPercent))
		}
		parts = append(parts, p+rateText(s.CommitRowsPerSecond, s.CommitETASeconds))
	}
	return strings.Join(parts, " | ")
}

// rateText is ", N rows/s, about T left", each part only when known.
func rateText(rowsPerSecond, etaSeconds float64) string {
	s := ""
	if rowsPerSecond > 0 {
		s += ", " + thousands(int64(rowsPerSecond)) + " rows/s"
	}
	if etaSeconds > 0 {
		s += ", about " + secondsText(etaSeconds) + " left"
	}
	return s
}
