package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/log"
)

// latencyTxRows is the size of the latency phase's transactions.
const latencyTxRows = 100

// topic is the benchmark table's log topic.
const topic = pipeline + "." + tableName

// latencyPhase commits transactions at a steady rate while a daemon runs
// and measures when each becomes visible.
//
// A transaction is visible in a snapshot when every one of its records is
// below the snapshot's committed offset in its partition (cdcd.offsets):
// a commit may hold part of a transaction, as the sink reads the
// partitions one after another, so the snapshot's source position alone
// would call a transaction visible too early. Once the daemon has stopped
// the benchmark reads the phase's records from the log (each carries its
// commit LSN) and, for each snapshot it saw, finds the oldest transaction
// not yet whole in it.
func (b *run) latencyPhase(ctx context.Context, plan streamPlan) error {
	b.printf("Latency: %d events/s for %v in transactions of %d, commit_interval %v ...",
		b.opts.LatencyRate, b.opts.LatencyDuration, latencyTxRows, b.opts.CommitInterval)
	c, err := b.startChild("latency")
	if err != nil {
		return err
	}
	defer c.stop()
	if err := b.waitSlotActive(ctx, c); err != nil {
		return err
	}
	b.waitCaughtUp(ctx, c)
	start, err := b.watch.poll(ctx)
	if err != nil {
		return err
	}

	var (
		mu    sync.Mutex
		snaps []tableState
	)
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		_, err := b.watch.waitFor(wctx, latencyPoll, c, func(tableState) bool { return false }, func(st tableState) {
			mu.Lock()
			snaps = append(snaps, st)
			mu.Unlock()
		})
		watchDone <- err
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()

	pg0 := b.pgCPU()
	cpu0, _, err := c.usage()
	if err != nil {
		return err
	}
	resetPeakRSS(c.proc.PID())
	period := time.Duration(float64(time.Second) * latencyTxRows / float64(b.opts.LatencyRate))
	nextID := plan.finalRows() + plan.deleteTx*plan.txRows + 1 // past every id used so far
	stride := plan.rows / latencyTxRows
	var txs []txResult
	var events int64
	t0 := time.Now()
	for i := 0; time.Since(t0) < b.opts.LatencyDuration; i++ {
		if d := time.Until(t0.Add(time.Duration(i) * period)); d > 0 {
			time.Sleep(d)
		}
		var sql string
		if i%5 == 4 { // one in five: an update of ids spread over the table
			sql = fmt.Sprintf(updateSQL, i, 1+(i/5)%stride, stride, latencyTxRows-1)
		} else {
			sql = fmt.Sprintf(insertSQL, nextID, nextID+latencyTxRows-1)
			nextID += latencyTxRows
		}
		res, err := runTx(ctx, b.conn, sql)
		if err != nil {
			return err
		}
		txs = append(txs, res)
		events += res.rows
	}
	written := time.Since(t0)
	// Wait for the table to take in every record.
	total := start.consumed + events
	deadline := time.Now().Add(b.opts.CommitInterval + time.Minute)
	for {
		mu.Lock()
		done := len(snaps) > 0 && snaps[len(snaps)-1].consumed >= total
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: latency: the table had not taken in every change %v after the last commit", b.opts.CommitInterval+time.Minute)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-watchDone:
			watchDone <- err
			return fmt.Errorf("bench: latency: %w", err)
		case <-time.After(latencyPoll):
		}
	}
	cpu1, rss, err := c.usage()
	if err != nil {
		return err
	}
	pg1 := b.pgCPU()
	stopWatch()
	<-watchDone
	watchDone <- nil
	if err := c.stop(); err != nil {
		return err
	}
	recs, err := b.phaseRecords(ctx, start.offsets)
	if err != nil {
		return err
	}
	lat, err := latencies(txs, snaps, start.offsets, recs)
	if err != nil {
		return err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	b.res.Latency = Latency{
		Measure: Measure{Name: fmt.Sprintf("latency @ %d events/s", b.opts.LatencyRate), Items: events, Wall: written,
			CPU: cpu1 - cpu0, PGCPU: pgDelta(pg0, pg1), PeakRSS: rss},
		Transactions: len(lat), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: lat[len(lat)-1],
	}
	b.printf("  %d transactions, %.0f events/s: p50 %v, p99 %v", len(txs), b.res.Latency.Rate(),
		b.res.Latency.P50.Round(time.Millisecond), b.res.Latency.P99.Round(time.Millisecond))
	return nil
}

