package daemon

import (
	"testing"

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
