package main

import (
	"os"
	"runtime/debug"
)

// defaultMemoryLimit is the soft memory limit `cdcd run` gives the Go
// runtime unless GOMEMLIMIT is set: the collector then works harder as the
// heap nears it, so the peak RSS stays near the limit instead of near twice
// the live heap (GOGC=100). It is soft: a live heap above it is allowed
// (the collector's CPU is capped), it only costs more collection.
//
// 224 MiB, so that peak RSS stays under 300 MB: the limit counts the
// runtime's memory, not the pages of the binary the process maps (its text
// and read-only data, about 69 MB resident), so peak RSS sits that much
// above the limit, plus what a collection lets the heap overshoot. At 240
// MiB a quiet machine's load and MariaDB's streaming peaked at 304 and 305
// MB. BENCHMARKS.md has the runs behind the choice.
const defaultMemoryLimit = 224 << 20

// applyMemoryLimit sets defaultMemoryLimit when GOMEMLIMIT is not set.
func applyMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