// phaseRecords reads, per partition, the commit LSN of every record of the
// topic from the offsets from on (the daemon must have stopped).
func (b *run) phaseRecords(ctx context.Context, from []int64) ([][]uint64, error) {
	lg, err := log.Open(filepath.Join(b.dir, "cdcd", "log"), log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		return nil, err
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([][]uint64, len(info.Partitions))
	for _, p := range info.Partitions {
		off := p.Start
		if int(p.Partition) < len(from) {
			off = max(off, from[p.Partition])
		}
		for off < p.End {
			recs, err := lg.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{MaxBytes: 4 << 20})
			if err != nil {
				return nil, err
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				pos := r.Header(daemon.HeaderPosition)
				if len(pos) < 8 {
					return nil, fmt.Errorf("bench: record %d/%d has no source position", p.Partition, r.Offset)
				}
				out[p.Partition] = append(out[p.Partition], binary.BigEndian.Uint64(pos))
				off = r.Offset + 1
			}
		}
	}
	return out, nil
}

// latencies pairs each transaction with the first snapshot seen holding
// all of it: the time from its commit to that snapshot being seen. recs[p]
// are the commit LSNs of partition p's records from offset base[p] on.
func latencies(txs []txResult, snaps []tableState, base []int64, recs [][]uint64) ([]time.Duration, error) {
	// The commit LSNs of the phase's transactions, ascending.
	seen := map[uint64]bool{}
	var lsns []uint64
	for _, p := range recs {
		for _, l := range p {
			if !seen[l] {
				seen[l] = true
				lsns = append(lsns, l)
			}
		}
	}
	sort.Slice(lsns, func(i, j int) bool { return lsns[i] < lsns[j] })
	out := make([]time.Duration, 0, len(txs))
	s, l := 0, 0
	for _, tx := range txs {
		if tx.rows == 0 {
			continue // no change, no record
		}
		// Its commit LSN: the first at or past the LSN taken inside it.
		for l < len(lsns) && lsns[l] < tx.inner {
			l++
		}
		if l == len(lsns) {
			return nil, fmt.Errorf("bench: latency: a transaction at %X has no record in the log", tx.inner)
		}
		commit := lsns[l]
		for s < len(snaps) && watermark(snaps[s], base, recs) <= commit {
			s++
		}
		if s == len(snaps) {
			return nil, fmt.Errorf("bench: latency: no snapshot holds the transaction at %X whole", commit)
		}
		d := snaps[s].seen.Sub(tx.committed)
		if d < 0 {
			return nil, fmt.Errorf("bench: latency: the transaction at %X was matched to a snapshot seen %v before it committed", commit, -d)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench: latency: no transaction")
	}
	return out, nil
}

// watermark is the commit LSN of the oldest transaction a snapshot does
// not hold whole: the smallest LSN among the records at each partition's
// committed offset (MaxUint64 if it holds every record).
func watermark(st tableState, base []int64, recs [][]uint64) uint64 {
	w := uint64(math.MaxUint64)
	for p, lsns := range recs {
		i := int64(0)
		if p < len(st.offsets) {
			i = st.offsets[p]
		}
		if p < len(base) {
			i -= base[p]
		}
		switch {
		case len(lsns) == 0 || i >= int64(len(lsns)):
		case i < 0: // below the phase's start: none of its records
			w = min(w, lsns[0])
		default:
			w = min(w, lsns[i])
		}
	}
	return w
}

// waitCaughtUp waits, up to a minute, until the daemon has confirmed the
// WAL written while it was stopped (the slot's confirmed_flush_lsn at the
// server's WAL end of now), so the phase measures a running pipeline, not
// its restart: the streaming phase's changes leave the table to
// autovacuum, whose WAL a restarted daemon's stream must read through
// first (18.8 MB, 12 s in one run, which set the phase's p99: BENCHMARKS.md,
// "Session 21's end (lead)"). How long it took is printed; a daemon that
// has not caught up within the minute is measured anyway, and said so.
func (b *run) waitCaughtUp(ctx context.Context, c *child) {
	t0 := time.Now()
	var end string
	if err := b.conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		b.printf("  (the server's WAL end could not be read: %v; not waiting for the daemon to catch up)", err)
		return
	}
	for time.Since(t0) < time.Minute {
		var done bool
		err := b.conn.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", end, slot).Scan(&done)
		if err == nil && done {
			b.printf("  the daemon caught up with the WAL written while it was stopped (to %s) in %v", end, time.Since(t0).Round(10*time.Millisecond))
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-c.proc.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	b.printf("  the daemon had not confirmed the WAL written while it was stopped (to %s) after a minute; measuring anyway", end)
}
