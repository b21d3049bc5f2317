package daemon

import (
	"context"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/log"
)

// truncateCutPoint is the failpoint of a truncate's copies cut short: a
// truncate (a reset marker among them) is appended to every partition of
// its topic, and the log makes each partition durable on its own, so a
// crash in the middle of that append leaves the copies in some partitions
// only. When the source redoes its run at a later position (a load after
// its slot was made again, a re-snapshot's marker), the partial copies stay
// in the log and the sink must not wait for the rest (sink/iceberg,
// fetcher.fetch). The crash suite arms it.
const truncateCutPoint = "daemon.truncate-cut"

// truncateCut, at an armed hit of truncateCutPoint (a batch holding a
// truncate's copies), appends the batch's records of that topic up to the
// truncate and some of its copies, waits for them to be durable and kills
// the process. Compiled in only with failpoints (failpoint.Enabled).
func (e *emitter) truncateCut(ctx context.Context, eb *batchRecords) {
	for _, tr := range eb.order {
		at, n := truncateCopies(tr.recs)
		if n < 2 || !failpoint.Reached(truncateCutPoint) {
			continue
		}
		// Which copies survive varies with the position: all but the
		// last, or only the first.
		keep := n - 1
		if pos := tr.recs[at].Header(HeaderPosition); len(pos) > 0 && pos[len(pos)-1]%2 == 1 {
			keep = 1
		}
		if e.pipe.Wait(ctx) == nil && e.lg.Produce(ctx, tr.topic, tr.recs[:at+keep]) == nil {
			failpoint.Kill(truncateCutPoint)
		}
		return
	}
}

// truncateCopies finds the first truncate's copies in recs: the index of
// the first and how many follow it (records without a key, with a value,
// of one position, in distinct partitions).
func truncateCopies(recs []log.Record) (at, n int) {
	for i := range recs {
		if recs[i].Key != nil || recs[i].Value == nil {
			continue
		}
		pos := string(recs[i].Header(HeaderPosition))
		seen := map[int32]bool{recs[i].Partition: true}
		j := i + 1
		for ; j < len(recs) && recs[j].Key == nil && recs[j].Value != nil && !seen[recs[j].Partition] &&
			string(recs[j].Header(HeaderPosition)) == pos; j++ {
			seen[recs[j].Partition] = true
		}
		if j-i > 1 {
			return i, j - i
		}
	}
	return 0, 0
}
