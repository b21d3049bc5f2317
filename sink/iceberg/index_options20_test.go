package iceberg

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestIndexOptionsExperiments: the key index's experiment options (the
// sink benchmark's CDCD_SINK_BENCH_INDEX_OPTS) reach pebble, and the
// defaults hold: a new index in columnar blocks (indexFormat, tables of
// TableFormatPebblev5), 16 MiB memtables, an L0 compaction threshold of
// 16; and a commit of 50,000 keys in a 5M-key index (a key every 100) is
// looked up with prefix seeks (denseGap 64), one of 80,000 with plain
// seeks; the dense=N knob makes 10,000 dense. An index made in row blocks
// (rowBlocks, as every index was before session 34) keeps them when opened
// again with the defaults — pebble's format ratchet is one-way, so an
// existing index is never moved — and every entry reads back from both
// (ingested ones too). Fails if a default moves, a knob is dropped on the
// way to pebble, or an existing index is ratcheted.
func TestIndexOptionsExperiments(t *testing.T) {
	key := func(i int64) []byte {
		k, err := encodeKey(nil, []any{i})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	fill := func(x *keyIndex) {
		t.Helper()
		b := x.newBatch()
		b.bulk = true
		for i := int64(0); i < 20_000; i++ { // above every key: held, then ingested
			b.set(key(i), location{file: "f", pos: i})
		}
		if err := b.apply(1); err != nil {
			t.Fatal(err)
		}
		b = x.newBatch()
		for i := int64(0); i < 20_000; i += 3 { // through the memtable
			b.set(key(i), location{file: "g", pos: 2 * i})
		}
		if err := b.apply(2); err != nil {
			t.Fatal(err)
		}
		if err := x.db.Flush(); err != nil {
			t.Fatal(err)
		}
		keys := make([][]byte, 20_000)
		for i := range keys {
			keys[i] = key(int64(i))
		}
		found := 0
		if err := x.getMany(keys, nil, func(i int, loc location) error {
			want := location{file: "f", pos: int64(i)}
			if i%3 == 0 {
				want = location{file: "g", pos: 2 * int64(i)}
			}
			if loc != want {
				t.Errorf("key %d at %v, want %v", i, loc, want)
			}
			found++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if found != len(keys) {
			t.Errorf("found %d of %d keys", found, len(keys))
		}
	}
	formats := func(x *keyIndex) map[sstable.TableFormat]int {
		t.Helper()
		levels, err := x.db.SSTables()
		if err != nil {
			t.Fatal(err)
		}
		n := map[sstable.TableFormat]int{}
		for _, level := range levels {
			for _, tbl := range level {
				n[tableFormat(t, filepath.Join(x.dir, fmt.Sprintf("%06d.sst", tbl.BackingSSTNum)))]++
			}
		}
		return n
	}

	x, err := openIndex(t.TempDir(), indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := x.db.FormatMajorVersion(); v != pebble.FormatColumnarBlocks {
		t.Errorf("a new index's format major version %d, want %d", v, pebble.FormatColumnarBlocks)
	}
	if x.opts.MemTableSize != 16<<20 || x.opts.L0CompactionThreshold != 16 || x.opts.L0StopWritesThreshold != 32 || x.opts.Levels[0].BlockSize != 4096 {
		t.Errorf("defaults: memtable %d, L0 %d/%d, block %d", x.opts.MemTableSize, x.opts.L0CompactionThreshold, x.opts.L0StopWritesThreshold, x.opts.Levels[0].BlockSize)
	}
	x.size = 5_000_000
	if x.denseLookups(50_000, false) || !x.denseLookups(80_000, false) {
		t.Errorf("default denseGap %d: 50,000 keys of 5M dense %v, 80,000 %v; want false, true", x.denseGap, x.denseLookups(50_000, false), x.denseLookups(80_000, false))
	}
	x.size = 0
	fill(x)
	if n := formats(x); n[sstable.TableFormatPebblev5] == 0 || len(n) != 1 {
		t.Errorf("a new index's tables: %v, want Pebblev5 only", n)
	}
	x.close()

	rowDir := t.TempDir()
	x, err = openIndex(rowDir, indexOptions{rowBlocks: true, memTableSize: 32 << 20, blockSize: 1024, l0Compaction: 8, denseGap: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if v := x.db.FormatMajorVersion(); v != pebble.FormatFlushableIngest {
		t.Errorf("row blocks: format major version %d, want %d", v, pebble.FormatFlushableIngest)
	}
	if x.opts.MemTableSize != 32<<20 || x.opts.L0CompactionThreshold != 8 || x.opts.L0StopWritesThreshold != 16 || x.opts.Levels[6].BlockSize != 1024 {
		t.Errorf("knobs: memtable %d, L0 %d/%d, block %d", x.opts.MemTableSize, x.opts.L0CompactionThreshold, x.opts.L0StopWritesThreshold, x.opts.Levels[6].BlockSize)
	}
	x.size = 5_000_000
	if !x.denseLookups(10_000, false) {
		t.Errorf("denseGap 1<<20: 10,000 keys of 5M not dense")
	}
	x.size = 0
	fill(x)
	rowTables := func(x *keyIndex) {
		t.Helper()
		n := formats(x)
		for f := range n {
			if f >= sstable.TableFormatPebblev5 {
				t.Errorf("row-block tables: %v, want row blocks (before Pebblev5) only", n)
			}
		}
		if len(n) == 0 {
			t.Errorf("no tables")
		}
	}
	rowTables(x)
	x.close()

	// Opened again with the defaults: still row blocks, entries all there.
	x, err = openIndex(rowDir, indexOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	if v := x.db.FormatMajorVersion(); v != pebble.FormatFlushableIngest {
		t.Errorf("an existing row-block index opened with the defaults: format major version %d, want %d (not ratcheted)", v, pebble.FormatFlushableIngest)
	}
	fill(x)
	if err := x.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	rowTables(x)
}

// tableFormat reads the format of the table file at path from its footer.
func tableFormat(t *testing.T, path string) sstable.TableFormat {
	t.Helper()
	f, err := vfs.Default.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	readable, err := sstable.NewSimpleReadable(f)
	if err != nil {
		t.Fatal(err)
	}
	r, err := sstable.NewReader(t.Context(), readable, sstable.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tf, err := r.TableFormat()
	if err != nil {
		t.Fatal(err)
	}
	return tf
}
