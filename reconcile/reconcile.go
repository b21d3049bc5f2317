package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// Source is the database side of a reconcile (Postgres; MySQL).
type Source interface {
	// Describe looks a table up and matches its columns with the mirror's;
	// mask names the columns not to compare, with why.
	Describe(ctx context.Context, name string, mirror []MirrorColumn, mask map[string]string) (*Table, error)
	// Sums reads up to rows rows after key after and at most upto
	// (literals; nil: from the first, to the last) in key order, summed
	// per block of blockRows rows, in one read; the last block of a read
	// that reached upto or the table's end is open (Last nil). Each lane
	// (0 to Config.Parallel-1) reads one range at a time, on a connection
	// of its own: lanes run beside each other and the other methods (the
	// mirror is read meanwhile).
	Sums(ctx context.Context, lane int, t *Table, after, upto Key, rows, blockRows int) ([]Block, *Read, error)
	// Sample returns keys of rows sampled from about pages of t's pages,
	// in key order, and how many rows of the table each stands for (nil:
	// no sample; the table is read in one range).
	Sample(ctx context.Context, t *Table, pages int) ([]Split, float64, error)
	// Rows reads the rows of the ranges key by key, in one read.
	Rows(ctx context.Context, t *Table, ranges []Range) ([]KeyRow, *Read, error)
	// Values reads columns of rows by their key literals, as the database
	// prints them (for the report), by key id.
	Values(ctx context.Context, t *Table, lits []Key, cols []string) (map[string][]string, error)
	// Covered says whether the pipeline's log holds every change that
	// committed before position high, and whether the pipeline is running.
	Covered(ctx context.Context, high []byte) (covered, running bool, err error)
	// Pending adds to u the keys of t changed after the log's end (what a
	// stopped pipeline has not read) up to position high.
	Pending(ctx context.Context, t *Table, high []byte, u *unsettled) error
	// Committed returns which transactions of a Read's Gap committed.
	Committed(ctx context.Context, xids []uint64) (map[uint64]bool, error)
	// RowHash is the hash the database computes over a canonical text.
	RowHash(text []byte) uint64
	// KeyCondition is an SQL condition on t's columns that holds for
	// exactly the keys lits (for cdcd snapshot --where).
	KeyCondition(t *Table, lits []Key) string
	// CPU is the database's CPU time spent on the reads so far (0: unknown).
	CPU() time.Duration
}

// Mirror reads the Iceberg side of a table.
type Mirror interface {
	// Live reads the table's current snapshot (nil when the table does
	// not exist yet).
	Live(ctx context.Context) (*iceberg.LiveSnapshot, error)
}

// Config tunes a reconcile. Zero values take the defaults.
type Config struct {
	// ChunkRows is the most rows one source read covers; default 8192.
	ChunkRows int
	// BlockRows is how many rows one hash covers; default 256. A block
	// whose hashes differ is read key by key.
	BlockRows int
	// SegmentRows is how many rows are read from the source before the
	// mirror is read for them; default 4Mi. Each segment costs one read of
	// the mirror's files.
	SegmentRows int
	// MaxRowsPerSecond throttles the source reads, all lanes together
	// (0: unthrottled).
	MaxRowsPerSecond int
	// Parallel is how many key ranges are read from the source at once,
	// each on a connection of its own; default 2. The ranges are cut
	// from a sample of the table's keys (Source.Sample).
	Parallel int
	// SettleTimeout bounds the wait for the pipeline to bring the log and
	// the mirror past a read; default 2m.
	SettleTimeout time.Duration
	// Retries is how often a key that changed while it was compared is
	// compared again in the same round; default 3.
	Retries int
	// MaxListed is how many keys of each kind of difference a report
	// lists (the counts are exact); default 100.
	MaxListed int
	// Poll is how often the pipeline's progress is polled while settling;
	// default 200ms.
	Poll time.Duration
}

func (c *Config) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.ChunkRows, 8192)
	def(&c.BlockRows, 256)
	def(&c.SegmentRows, 4<<20)
	def(&c.Parallel, 2)
	def(&c.Retries, 3)
	def(&c.MaxListed, 100)
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 2 * time.Minute
	}
	if c.Poll <= 0 {
		c.Poll = 200 * time.Millisecond
	}
	c.BlockRows = min(c.BlockRows, c.ChunkRows)
}

