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
// 224 MiB, so that peak RSS stays under 300 MiB: the limit
// counts the runtime's memory, not the pages of the binary the process
// maps (its text and read-only data: RssFile about 70 MiB in a static
// build, about 95 MiB in a cgo build, whose pebble cache and memtables are
// C memory outside the limit besides), so peak RSS is the anonymous
// memory (about the limit less 10 MiB at a load's peak) plus those pages.
// At 224 MiB a static build's 1M-row load peaked at 282–286 MiB
// (anonymous 214, file 70) and a cgo build's at 318 (221 and 95); at
// 200 MiB, 258 (190 and 71). A load's live heap is about 120 MB, so at
// 200 MiB the collector runs more often: that cost about what the
// allocations cut in the same session saved, so the load's CPU per row is
// what it was at 224 MiB before them (BENCHMARKS.md, "Peak RSS and the
// load's allocations (session 9, load)"). Session 10 cut a load's
// allocations by a third and measured 224 MiB again: 15–27 MB more peak
// RSS for CPU per row inside the noise, so 200 stayed. Session 15 measured
// both again, alternating, after the MariaDB reader's value slabs were
// reused, and 224 MiB paid: MariaDB's load
// fell 5.98/4.40 → 4.79/3.96 CPU-µs per row and its streaming 8.19/6.20 →
// 5.98/5.78 per event (two pairs), PostgreSQL's four pairs went either way
// (load 4.28 → 4.37, streaming 8.37 → 8.32, latency 22.6 → 21.1 CPU-µs,
// means), and peak RSS was at most 289 MiB (MariaDB) and 287 MiB
// (PostgreSQL): BENCHMARKS.md, "MariaDB: value slabs used again, and the
// memory limit (session 15, mystream15)". The margin under 300 MiB is
// about 11 MiB in a static build; a cgo build's pages (above) would not
// fit it.
const defaultMemoryLimit = 224 << 20

// applyMemoryLimit sets defaultMemoryLimit when GOMEMLIMIT is not set.
func applyMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
