// Package failpoint kills the process at named points, for crash tests.
//
// Points are compiled in and inert unless the environment variable
// CDCD_FAILPOINTS lists them: "name" kills at the first hit, "name@N" at the
// Nth; several are separated by commas. A hit sends SIGKILL to the process
// itself, so nothing after the point runs — not even deferred functions —
// exactly like a crash at that instruction.
package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Env is the environment variable that arms failpoints.
const Env = "CDCD_FAILPOINTS"

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
	once.Do(load)
	n, ok := armed[name]
	if !ok {
		return
	}
	mu.Lock()
	hits[name]++
	h := hits[name]
	mu.Unlock()
	if h == n {
		os.Stderr.WriteString("failpoint: killing the process at " + name + "\n")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not deliverable late; never continue
	}
}