// Spec names one table to reconcile.
type Spec struct {
	// Source is the table as the source names it; Iceberg the mirror's
	// identifier (for the report); Topic its log topic.
	Source, Iceberg, Topic string
	Mirror                 Mirror
	// Mask names columns the mirror holds masked (not compared) and why.
	Mask map[string]string
	// Busy, when set, says why the table cannot be compared now ("" when
	// it can): its contents are being replaced (the initial load, a
	// replacing snapshot), so the mirror lacks rows the log does not hold
	// yet. It is asked before the table is read and after each read of
	// the mirror; a table busy then is left out of the round.
	Busy func(ctx context.Context) (string, error)
}

// Reconciler compares tables of one pipeline.
type Reconciler struct {
	cfg    Config
	src    Source
	log    Changes
	logger *slog.Logger
	pace   *pacer // MaxRowsPerSecond, across tables and lanes
}

// New returns a Reconciler over a source and the pipeline's log.
func New(cfg Config, src Source, ch Changes, logger *slog.Logger) *Reconciler {
	cfg.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{cfg: cfg, src: src, log: ch, logger: logger, pace: &pacer{perSecond: cfg.MaxRowsPerSecond}}
}

// ErrNotComparable: a table the reconcile cannot compare (see the
// wrapping error: no mirror yet, offsets of another log, ...).
var ErrNotComparable = errors.New("reconcile: table cannot be compared")

// Table compares one table's rows in the source with its mirror and
// reports what differs.
func (r *Reconciler) Table(ctx context.Context, spec Spec) (*TableReport, error) {
	return r.table(ctx, spec, (*tableRun).run)
}

// table runs compare over one table and completes its report.
func (r *Reconciler) table(ctx context.Context, spec Spec, compare func(*tableRun, context.Context) error) (*TableReport, error) {
	began := time.Now()
	cpu0 := r.src.CPU()
	rep := &TableReport{Table: spec.Source, Iceberg: spec.Iceberg, listed: r.cfg.MaxListed}
	if err := checkBusy(ctx, spec); err != nil {
		return nil, err
	}
	live, err := spec.Mirror.Live(ctx)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return nil, fmt.Errorf("%w: %s has no Iceberg table yet (%s): the pipeline has not written it", ErrNotComparable, spec.Source, spec.Iceberg)
	}
	mcols := make([]MirrorColumn, len(live.Fields))
	for i, f := range live.Fields {
		mcols[i] = MirrorColumn{Name: f.Name, Type: f.Type}
	}
	t, err := r.src.Describe(ctx, spec.Source, mcols, spec.Mask)
	if err != nil {
		return nil, err
	}
	rep.Skipped = t.Skipped
	tr := &tableRun{r: r, spec: spec, t: t, rep: rep, differs: map[string]bool{}}
	if err := compare(tr, ctx); err != nil {
		return nil, err
	}
	rep.plan = tr.repairPlan()
	rep.Duration = time.Since(began)
	if s := rep.Duration.Seconds(); s > 0 {
		rep.RowsPerSecond = float64(rep.Rows) / s
	}
	if cpu := r.src.CPU() - cpu0; cpu > 0 {
		rep.SourceCPU = cpu
		if rep.Rows > 0 {
			rep.SourceCPUMicrosPerRow = float64(cpu.Microseconds()) / float64(rep.Rows)
		}
	}
	return rep, nil
}

// checkBusy returns ErrNotComparable when spec's table is busy.
func checkBusy(ctx context.Context, spec Spec) error {
	if spec.Busy == nil {
		return nil
	}
	why, err := spec.Busy(ctx)
	if err != nil {
		return err
	}
	if why != "" {
		return fmt.Errorf("%w: %s is left out of this round: %s", ErrNotComparable, spec.Source, why)
	}
	return nil
}

// tableRun is one table's round.
type tableRun struct {
	r    *Reconciler
	spec Spec
	t    *Table
	rep  *TableReport
	// retry are keys that changed while they were compared.
	retry []retryKey
	// diff are keys found different (up to maxRepairKeys), for a repair;
	// differs their ids; extra says one is in the mirror only or live
	// more than once there.
	diff    []retryKey
	differs map[string]bool
	extra   bool
}

type retryKey struct{ key, lit Key }

