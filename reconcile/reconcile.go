package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// Sums reads up to rows rows after key after (literals; nil: from the
	// first) in key order, summed per block of blockRows rows, in one read.
	// It may run while another method does (the mirror is read meanwhile).
	Sums(ctx context.Context, t *Table, after Key, rows, blockRows int) ([]Block, *Read, error)
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
	// MaxRowsPerSecond throttles the source reads (0: unthrottled).
	MaxRowsPerSecond int
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
}

// New returns a Reconciler over a source and the pipeline's log.
func New(cfg Config, src Source, ch Changes, logger *slog.Logger) *Reconciler {
	cfg.defaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{cfg: cfg, src: src, log: ch, logger: logger}
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
	var after, afterLit Key
	var rest *aheadRows // the mirror's rows after the last segment
	for {
		seg, ahead, err := tr.readSegment(ctx, after, afterLit, rest)
		if err != nil {
			return err
		}
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
func (tr *tableRun) readSegment(ctx context.Context, after, afterLit Key, rest *aheadRows) (*segment, *aheadRows, error) {
	seg := &segment{lower: after, lowerLit: afterLit}
	if rest != nil {
		return seg, rest, tr.readSums(ctx, seg, afterLit)
	}
	var ahead *aheadRows
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return tr.readSums(gctx, seg, afterLit) })
	g.Go(func() (err error) {
		ahead, err = tr.readAhead(gctx, after, 2*tr.r.cfg.SegmentRows)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	return seg, ahead, nil
}

// readSums reads up to SegmentRows rows from the source into seg's blocks.
func (tr *tableRun) readSums(ctx context.Context, seg *segment, afterLit Key) error {
	cfg := tr.r.cfg
	for seg.rows < int64(cfg.SegmentRows) {
		began := time.Now()
		blocks, read, err := tr.r.src.Sums(ctx, tr.t, afterLit, cfg.ChunkRows, cfg.BlockRows)
		if err != nil {
			return err
		}
		seg.reads = append(seg.reads, read)
		for _, b := range blocks {
			seg.blocks = append(seg.blocks, b)
			seg.readOf = append(seg.readOf, len(seg.reads)-1)
			seg.rows += b.Rows
		}
		last := blocks[len(blocks)-1]
		if last.Last == nil {
			break
		}
		afterLit = last.LastLit
		throttle(ctx, cfg.MaxRowsPerSecond, cfg.ChunkRows, began)
	}
	return nil
}

// throttle sleeps so reads of n rows started at began come at most
// perSecond rows a second.
func throttle(ctx context.Context, perSecond, n int, began time.Time) {
	if perSecond <= 0 {
		return
	}
	want := time.Duration(float64(n) / float64(perSecond) * float64(time.Second))
	if d := want - time.Since(began); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
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
