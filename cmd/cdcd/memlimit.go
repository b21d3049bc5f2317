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
//
// 240 MiB, not 256: the limit counts the runtime's memory, not the pages of
// the binary's text the process touches (some 50 MB of a 128 MB binary), so
// peak RSS sits that much above it. The sink's 1M-row benchmark (static
// build) peaked at 304-327 MB under 256 MiB and 267-290 MB under 240, at
// the same throughput; `cdcd bench` (2M-row load, 540k streamed changes)
// 323/310 MB under 256 and 306/293 MB under 240, for 4-5% more CPU a row.
const defaultMemoryLimit = 240 << 20

// applyMemoryLimit sets defaultMemoryLimit when GOMEMLIMIT is not set.
func applyMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
