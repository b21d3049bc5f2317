package main

import (
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/internal/bench"
)

// allocsPath names the profile of a whole run's allocations written beside
// the heap profile at path: load.heap.pprof gives load.allocs.pprof.
func allocsPath(path string) string {
	if base, ok := strings.CutSuffix(path, ".heap.pprof"); ok {
		return base + ".allocs.pprof"
	}
	return path + ".allocs"
}

// startProfiles starts the profiles `cdcd run` writes when asked by
// environment (cdcd bench -profile sets them for its daemons):
// CDCD_CPUPROFILE=FILE, a CPU profile of the whole run; CDCD_HEAPPROFILE=FILE,
// a heap profile rewritten at each new peak of the heap in use (checked
// every 500 ms), so the file shows what the memory held at its peak, and
// at the end the allocations of the whole run (allocsPath);
// CDCD_TRACE=FILE, an execution trace (runtime/trace) into FILE.<pid>
// (cdcd bench starts a daemon a phase), for where a goroutine waits:
// `go tool trace -pprof=sync FILE.<pid>`. The returned function stops
// them.
func startProfiles(logger *slog.Logger) func() {
	var stops []func()
	if path := os.Getenv(bench.EnvCPUProfile); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			logger.Warn("no CPU profile", "path", path, "err", err)
		} else {
			stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
		}
	}
	if path := os.Getenv(bench.EnvHeapProfile); path != "" {
		done := make(chan struct{})
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			var peak uint64
			var ms runtime.MemStats
			t := time.NewTicker(500 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse <= peak+peak/20 { // a new peak by 5% or more
					continue
				}
				peak = ms.HeapInuse
				if f, err := os.Create(path); err == nil {
					_ = pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}()
		stops = append(stops, func() {
			close(done)
			<-finished
			// The peak's profile holds the allocations up to the peak,
			// often early in a phase; this one holds the whole run's.
			if f, err := os.Create(allocsPath(path)); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		})
	}
	if path := os.Getenv("CDCD_TRACE"); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			logger.Warn("no trace", "path", path, "err", err)
		} else {
			stops = append(stops, func() { trace.Stop(); f.Close() })
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}
