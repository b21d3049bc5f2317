package reconcile

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// rangeSource is a Source over a table of integer keys 1..n whose Sums
// sums each key as its hash and gives each read a Gap of its own (the
// read's number), recording the reads; the first read of each lane waits
// until every lane has begun one (lanes 0..lanes-1).
type rangeSource struct {
	Source // nil: only Sums and Sample are called
	n      int
	lanes  int

	mu      sync.Mutex
	reads   []sumsCall
	begun   map[int]bool
	allIn   chan struct{}
	waitFor time.Duration
}

type sumsCall struct {
	lane        int
	after, upto int // 0: open
	first, last int // the keys read
}

func (s *rangeSource) Sample(ctx context.Context, t *Table, pages int) ([]Split, float64, error) {
	var keys []Split
	for k := 1; k <= s.n; k += 10 {
		v := strconv.Itoa(k)
		keys = append(keys, Split{Key: Key{v}, Lit: Key{v}})
	}
	return keys, 10, nil
}

func (s *rangeSource) Sums(ctx context.Context, lane int, t *Table, after, upto Key, rows, blockRows int) ([]Block, *Read, error) {
	s.mu.Lock()
	first := !s.begun[lane]
	s.begun[lane] = true
	if len(s.begun) == s.lanes && first {
		close(s.allIn)
	}
	s.mu.Unlock()
	if first {
		select {
		case <-s.allIn:
		case <-time.After(s.waitFor):
			return nil, nil, errors.New("the lanes did not read at once: a lane's first read waited for the others in vain")
		}
	}
	bound := func(k Key) int {
		if k == nil {
			return 0
		}
		v, _ := strconv.Atoi(k[0])
		return v
	}
	c := sumsCall{lane: lane, after: bound(after), upto: bound(upto)}
	hi := s.n
	if c.upto > 0 {
		hi = min(hi, c.upto)
	}
	var blocks []Block
	got := 0
	for k := c.after + 1; k <= hi && got < rows; k++ {
		if got%blockRows == 0 {
			blocks = append(blocks, Block{})
		}
		b := &blocks[len(blocks)-1]
		b.Rows++
		b.Sum += uint64(k)
		b.Last, b.LastLit = Key{strconv.Itoa(k)}, Key{strconv.Itoa(k)}
		got++
		c.first, c.last = cmpOr(c.first, k), k
	}
	if got < rows {
		if len(blocks) == 0 {
			blocks = append(blocks, Block{})
		}
		blocks[len(blocks)-1].Last, blocks[len(blocks)-1].LastLit = nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads = append(s.reads, c)
	return blocks, &Read{Gap: []uint64{uint64(len(s.reads) - 1)}}, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func intTable() *Table {
	return &Table{Name: "t", Columns: []*Column{{Name: "id", Canon: cInt}}, Key: []int{0}, Ordered: true}
}

// TestReadSumsParallel: with Parallel 2, a table is cut by its sampled
// keys into ranges that the two lanes read at once (each lane's first read
// waits for the other's), each range to its bound in chunks; the
// segment's blocks cover every key once in key order (a range's last
// block ends at its bound, the table's last is open), and each block
// names the read that summed it (settle trusts a block as far as its own
// read's Gap allows: a block named after another read would hide a race).
func TestReadSumsParallel(t *testing.T) {
	const n = 10_000
	src := &rangeSource{n: n, lanes: 2, begun: map[int]bool{}, allIn: make(chan struct{}), waitFor: 20 * time.Second}
	cfg := Config{ChunkRows: 300, BlockRows: 50, Parallel: 2, SegmentRows: 1 << 20}
	tr := &tableRun{r: New(cfg, src, nil, nil), t: intTable(), rep: &TableReport{}}
	ctx := context.Background()
	splits, perSegment, err := tr.plan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One segment (n < SegmentRows) of 4 ranges a lane.
	if len(splits) != 7 || perSegment != 8 {
		t.Fatalf("%d splits, %d ranges a segment; want 7 and 8", len(splits), perSegment)
	}
	seg, _, err := tr.readSegment(ctx, nil, nil, splits, true, &aheadRows{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.rep.Parallel != 2 {
		t.Errorf("report: %d ranges read at once, want 2", tr.rep.Parallel)
	}
	lanes := map[int]int{}
	uptos := map[int]bool{}
	for _, c := range src.reads {
		lanes[c.lane]++
		if c.upto > 0 {
			uptos[c.upto] = true
		}
	}
	if len(lanes) != 2 || lanes[0] == 0 || lanes[1] == 0 {
		t.Errorf("reads by lane: %v, want both lanes", lanes)
	}
	for _, sp := range splits {
		v, _ := strconv.Atoi(sp.Key[0])
		if !uptos[v] {
			t.Errorf("no read bounded by the split %d (reads bounded by %v)", v, uptos)
		}
	}
	// Every key once, in order; each block within its own read.
	prev, rows, sum := 0, int64(0), uint64(0)
	for i, b := range seg.blocks {
		rd := seg.reads[seg.readOf[i]]
		c := src.reads[rd.Gap[0]]
		last := n
		if b.Last != nil {
			last, _ = strconv.Atoi(b.Last[0])
		} else if i != len(seg.blocks)-1 {
			t.Fatalf("block %d of %d is open", i, len(seg.blocks))
		}
		if last <= prev && b.Rows > 0 {
			t.Fatalf("block %d ends at %d, after the block before's %d", i, last, prev)
		}
		if b.Rows > 0 && (prev+1 < c.first || last > c.last) {
			t.Errorf("block %d (%d, %d] is named after read %d, which read [%d, %d] on lane %d", i, prev, last, rd.Gap[0], c.first, c.last, c.lane)
		}
		prev, rows, sum = last, rows+b.Rows, sum+b.Sum
	}
	if rows != n || sum != n*(n+1)/2 || seg.rows != n {
		t.Errorf("the blocks hold %d rows (segment %d), sum %d; want %d rows, sum %d", rows, seg.rows, sum, n, n*(n+1)/2)
	}
	if !slices.Equal(seg.lower, nil) {
		t.Errorf("segment lower %v, want open", seg.lower)
	}
}

// TestPlanOneRange: Parallel 1, or a table of fewer than two chunks, is
// read in one range by one lane, as before ranges were split.
func TestPlanOneRange(t *testing.T) {
	for _, tc := range []struct{ n, parallel, chunk int }{{10_000, 1, 300}, {500, 2, 300}} {
		src := &rangeSource{n: tc.n}
		tr := &tableRun{r: New(Config{ChunkRows: tc.chunk, Parallel: tc.parallel}, src, nil, nil), t: intTable(), rep: &TableReport{}}
		splits, _, err := tr.plan(context.Background())
		if err != nil || splits != nil {
			t.Errorf("%d rows, parallel %d: splits %v, %v; want none", tc.n, tc.parallel, splits, err)
		}
	}
}

// TestPacerAcrossLanes: MaxRowsPerSecond holds for every lane together:
// reads asked for at once start one read's time apart, whichever lane
// asks; a read asked for after a pause starts at once.
func TestPacerAcrossLanes(t *testing.T) {
	p := &pacer{perSecond: 1000}
	t0 := time.Unix(1000, 0)
	var got []time.Duration
	for range 3 { // three lanes at t0, 500 rows each: half a second each
		got = append(got, p.reserve(t0, 500).Sub(t0))
	}
	got = append(got, p.reserve(t0.Add(10*time.Second), 500).Sub(t0))
	want := []time.Duration{0, 500 * time.Millisecond, time.Second, 10 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("reads start at %v, want %v", got, want)
	}
}
