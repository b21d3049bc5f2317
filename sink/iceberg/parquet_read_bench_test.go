package iceberg

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// BenchmarkReadRaw measures readRaw (cdcd reconcile's read of the mirror)
// over one data file of CDCD_BENCH_ROWS benchmark rows (default 200,000):
// CPU-ns per row (the process's CPU time: the machine is shared), every
// column's values as stored, nothing rendered.
func BenchmarkReadRaw(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("CDCD_BENCH_ROWS")); err == nil && v > 0 {
		n = v
	}
	sc, err := upsertSchema(benchTable)
	if err != nil {
		b.Fatal(err)
	}
	fs, err := newFileSchema(sc)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	d := newDataFileWriter(fs)
	for i := range n {
		if err := d.add(benchRow(int64(i), rng)); err != nil {
			b.Fatal(err)
		}
	}
	if err := d.writePending(); err != nil {
		b.Fatal(err)
	}
	if err := d.close(); err != nil {
		b.Fatal(err)
	}
	data := d.buf.Bytes()
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		b.Fatal(err)
	}
	fields := sc.Fields()
	b.SetBytes(int64(len(data)))
	cpu0 := processCPU()
	for b.Loop() {
		rows, sum := 0, int64(0)
		err := readRaw(pf, fields, func(pos int64, vals []parquet.Value) error {
			rows++
			sum += vals[0].Int64()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if rows != n || sum != int64(n)*int64(n-1)/2 {
			b.Fatalf("read %d rows (key sum %d), want %d", rows, sum, n)
		}
	}
	b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/row")
}

// processCPU is the process's user and system CPU time so far: the
// machine is shared, so wall time per row says little.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
