package main

import (
	"os"
	"runtime/debug"
)

// defaultMemoryLimit is the soft memory limit `cdcd run` gives the Go
// runtime unless GOMEMLIMIT is set: the collector then works harder as the
// heap nears it, so the peak RSS stays near the limit instead of near twice
// the live heap (GOGC=100), which cdcd bench measured at 0.5-2.5 GB for a
// live heap of 200-250 MB. It is soft: a live heap above it is allowed
// (the collector's CPU is capped), it only costs more collection.
const defaultMemoryLimit = 256 << 20

// applyMemoryLimit sets defaultMemoryLimit when GOMEMLIMIT is not set.
func applyMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
