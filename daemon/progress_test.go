package daemon

import (
	"testing"
	"time"
)

// TestLoadDone: a load is all committed only once no load reads the table
// and every row read is committed; without rows read here (a sink process,
// a restart after the read) the topic's lag decides; a table that loads
// nothing is done, whatever its streaming lag.
func TestLoadDone(t *testing.T) {
	lagOf := func(n int64) func() int64 { return func() int64 { return n } }
	for _, c := range []struct {
		name                 string
		readDone             bool
		read, committed, lag int64
		want                 bool
	}{
		{"reading", false, 100, 100, 0, false},
		{"read, part committed", true, 100, 13, 87, false},
		{"read, all committed", true, 100, 100, 5, true},
		{"nothing to load, streaming lag", true, 0, 0, 5, true},
		{"committed rows read elsewhere, lag left", true, 0, 40, 60, false},
		{"committed rows read elsewhere, caught up", true, 0, 40, 0, true},
		{"lag unknown", true, 100, 13, -1, false},
	} {
		if got := loadDone(c.readDone, c.read, c.committed, lagOf(c.lag)); got != c.want {
			t.Errorf("%s: loadDone = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestLoadRate: the commit rate is measured over the samples of the last
// rateWindow, and a table with fewer than two samples has none.
func TestLoadRate(t *testing.T) {
	p := newLoadProgress()
	t0 := time.Unix(1000, 0)
	if p.rate("t") != 0 {
		t.Error("a rate with no samples")
	}
	p.sample("t", t0, 0)
	p.sample("t", t0.Add(10*time.Second), 1000)
	if r := p.rate("t"); r != 100 {
		t.Errorf("rate %v, want 100 rows/s", r)
	}
	// Samples older than the window fall out: the rate follows the last 30 s.
	for i := 1; i <= 40; i++ {
		p.sample("t", t0.Add(time.Duration(10+i)*time.Second), 1000+int64(i)*10)
	}
	if r := p.rate("t"); r < 9.9 || r > 10.1 {
		t.Errorf("rate %v, want 10 rows/s over the window", r)
	}
}