func (tr *tableRun) run(ctx context.Context) error {
	splits, perSegment, err := tr.plan(ctx)
	if err != nil {
		return err
	}
	var after, afterLit Key
	var rest *aheadRows // the mirror's rows after the last segment
	for {
		n := min(perSegment, len(splits))
		seg, ahead, err := tr.readSegment(ctx, after, afterLit, splits[:n], n == len(splits), rest)
		if err != nil {
			return err
		}
		splits = splits[n:]
		if err := tr.settleSegment(ctx, seg, ahead); err != nil {
			return err
		}
		last := seg.blocks[len(seg.blocks)-1]
		if last.Last == nil {
			break
		}
		after, afterLit = last.Last, last.LastLit
		rest = nil
		if ahead != nil {
			rest = ahead.after(tr.t, after)
		}
	}
	return tr.retries(ctx)
}

// Split is a key that bounds the ranges read in parallel: its canonical
// texts and its literals.
type Split struct{ Key, Lit Key }

const (
	// samplePages is how many of a table's pages its sample reads: about
	// 500 runs of keys (a page holds rows inserted together), enough to
	// cut a table into ranges of even size within a few tenths.
	samplePages = 500
	// rangesPerLane is how many ranges a segment has for each lane: a
	// lane whose ranges came out short takes another, so the lanes end
	// together though the sample's ranges are uneven.
	rangesPerLane = 4
)

// plan cuts the table into ranges to read in parallel: the keys bounding
// them (from a sample of the source's keys; each range about the same
// rows) and how many ranges a segment reads. None (the table is read in
// one range, by one lane) with Parallel 1, a table of fewer than two
// chunks, or one the source cannot sample. The ranges bound only which
// rows each read covers: any bounds are sound (each read is settled on
// its own), uneven ones only slower.
func (tr *tableRun) plan(ctx context.Context) ([]Split, int, error) {
	cfg := tr.r.cfg
	if cfg.Parallel < 2 {
		return nil, 0, nil
	}
	keys, per, err := tr.r.src.Sample(ctx, tr.t, samplePages)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, err
		}
		tr.r.logger.Warn("reconcile: the table's keys could not be sampled: its ranges are read one at a time", "table", tr.t.Name, "err", err)
		return nil, 0, nil
	}
	rows := float64(len(keys)) * per // the table's, estimated
	segments := max(1, int(math.Ceil(rows/float64(cfg.SegmentRows))))
	ranges := min(segments*rangesPerLane*cfg.Parallel, int(rows/float64(cfg.ChunkRows)), len(keys))
	if ranges < 2 {
		return nil, 0, nil
	}
	splits := make([]Split, ranges-1)
	for i := range splits {
		splits[i] = keys[(i+1)*len(keys)/ranges]
	}
	return splits, (ranges + segments - 1) / segments, nil
}

// retries compares the keys that changed while they were compared again,
// each alone, up to Config.Retries times; the ones still changing are
// unchecked.
func (tr *tableRun) retries(ctx context.Context) error {
	for try := 0; len(tr.retry) > 0; try++ {
		keys := tr.retry
		tr.retry = nil
		if try >= tr.r.cfg.Retries {
			for _, k := range keys {
				tr.rep.unchecked(tr.t, k.lit)
			}
			break
		}
		for len(keys) > 0 {
			batch := keys[:min(len(keys), tr.r.cfg.ChunkRows)]
			keys = keys[len(batch):]
			ranges := make([]Range, len(batch))
			for i, k := range batch {
				ranges[i] = Range{Eq: k.lit, EqC: k.key}
			}
			if err := tr.drill(ctx, ranges, batch); err != nil {
				return err
			}
		}
	}
	return nil
}

// segment is source reads of consecutive key ranges, settled together.
type segment struct {
	lower, lowerLit Key // exclusive (nil: from the first key)
	blocks          []Block
	reads           []*Read
	readOf          []int // each block's read
	rows            int64
}

