package main

import (
	"bytes"
	rtrace "runtime/trace"
	"strings"
	"testing"
	"time"
)

//go:noinline
func spin(d time.Duration, done chan<- struct{}) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
	done <- struct{}{}
}

//go:noinline
func sleeper(d time.Duration, done chan<- struct{}) {
	time.Sleep(d)
	done <- struct{}{}
}

// TestReadCountsEachKindsTime: in a trace of this process, a goroutine
// that spins 60 ms is counted running (or waiting for a core) about that
// long under its function's kind, one that sleeps 60 ms blocked, and the
// print names both.
func TestReadCountsEachKindsTime(t *testing.T) {
	var buf bytes.Buffer
	if err := rtrace.Start(&buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go spin(60*time.Millisecond, done)
	go sleeper(60*time.Millisecond, done)
	<-done
	<-done
	rtrace.Stop()
	s, err := read(&buf, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	sum := func(kind string, states ...int) time.Duration {
		var n int64
		for _, w := range s.at[kind] {
			for _, st := range states {
				n += w[st]
			}
		}
		return time.Duration(n)
	}
	if got := sum("internal/tracetl.spin", running, runnable); got < 50*time.Millisecond || got > 200*time.Millisecond {
		t.Errorf("the spinning goroutine ran (or waited for a core) %v, want about 60ms; kinds: %v", got, s.total)
	}
	if got := sum("internal/tracetl.sleeper", blocked); got < 50*time.Millisecond {
		t.Errorf("the sleeping goroutine was blocked %v, want about 60ms", got)
	}
	var out strings.Builder
	s.print(&out, 10, 0, 0)
	for _, want := range []string{"internal/tracetl.spin", "internal/tracetl.sleeper", "cores running"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, out.String())
		}
	}
}
