// Command tracetl reads an execution trace (runtime/trace; the daemon
// writes one with CDCD_TRACE=FILE, `cdcd bench -child-env
// CDCD_TRACE=/tmp/t`) and prints where each kind of goroutine spent its
// time: a timeline of the cores each kind ran on, window by window, and
// over a span of windows each kind's running, runnable (waiting for a
// core), in-syscall and blocked time, in goroutines (2.00: two of them the
// whole span).
//
// A goroutine's kind is the outermost cdcd function on the stack it was
// first seen with (its start: a fetcher's loop, a range writer, the
// table's loop); goroutines of one kind add up.
//
//	go run ./internal/tracetl -window 250ms -from 11s -to 14s TRACE
//
// BENCHMARKS.md, "Where the load's last seconds go (lead, session 30)",
// has what it showed.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	window := flag.Duration("window", 250*time.Millisecond, "width of a timeline row")
	from := flag.Duration("from", 0, "start of the span summed per kind (from the trace's start)")
	to := flag.Duration("to", 0, "end of that span (0: the trace's end)")
	kinds := flag.Int("kinds", 7, "kinds in the timeline (the most running)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: tracetl [-window D] [-from D] [-to D] [-kinds N] TRACE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracetl:", err)
		os.Exit(1)
	}
	defer f.Close()
	s, err := read(f, *window)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracetl:", err)
		os.Exit(1)
	}
	s.print(os.Stdout, *kinds, *from, *to)
}

// States a goroutine's time is counted in.
const (
	running = iota
	runnable
	syscall
	blocked
	nStates
)

var stateNames = [nStates]string{"run", "wait-cpu", "syscall", "blocked"}

// spans is the time each kind of goroutine spent in each state, per window.
type spans struct {
	window time.Duration
	// at[kind][w][state] in nanoseconds.
	at    map[string][][nStates]int64
	total map[string]int64 // running, over the whole trace
	n     int              // windows
}

func (s *spans) add(kind string, st int, from, to time.Duration) {
	for from < to {
		w := int(from / s.window)
		end := min(time.Duration(w+1)*s.window, to)
		rows := s.at[kind]
		for len(rows) <= w {
			rows = append(rows, [nStates]int64{})
		}
		rows[w][st] += int64(end - from)
		s.at[kind] = rows
		s.n = max(s.n, w+1)
		if st == running {
			s.total[kind] += int64(end - from)
		}
		from = end
	}
}

// read sums a trace's goroutine state transitions into spans.
func read(r io.Reader, window time.Duration) (*spans, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	s := &spans{window: window, at: map[string][][nStates]int64{}, total: map[string]int64{}}
	type g struct {
		kind  string
		state int // -1: not counted (not yet seen, or gone)
		since time.Duration
	}
	gs := map[trace.GoID]*g{}
	var t0 trace.Time
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if t0 == 0 {
			t0 = ev.Time()
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		now := time.Duration(ev.Time() - t0)
		x := gs[id]
		if x == nil {
			x = &g{state: -1}
			gs[id] = x
		}
		if x.kind == "" {
			stk := st.Stack
			if stk == trace.NoStack {
				stk = ev.Stack()
			}
			x.kind = kindOf(stk)
		}
		if x.state >= 0 {
			s.add(cmp.Or(x.kind, "?"), x.state, x.since, now)
		}
		_, next := st.Goroutine()
		x.since = now
		switch next {
		case trace.GoRunning:
			x.state = running
		case trace.GoRunnable:
			x.state = runnable
		case trace.GoSyscall:
			x.state = syscall
		case trace.GoWaiting:
			x.state = blocked
		default:
			x.state = -1
		}
	}
	return s, nil
}

// kindOf is the outermost cdcd function of a stack, without the module
// path ("" when none).
func kindOf(stk trace.Stack) string {
	kind := ""
	for fr := range stk.Frames() {
		if i := strings.Index(fr.Func, "cdcd-dev/cdcd/"); i >= 0 {
			kind = fr.Func[i+len("cdcd-dev/cdcd/"):]
		}
	}
	return kind
}

// print writes the timeline of the kinds that ran most, then the span
// [from, to) per kind.
func (s *spans) print(w io.Writer, kinds int, from, to time.Duration) {
	top := make([]string, 0, len(s.total))
	for k := range s.total {
		top = append(top, k)
	}
	slices.SortFunc(top, func(a, b string) int { return cmp.Compare(s.total[b], s.total[a]) })
	top = top[:min(kinds, len(top))]
	for i, k := range top {
		fmt.Fprintf(w, "k%d = %s (%.2f s running)\n", i, k, float64(s.total[k])/1e9)
	}
	fmt.Fprintf(w, "\ncores running, per %v\n%8s %5s", s.window, "t", "all")
	for i := range top {
		fmt.Fprintf(w, " %5s", fmt.Sprintf("k%d", i))
	}
	fmt.Fprintln(w)
	win := float64(s.window)
	for n := range s.n {
		var all int64
		for _, rows := range s.at {
			if n < len(rows) {
				all += rows[n][running]
			}
		}
		fmt.Fprintf(w, "%8.2f %5.2f", (time.Duration(n) * s.window).Seconds(), float64(all)/win)
		for _, k := range top {
			var v int64
			if rows := s.at[k]; n < len(rows) {
				v = rows[n][running]
			}
			fmt.Fprintf(w, " %5.2f", float64(v)/win)
		}
		fmt.Fprintln(w)
	}
	a, b := int(from/s.window), s.n
	if to > 0 {
		b = min(b, int((to+s.window-1)/s.window))
	}
	if a >= b {
		return
	}
	span := float64(time.Duration(b-a) * s.window)
	fmt.Fprintf(w, "\ngoroutines in each state, %v to %v\n", time.Duration(a)*s.window, time.Duration(b)*s.window)
	type row struct {
		kind string
		v    [nStates]float64
	}
	var rows []row
	for k, ws := range s.at {
		var r row
		r.kind = k
		for n := a; n < b && n < len(ws); n++ {
			for st := range nStates {
				r.v[st] += float64(ws[n][st]) / span
			}
		}
		if r.v[running]+r.v[runnable]+r.v[syscall] >= 0.01 {
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(x, y row) int { return cmp.Compare(y.v[running], x.v[running]) })
	for _, r := range rows {
		for st := range nStates {
			fmt.Fprintf(w, "%s %5.2f  ", stateNames[st], r.v[st])
		}
		fmt.Fprintln(w, r.kind)
	}
}
