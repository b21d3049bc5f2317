package log

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Run (bounded for a shared 2-core machine):
//
//	go test ./log/ -run '^$' -bench . -benchtime 2s -count 1
//
// Append benchmarks report, beside the log's own MB/s, the raw bandwidth
// of the same disk measured in the same run (the same batch bytes written
// to a plain file with one fdatasync per batch) and the ratio between the
// two, CPU time (user+system) per record and allocations per record.

// benchRecords makes n records with values of size bytes and 16-byte keys.
func benchRecords(n, size int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: fmt.Appendf(nil, "key-%012d", i), Value: make([]byte, size), Partition: 0}
	}
	return recs
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// rawWrite writes batches copies of a batchBytes buffer to a new file in
// dir, fdatasyncing after each, and returns the bandwidth in MB/s.
func rawWrite(b *testing.B, dir string, batchBytes, batches int) float64 {
	f, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, batchBytes)
	start := time.Now()
	for i := 0; i < batches; i++ {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
		if err := syncData(f); err != nil {
			b.Fatal(err)
		}
	}
	return float64(batchBytes*batches) / time.Since(start).Seconds() / 1e6
}

// BenchmarkAppend measures Produce throughput: each op is one Produce call
// of perCall records from one of `producers` concurrent callers (more than
// one lets group commit share an fsync).
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, producers := range []int{1, 4} {
			b.Run(fmt.Sprintf("record=%dB/producers=%d", size, producers), func(b *testing.B) {
				benchAppend(b, size, producers, 100)
			})
		}
	}
}

