//go:build amd64 || arm64

package iceberg

import "unsafe"

// prefetch asks the CPU to load the cache line at p (PREFETCHT0, PRFM
// PLDL1KEEP), which never faults; prefetch_amd64.s, prefetch_arm64.s.
//
//go:noescape
func prefetch(p unsafe.Pointer)
