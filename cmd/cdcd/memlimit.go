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
// 240 MiB, not 256: the limit counts the runtime's memory, not the pages of
// the binary's text the process touches (some 50 MB), so peak RSS sits
// that much above it. BENCHMARKS.md has the runs behind both choices.
const defaultMemoryLimit = 240 << 20

// applyMemoryLimit sets defaultMemoryLimit when GOMEMLIMIT is not set.
func applyMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
