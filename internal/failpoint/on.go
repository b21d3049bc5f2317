//go:build cdcd_failpoints

package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
)

// Enabled reports whether failpoints are compiled into this binary.
const Enabled = true

var (
	once  sync.Once
	armed map[string]int // name -> hit number that kills

	mu   sync.Mutex
	hits map[string]int
)

func load() {
	armed, hits = map[string]int{}, map[string]int{}
	for _, p := range strings.Split(os.Getenv(Env), ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, nth, _ := strings.Cut(p, "@")
		n, err := strconv.Atoi(nth)
		if err != nil || n < 1 {
			n = 1
		}
		armed[name] = n
	}
}

// Hit marks that execution reached the point name; if it is armed for
// this hit, the process dies here.
func Hit(name string) {
	if Reached(name) {
		Kill(name)
	}
}

// Reached marks that execution reached the point name and reports whether
// it is armed for this hit, without killing: the caller does the part of
// its work a crash there would leave done, then calls Kill.
func Reached(name string) bool {
	once.Do(load)
	n, ok := armed[name]
	if !ok {
		return false
	}
	mu.Lock()
	hits[name]++
	h := hits[name]
	mu.Unlock()
	return h == n
}

// Kill kills the process at the point name.
func Kill(name string) {
	os.Stderr.WriteString("failpoint: killing the process at " + name + "\n")
	if self, err := os.FindProcess(os.Getpid()); err == nil {
		_ = self.Kill() // SIGKILL on Unix
	}
	select {} // SIGKILL is not deliverable late; never continue
}

// Knob returns the integer in the environment variable KnobPrefix+name
// (0 when unset or not a number): a test's setting of a value a user
// cannot set, such as the initial load's chunk size, so a crash test can
// reach a point a small table would pass too fast.
func Knob(name string) int {
	n, _ := strconv.Atoi(os.Getenv(KnobPrefix + name))
	return n
}