func benchAppend(b *testing.B, size, producers, perCall int) {
	ctx := context.Background()
	dir := b.TempDir()
	l, err := Open(dir, Options{CleanupInterval: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "bench", TopicConfig{Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	t := l.topics["bench"]
	calls := make([][]Record, producers)
	for i := range calls {
		calls[i] = benchRecords(perCall, size)
	}
	payload := perCall * (size + 16)
	// The raw bandwidth is measured right before and right after the log
	// (the disk is shared; conditions drift), with the log's batch size.
	var probe appendReq
	pb := partBuild{p: t.parts[0], spare: &batchBufs{}}
	for i := range calls[0] {
		pb.left += batchedSize(&calls[0][i])
	}
	for i := range calls[0] {
		pb.add(&calls[0][i], batchedSize(&calls[0][i]), 0)
	}
	probe.batches = append(probe.batches, pb.b.finish())
	rawBefore := rawWrite(b, dir, len(probe.batches[0]), 300)
	b.SetBytes(int64(payload))
	b.ReportAllocs()
	cpu0, m0 := cpuTime(), mallocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	var next sync.Mutex
	remaining := b.N
	for w := 0; w < producers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				next.Lock()
				if remaining == 0 {
					next.Unlock()
					return
				}
				remaining--
				next.Unlock()
				if err := l.produce(ctx, t, calls[w]); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	elapsed := b.Elapsed()
	cpu, allocs := cpuTime()-cpu0, mallocs()-m0
	st := l.Stats().Partitions
	var diskBytes, syncs uint64
	for _, p := range st {
		if p.Topic == "bench" {
			diskBytes, syncs = p.AppendedBytes, p.Syncs
		}
	}
	logMBps := float64(diskBytes) / elapsed.Seconds() / 1e6
	rawMBps := (rawBefore + rawWrite(b, dir, len(probe.batches[0]), 300)) / 2
	records := float64(b.N * perCall)
	b.ReportMetric(logMBps, "disk-MB/s")
	b.ReportMetric(rawMBps, "raw-MB/s")
	b.ReportMetric(logMBps/rawMBps, "x-raw")
	b.ReportMetric(records/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/records, "cpu-ns/rec")
	b.ReportMetric(float64(allocs)/records, "allocs/rec")
	b.ReportMetric(float64(b.N)/float64(max(syncs, 1)), "calls/fsync")
}

// BenchmarkFetch measures sequential Fetch throughput (1 MiB fetches) over
// a partition of records already in the page cache: 1 KB values without
// headers, and records shaped like the daemon's change records (a 10-byte
// key, a 150-byte value, a position and a transaction id header).
func BenchmarkFetch(b *testing.B) {
	b.Run("record=1000B", func(b *testing.B) { benchFetch(b, benchRecords) })
	b.Run("change", func(b *testing.B) { benchFetch(b, benchChanges) })
}

// benchChanges makes n records shaped like the daemon's change records.
func benchChanges(n, _ int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Key: fmt.Appendf(nil, "k%09d", i), Value: make([]byte, 150), Headers: []Header{
			{Key: "cdcd.position", Value: fmt.Appendf(nil, "%016d", i)}, {Key: "cdcd.txid", Value: []byte("1234567")}}}
	}
	return recs
}

func benchFetch(b *testing.B, gen func(n, size int) []Record) {
	ctx := context.Background()
	l, err := Open(b.TempDir(), Options{CleanupInterval: -1, SegmentBytes: 16 << 20}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "bench", TopicConfig{Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	const total = 40_000
	for i := 0; i < total/1000; i++ {
		if err := l.Produce(ctx, "bench", gen(1000, 1000)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	var bytes, records int64
	off := int64(0)
	for i := 0; i < b.N; i++ {
		recs, err := l.Fetch(ctx, "bench", 0, off, FetchOptions{MaxBytes: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		for j := range recs {
			bytes += int64(recordSize(&recs[j]))
		}
		records += int64(len(recs))
		off = recs[len(recs)-1].Offset + 1
		if off == total {
			off = 0
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/b.Elapsed().Seconds()/1e6, "payload-MB/s")
	b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(records), "cpu-ns/rec")
}

// BenchmarkAppendLatency offers 200 B records at a fixed rate (open loop:
// every millisecond, rate/1000 records as Produce calls of 10, each call in
// its own goroutine) for 3 s and reports latency percentiles, measured from
// the moment each call was due, under the default per-batch fsync.
func BenchmarkAppendLatency(b *testing.B) {
	for _, rate := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("rate=%dk", rate/1000), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchLatency(b, rate, 3*time.Second)
			}
		})
	}
}

func benchLatency(b *testing.B, rate int, dur time.Duration) {
	const perCall, size = 10, 200
	ctx := context.Background()
	l, err := Open(b.TempDir(), Options{CleanupInterval: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "bench", TopicConfig{Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	t := l.topics["bench"]
	callsPerMs := rate / 1000 / perCall
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	cpu0 := cpuTime()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for ms := 0; time.Duration(ms)*time.Millisecond < dur; ms++ {
		due := start.Add(time.Duration(ms) * time.Millisecond)
		if d := time.Until(due); d > 0 {
			<-tick.C
		}
		for c := 0; c < callsPerMs; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs := benchRecords(perCall, size)
				if err := l.produce(ctx, t, recs); err != nil {
					b.Error(err)
				}
				d := time.Since(due)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	records := float64(len(lat) * perCall)
	b.ReportMetric(records/elapsed.Seconds(), "records/s")
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(pct(0.999), "p999-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/records, "cpu-ns/rec")
}

// BenchmarkLoadAppend measures an initial load's appends the way the
// daemon makes them: each op is one StartProduce call of 10,000 records of
// 330 bytes (the benchmark table's rows) over 8 partitions, with up to 4
// calls in flight, and every 8th call waiting for all of them (the
// pipeline drains when a COPY chunk is slower than the log). It reports
// allocated bytes per record beside CPU per record: the batch buffers are
// most of what an append allocates.
func BenchmarkLoadAppend(b *testing.B) {
	benchPipelined(b, 10_000, 300)
}

// BenchmarkStreamAppend is BenchmarkLoadAppend shaped like streaming: each
// op is one streamed transaction of 1,000 changes (cdcd bench's stream
// writes transactions of 1,000 rows) over 8 partitions, 4 in flight. A
// partition gets ~125 records (~40 KB) a call, so group commits are
// smaller and there are more of them per record than in a load: compare
// its syncs/krec and cpu-ns/rec with BenchmarkLoadAppend's: what a
// streamed record pays more is the fixed cost of each group commit (its
// fdatasync chief among it), not its bytes.
func BenchmarkStreamAppend(b *testing.B) {
	benchPipelined(b, 1_000, 300)
}

// benchPipelined appends perCall records of size bytes a call through
// StartProduce, as the daemon's emitter does (see BenchmarkLoadAppend).
func benchPipelined(b *testing.B, perCall, size int) {
	const parts, depth, drainEvery = 8, 4, 8
	ctx := context.Background()
	l, err := Open(b.TempDir(), Options{CleanupInterval: -1}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if err := l.CreateTopic(ctx, "load", TopicConfig{Partitions: parts}); err != nil {
		b.Fatal(err)
	}
	src := benchRecords(perCall, size)
	recs := make([]Record, perCall)
	var waits []func(context.Context) error
	drain := func(keep int) {
		for len(waits) > keep {
			if err := waits[0](ctx); err != nil {
				b.Fatal(err)
			}
			waits = waits[1:]
		}
	}
	b.SetBytes(int64(perCall * (size + 16)))
	b.ReportAllocs()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		copy(recs, src)
		for j := range recs {
			recs[j].Partition = -1
		}
		wait, err := l.StartProduce(ctx, "load", recs)
		if err != nil {
			b.Fatal(err)
		}
		waits = append(waits, wait)
		if (i+1)%drainEvery == 0 {
			drain(0)
		} else {
			drain(depth)
		}
	}
	drain(0)
	b.StopTimer()
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	records := float64(b.N * perCall)
	b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/records, "cpu-ns/rec")
	b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/records, "alloc-B/rec")
	b.ReportMetric(float64(ms1.NumGC-ms0.NumGC), "GCs")
	var syncs, batches uint64
	for _, p := range l.Stats().Partitions {
		if p.Topic == "load" {
			syncs, batches = syncs+p.Syncs, batches+p.AppendedBatches
		}
	}
	b.ReportMetric(float64(syncs)/records*1000, "syncs/krec")
	b.ReportMetric(float64(batches)/float64(max(syncs, 1)), "batches/sync")
}
