package daemon

import (
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// TestTailKeySame: tailKey.same is the struct's ==, field by field: a key
// differing from another in any one field (a binlog place's strings
// included) is not the same, and a copy is.
func TestTailKeySame(t *testing.T) {
	base := tailKey{table: &schema.Table{}, txid: 7, lsn: 100, eventLSN: 90, commit: 5, place: source.PlaceInside,
		snapshot: true, binlog: source.BinlogPlace{File: "b.1", Pos: 4, Row: 1, ServerID: 2, GTID: "0-1-2"}, haveBinlog: true, op: source.OpRead}
	muts := map[string]func(k *tailKey){
		"table":      func(k *tailKey) { k.table = &schema.Table{} },
		"txid":       func(k *tailKey) { k.txid++ },
		"lsn":        func(k *tailKey) { k.lsn++ },
		"eventLSN":   func(k *tailKey) { k.eventLSN++ },
		"commit":     func(k *tailKey) { k.commit++ },
		"place":      func(k *tailKey) { k.place = source.PlaceLast },
		"snapshot":   func(k *tailKey) { k.snapshot = false },
		"file":       func(k *tailKey) { k.binlog.File = "b.2" },
		"pos":        func(k *tailKey) { k.binlog.Pos++ },
		"row":        func(k *tailKey) { k.binlog.Row++ },
		"server":     func(k *tailKey) { k.binlog.ServerID++ },
		"gtid":       func(k *tailKey) { k.binlog.GTID = "0-1-3" },
		"haveBinlog": func(k *tailKey) { k.haveBinlog, k.binlog = false, source.BinlogPlace{} },
		"op":         func(k *tailKey) { k.op = source.OpCreate },
	}
	for name, mut := range muts {
		k := base
		mut(&k)
		if got, want := base.same(&k), base == k; got != want || got {
			t.Errorf("%s changed: same %v, == %v", name, got, want)
		}
		if got := k.same(&base); got {
			t.Errorf("%s changed: same the other way round", name)
		}
	}
	k := base
	if !base.same(&k) || !k.same(&base) {
		t.Error("a copy is not the same")
	}
	nb := base
	nb.haveBinlog, nb.binlog = false, source.BinlogPlace{}
	k = nb
	if !nb.same(&k) {
		t.Error("a copy without a binlog place is not the same")
	}
}

// TestTailKeyMatches: tailKey.matches(c) is same(prepTailKey(c)) for a
// change differing from the key's in any one field the tail depends on,
// and for the change the key was made from.
func TestTailKeyMatches(t *testing.T) {
	tbl := &schema.Table{}
	base := source.Change{Table: tbl, Op: source.OpRead, TxID: 7, LSN: 100, EventLSN: 90, CommitTime: time.Unix(5, 6),
		Place: source.PlaceInside, Snapshot: true}
	withBinlog := base
	withBinlog.Binlog = &source.BinlogPlace{File: "b.1", Pos: 4, Row: 1, ServerID: 2, GTID: "0-1-2"}
	muts := map[string]func(c *source.Change){
		"table":     func(c *source.Change) { c.Table = &schema.Table{} },
		"txid":      func(c *source.Change) { c.TxID++ },
		"lsn":       func(c *source.Change) { c.LSN++ },
		"eventLSN":  func(c *source.Change) { c.EventLSN++ },
		"commit":    func(c *source.Change) { c.CommitTime = c.CommitTime.Add(1) },
		"no commit": func(c *source.Change) { c.CommitTime = time.Time{} },
		"place":     func(c *source.Change) { c.Place = source.PlaceLast },
		"snapshot":  func(c *source.Change) { c.Snapshot = !c.Snapshot },
		"binlog": func(c *source.Change) {
			if c.Binlog == nil {
				c.Binlog = &source.BinlogPlace{}
			} else {
				c.Binlog = nil
			}
		},
		"file": func(c *source.Change) {
			if c.Binlog != nil {
				b := *c.Binlog
				b.File = "b.2"
				c.Binlog = &b
			}
		},
		"gtid": func(c *source.Change) {
			if c.Binlog != nil {
				b := *c.Binlog
				b.GTID = "0-1-3"
				c.Binlog = &b
			}
		},
		"same": func(*source.Change) {},
	}
	for _, from := range []source.Change{base, withBinlog} {
		k := prepTailKey(&from)
		if !k.matches(&from) {
			t.Errorf("a key does not match the change it was made from (binlog %v)", from.Binlog != nil)
		}
		for name, mut := range muts {
			c := from
			mut(&c)
			want := prepTailKey(&c)
			if got := k.matches(&c); got != k.same(&want) {
				t.Errorf("%s (binlog %v): matches %v, same %v", name, from.Binlog != nil, got, k.same(&want))
			}
		}
		ok := k
		ok.op = source.OpCreate // a binlog envelope's key never matches a prepared change
		if ok.matches(&from) {
			t.Error("a key with an op matches a prepared change")
		}
	}
}

// TestPreparableWithin: preparableWithin(c, limit) is preparable(c) &&
// c.Bytes() <= limit for rows of every kind RowBytes tells apart, at the
// limit and either side of it.
func TestPreparableWithin(t *testing.T) {
	tbl := &schema.Table{}
	rows := [][]any{
		{int64(1), "abc", nil},
		{[]byte("xyz"), 1.5, true, "a longer text value"},
		{[]any{"a", int64(2), []any{"b"}}, int32(3)},
		{int64(1), schema.Unchanged},
		{},
	}
	changes := []source.Change{}
	for _, row := range rows {
		c := source.Change{Table: tbl, Op: source.OpRead, After: row}
		changes = append(changes, c)
		m := c
		m.Message = &source.Message{Content: []byte("0123456789")}
		changes = append(changes, m)
		for _, mut := range []func(c *source.Change){
			func(c *source.Change) { c.Op = source.OpCreate },
			func(c *source.Change) { c.Before = row },
			func(c *source.Change) { c.Reset = "r" },
			func(c *source.Change) { c.KeyChange = true },
			func(c *source.Change) { c.Fault = &source.Fault{} },
			func(c *source.Change) { c.Table = nil },
			func(c *source.Change) { c.After = nil },
		} {
			o := c
			mut(&o)
			changes = append(changes, o)
		}
	}
	for i := range changes {
		c := &changes[i]
		for _, limit := range []int{0, c.Bytes() - 1, c.Bytes(), c.Bytes() + 1, 1 << 30} {
			if got, want := preparableWithin(c, limit), preparable(c) && c.Bytes() <= limit; got != want {
				t.Errorf("change %d (%v), limit %d (Bytes %d): preparableWithin %v, want %v", i, c.After, limit, c.Bytes(), got, want)
			}
		}
	}
}