// readSegment reads a segment from the source and, meanwhile, the
// mirror's rows after its lower bound (ahead.go; nil when over budget),
// unless rest has them already (the last segment's read, ahead.after).
// The segment's ranges end at each of uppers, then, when open, one more
// reaches up to SegmentRows rows further (to the table's end, or the
// next segment's start).
func (tr *tableRun) readSegment(ctx context.Context, after, afterLit Key, uppers []Split, open bool, rest *aheadRows) (*segment, *aheadRows, error) {
	seg := &segment{lower: after, lowerLit: afterLit}
	ranges := make([]sumRange, 0, len(uppers)+1)
	for i := range uppers {
		ranges = append(ranges, sumRange{after: afterLit, upto: &uppers[i]})
		afterLit = uppers[i].Lit
	}
	if open {
		ranges = append(ranges, sumRange{after: afterLit})
	}
	if rest != nil {
		return seg, rest, tr.readSums(ctx, seg, ranges)
	}
	var ahead *aheadRows
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return tr.readSums(gctx, seg, ranges) })
	g.Go(func() (err error) {
		ahead, err = tr.readAhead(gctx, after, 2*tr.r.cfg.SegmentRows)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return seg, ahead, nil
}

// sumRange is a key range of a segment: after (literals; nil: from the
// first key) up to upto (nil: open, up to SegmentRows rows), and what its
// reads found.
type sumRange struct {
	after  Key
	upto   *Split
	blocks []Block
	reads  []*Read
	readOf []int
}

// readSums reads the segment's ranges from the source, up to Parallel at
// once (each lane takes the next range when done with one), each in
// chunks of ChunkRows rows, each chunk one read with its own positions
// and Gap; their blocks, in key order, and reads make seg's.
func (tr *tableRun) readSums(ctx context.Context, seg *segment, ranges []sumRange) error {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	lanes := min(tr.r.cfg.Parallel, len(ranges))
	tr.rep.Parallel = max(tr.rep.Parallel, lanes)
	for lane := range lanes {
		g.Go(func() error {
			for i := int(next.Add(1)) - 1; i < len(ranges); i = int(next.Add(1)) - 1 {
				if err := tr.readRange(gctx, lane, &ranges[i]); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	for _, rg := range ranges {
		base := len(seg.reads)
		seg.reads = append(seg.reads, rg.reads...)
		for j, b := range rg.blocks {
			seg.blocks = append(seg.blocks, b)
			seg.readOf = append(seg.readOf, base+rg.readOf[j])
			seg.rows += b.Rows
		}
	}
	return nil
}

// readRange reads one range on a lane: to its upper bound, or an open
// one up to SegmentRows rows.
func (tr *tableRun) readRange(ctx context.Context, lane int, rg *sumRange) error {
	cfg := tr.r.cfg
	var upto Key
	if rg.upto != nil {
		upto = rg.upto.Lit
	}
	after := rg.after
	var rows int64
	for {
		if err := tr.r.pace.wait(ctx, cfg.ChunkRows); err != nil {
			return err
		}
		blocks, read, err := tr.r.src.Sums(ctx, lane, tr.t, after, upto, cfg.ChunkRows, cfg.BlockRows)
		if err != nil {
			return err
		}
		rg.reads = append(rg.reads, read)
		for _, b := range blocks {
			rg.blocks = append(rg.blocks, b)
			rg.readOf = append(rg.readOf, len(rg.reads)-1)
			rows += b.Rows
		}
		last := &rg.blocks[len(rg.blocks)-1]
		if last.Last == nil { // the range's end
			if rg.upto != nil {
				last.Last, last.LastLit = rg.upto.Key, rg.upto.Lit
			}
			return nil
		}
		if rg.upto == nil && rows >= int64(cfg.SegmentRows) {
			return nil
		}
		after = last.LastLit
	}
}

// pacer spaces the source reads of every lane so that they read at most
// perSecond rows a second (0: unthrottled).
type pacer struct {
	perSecond int
	mu        sync.Mutex
	next      time.Time // when the next read may start
}

// wait returns once a read of n rows may start.
func (p *pacer) wait(ctx context.Context, n int) error {
	if p.perSecond <= 0 {
		return nil
	}
	if d := time.Until(p.reserve(time.Now(), n)); d > 0 {
		return sleep(ctx, d)
	}
	return nil
}

// reserve is when a read of n rows asked for at now may start: when the
// reads reserved before it have had their time.
func (p *pacer) reserve(now time.Time, n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.next
	if at.Before(now) {
		at = now
	}
	p.next = at.Add(time.Duration(float64(n) / float64(p.perSecond) * float64(time.Second)))
	return at
}

// settled is the state the mirror is compared in after source reads.
type settled struct {
	live *iceberg.LiveSnapshot
	u    *unsettled
	// racy are the reads a transaction of whose Gap committed: any of
	// their rows may be older than the log says.
	racy map[int]bool
}

// settle waits until the log holds every change the reads could have
// seen and reads the mirror, then finds what cannot be compared: keys
// changed in the log since the first read began or not applied to the
// mirror, and reads whose in-progress transactions committed.
//
// ahead, when set, is the mirror read already (beside the reads): it is
// not read again.
func (tr *tableRun) settle(ctx context.Context, reads []*Read, ahead *iceberg.LiveSnapshot) (*settled, error) {
	low, high := reads[0].Low, reads[0].High
	for _, rd := range reads[1:] {
		low, high = minPos(low, rd.Low), maxPos(high, rd.High)
	}
	cfg := tr.r.cfg
	deadline := time.Now().Add(cfg.SettleTimeout)
	st := &settled{u: newUnsettled(), racy: map[int]bool{}}
	// The log: every change before high. A running reader confirms soon
	// after the message Covered writes: the first polls come sooner.
	poll := backoff{max: cfg.Poll}
	running := false
	for {
		covered, live, err := tr.r.src.Covered(ctx, high)
		if err != nil {
			return nil, err
		}
		running = live
		if covered {
			break
		}
		if !running { // a stopped pipeline: what it has not read is pending
			if err := tr.r.src.Pending(ctx, tr.t, high, st.u); err != nil {
				return nil, err
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("reconcile: %s: the pipeline did not bring its log past the read's position within %s (it is behind: cdcd status)", tr.t.Name, cfg.SettleTimeout)
		}
		if err := sleep(ctx, poll.next()); err != nil {
			return nil, err
		}
	}
	// The mirror: as far as the log reached once it covered the reads (it
	// grows on while writes go on), or as far as it gets in time; a
	// stopped pipeline's mirror stays where it is (rule 4 leaves out what
	// it has not applied).
	target, err := tr.r.log.Describe(ctx, tr.spec.Topic)
	if err != nil {
		return nil, err
	}
	var info log.TopicInfo
	poll = backoff{max: cfg.Poll}
	for {
		live := ahead
		if live == nil {
			if live, err = tr.spec.Mirror.Live(ctx); err != nil {
				return nil, err
			}
		}
		if info, err = tr.r.log.Describe(ctx, tr.spec.Topic); err != nil {
			return nil, err
		}
		st.live = live
		if live.TopicID != "" && info.ID != "" && live.TopicID != info.ID {
			return nil, fmt.Errorf("%w: %s: the Iceberg table's offsets belong to another log (topic id %s, the log's %s); the sink pauses it: re-snapshot it (cdcd snapshot --replace %s)",
				ErrNotComparable, tr.t.Name, live.TopicID, info.ID, tr.t.Name)
		}
		if ahead != nil || !running || caughtUp(live.Offsets, target) || time.Now().After(deadline) {
			break
		}
		if err := sleep(ctx, poll.next()); err != nil {
			return nil, err
		}
	}
	// A load or replacing snapshot unfinished now may have been running
	// when the source was read: its rows not in the log yet are missing
	// from the mirror, and no record says which. One finished by now has
	// every row in the log, and rule 4 leaves out those not applied.
	if err := checkBusy(ctx, tr.spec); err != nil {
		return nil, err
	}
	kr := newKeyReader(tr.r.log, tr.t)
	if err := collectUnsettled(ctx, tr.r.log, kr, tr.spec.Topic, info, st.live.Offsets, low, st.u); err != nil {
		return nil, err
	}
	// After the log's end was read: a transaction of a Gap that commits
	// from here on is past it.
	var gap []uint64
	for _, rd := range reads {
		gap = append(gap, rd.Gap...)
	}
	committed, err := tr.r.src.Committed(ctx, gap)
	if err != nil {
		return nil, err
	}
	for i, rd := range reads {
		for _, x := range rd.Gap {
			// One whose records lie at or after Low has its keys
			// unsettled already; any other may have committed before
			// Low unseen by the read.
			if committed[x] && !st.u.txs[uint32(x)] {
				st.racy[i] = true
			}
		}
	}
	return st, nil
}

// caughtUp says whether the mirror's offsets reach every partition's end.
func caughtUp(offsets []int64, info log.TopicInfo) bool {
	for _, p := range info.Partitions {
		var o int64
		if int(p.Partition) < len(offsets) {
			o = offsets[p.Partition]
		}
		if o < p.End {
			return false
		}
	}
	return true
}

// backoff is a poll's interval: 10ms, doubling up to max.
type backoff struct{ cur, max time.Duration }

func (b *backoff) next() time.Duration {
	b.cur = min(max(2*b.cur, 10*time.Millisecond), b.max)
	return b.cur
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func minPos(a, b []byte) []byte {
	if slices.Compare(a, b) <= 0 {
		return a
	}
	return b
}

func maxPos(a, b []byte) []byte {
	if slices.Compare(a, b) >= 0 {
		return a
	}
	return b
}
