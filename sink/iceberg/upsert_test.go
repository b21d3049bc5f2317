package iceberg

import (
	"fmt"
	"github.com/cdcd-dev/cdcd/internal/icebergcheck"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/schema"
)

var kv = &schema.Table{Namespace: "public", Name: "kv", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64},
	{Name: "v", Kind: schema.String, Nullable: true},
	{Name: "n", Kind: schema.Int32, Nullable: true},
}, Key: []int{0}}

func upsertWriter(t testing.TB, cat catalog.Catalog, version, partitions int) *tableWriter {
	w := newWriter(t, cat, "p", partitions)
	w.s.cfg.Mode, w.s.cfg.FormatVersion = ModeUpsert, version
	w.s.cfg.IndexDir, w.s.cfg.TargetFileSize = t.TempDir(), 1<<20
	return w
}

// model is the expected table: id -> "v|n".
type model map[int64]string

func (m model) apply(c change) {
	row := c.env.After
	switch c.env.Op {
	case 'd':
		delete(m, c.env.Before[0].(int64))
	default:
		prev := strings.Split(m[row[0].(int64)], "|")
		vals := make([]string, 2)
		for i := 1; i <= 2; i++ {
			switch v := row[i].(type) {
			case nil:
				vals[i-1] = "∅"
			default:
				if schema.IsUnchanged(v) {
					vals[i-1] = prev[i-1]
				} else {
					vals[i-1] = fmt.Sprint(v)
				}
			}
		}
		m[row[0].(int64)] = strings.Join(vals, "|")
	}
}

// scanTable reads the table with iceberg-go's scan into id -> "v|n".
func scanTable(t *testing.T, cat catalog.Catalog, ident table.Identifier) model {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	got := model{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(n string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(n)[0]) }
		for i := 0; i < int(rec.NumRows()); i++ {
			id := col("id").(*array.Int64).Value(i)
			v, n := "∅", "∅"
			if !col("v").IsNull(i) {
				v = col("v").(*array.String).Value(i)
			}
			if !col("n").IsNull(i) {
				n = fmt.Sprint(col("n").(*array.Int32).Value(i))
			}
			if _, dup := got[id]; dup {
				t.Fatalf("key %d appears twice in the table", id)
			}
			got[id] = v + "|" + n
		}
	}
	return got
}

func compareModel(t *testing.T, want, got model) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("table has %d rows, want %d", len(got), len(want))
	}
	bad := 0
	for k, v := range want {
		if got[k] != v {
			bad++
			if bad < 5 {
				t.Errorf("key %d: got %q want %q", k, got[k], v)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("key %d should not exist", k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkInvariants: at most one live deletion vector per data file, every
// vector references a live data file, no data file listed twice.
func checkInvariants(t *testing.T, cat catalog.Catalog, ident table.Identifier) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := icebergcheck.FileProblems(t.Context(), tbl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func randomChanges(rng *rand.Rand, m model, n int, offset *int64) []change {
	var out []change
	for i := 0; i < n; i++ {
		id := int64(rng.IntN(200))
		_, exists := m[id]
		var c change
		switch r := rng.IntN(10); {
		case !exists || r < 3:
			c = change{env: &schema.Envelope{Op: 'c', After: []any{id, fmt.Sprintf("v%d", rng.IntN(1000)), int64(rng.IntN(50))}}}
		case r < 7:
			var v any = fmt.Sprintf("u%d", rng.IntN(1000))
			if rng.IntN(3) == 0 {
				v = schema.Unchanged
			}
			c = change{env: &schema.Envelope{Op: 'u', Before: []any{id, nil, nil}, After: []any{id, v, int64(rng.IntN(50))}}}
		default:
			c = change{env: &schema.Envelope{Op: 'd', Before: []any{id, nil, nil}}}
		}
		out = append(out, nextChange(c, m, offset))
	}
	return out
}

// nextChange gives c, a change of table kv, the next offset and a source
// position from it, applies it to m and returns it encoded.
func nextChange(c change, m model, offset *int64) change {
	c.table = kv
	c.offset = *offset
	c.env.Source.Position = []byte(fmt.Sprintf("%012d", *offset))
	*offset++
	m.apply(c)
	return encoded(c)
}

func TestUpsertRandomized(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			rng := rand.New(rand.NewPCG(uint64(version), 7))
			want := model{}
			var off int64
			for round := 0; round < 25; round++ {
				w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if round%6 == 5 {
					// Restart: a fresh writer over the same index.
					w.close()
					dir := w.s.cfg.IndexDir
					w = upsertWriter(t, cat, version, 1)
					w.s.cfg.IndexDir = dir
					if err := w.load(t.Context()); err != nil {
						t.Fatal(err)
					}
					if w.next[0] != off {
						t.Fatalf("resumed at %d, want %d", w.next[0], off)
					}
				}
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			if version == 3 {
				checkInvariants(t, cat, w.cfg.Ident)
			}
			w.close()
		})
	}
}

func TestUpsertIndexRebuild(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	rng := rand.New(rand.NewPCG(3, 3))
	want := model{}
	var off int64
	for round := 0; round < 6; round++ {
		w.buf = randomChanges(rng, want, 40, &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// Lose the index (as if the process died between a commit and the
	// index update, or the disk was replaced): it must be rebuilt.
	w.close()
	w2 := upsertWriter(t, cat, 3, 1)
	if err := w2.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(w2.up.idx.files()); n == 0 {
		t.Fatal("index was not rebuilt")
	}
	w2.buf = randomChanges(rng, want, 80, &off)
	w2.next[0] = off
	if err := w2.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	compareModel(t, want, scanTable(t, cat, w2.cfg.Ident))
	checkInvariants(t, cat, w2.cfg.Ident)
	w2.close()
}

func TestUpsertUnchangedFromTable(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	mk := func(op byte, off int64, after []any) change {
		c := change{table: kv, offset: off, env: &schema.Envelope{Op: op, After: after, Before: []any{after[0], nil, nil}}}
		c.env.Source.Position = []byte(fmt.Sprintf("%012d", off))
		return c
	}
	w.buf = []change{mk('c', 0, []any{int64(1), "big value", int64(1)})}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{mk('u', 1, []any{int64(1), schema.Unchanged, int64(2)}), mk('u', 2, []any{int64(1), schema.Unchanged, int64(3)})}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	compareModel(t, model{1: "big value|3"}, scanTable(t, cat, w.cfg.Ident))
	// An unchanged value for a key the table does not have is refused, by column.
	w.buf = []change{mk('u', 3, []any{int64(9), schema.Unchanged, int64(3)})}
	w.next[0] = 4
	_, _, err := w.up.fold(w.buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.up.stage(t.Context(), w, w.tbl, w.buf); err == nil || !strings.Contains(err.Error(), `column "v" arrived as unchanged`) {
		t.Fatalf("stage: %v", err)
	}
	w.close()
}

func TestUpsertTruncateBarrier(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 2)
	w.buf = []change{{table: kv, env: &schema.Envelope{Op: 'c', After: []any{int64(1), "a", nil}}, partition: 0, offset: 0}}
	w.next = []int64{1, 0}
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := w.commitTruncate(t.Context(), []int64{2, 1}, kv); err != nil {
		t.Fatal(err)
	}
	compareModel(t, model{}, scanTable(t, cat, w.cfg.Ident))
	tbl, _ := cat.LoadTable(t.Context(), w.cfg.Ident)
	if got := tbl.CurrentSnapshot().Summary.Properties[PropOffsets]; got != `{"0":2,"1":1}` {
		t.Fatalf("offsets after truncate %s", got)
	}
	w.buf = []change{{table: kv, env: &schema.Envelope{Op: 'c', After: []any{int64(1), "b", nil}}, partition: 0, offset: 2}}
	w.next = []int64{3, 1}
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	compareModel(t, model{1: "b|∅"}, scanTable(t, cat, w.cfg.Ident))
	w.close()
}

func TestUpsertPartitioned(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			w.cfg.PartitionBy = []PartitionField{{Transform: "bucket", Param: 4, Column: "id"}, {Transform: "identity", Column: "n"}}
			rng := rand.New(rand.NewPCG(uint64(version), 11))
			want := model{}
			var off int64
			for round := 0; round < 12; round++ {
				w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
			if err != nil {
				t.Fatal(err)
			}
			spec := tbl.Spec()
			if n := spec.NumFields(); n != 2 {
				t.Fatalf("spec has %d fields", n)
			}
			// Files are split by partition: every data file holds one bucket.
			for path, df := range w.up.data {
				if !strings.Contains(path, "id_bucket_4=") || len(df.Partition()) != 2 {
					t.Errorf("data file %s partition %v", path, df.Partition())
				}
			}
			// A filter on the partition column prunes files.
			scan := tbl.Scan(table.WithRowFilter(iceberg.EqualTo(iceberg.Reference("n"), int32(3))))
			tasks, err := scan.PlanFiles(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(tasks) >= len(w.up.data) {
				t.Errorf("a filter on n=3 planned %d of %d files", len(tasks), len(w.up.data))
			}
			if version == 3 {
				checkInvariants(t, cat, w.cfg.Ident)
			}
			w.close()
		})
	}
}

// encoded turns a test change into one as the fetcher makes it: the
// envelope and key encoded, the info scanned, no decoded envelope.
func encoded(c change) change {
	body, err := schema.AppendEnvelope(nil, c.table, c.env)
	if err != nil {
		panic(err)
	}
	info, err := schema.ScanEnvelope(c.table, body)
	if err != nil {
		panic(err)
	}
	row := c.env.After
	if row == nil {
		row = c.env.Before
	}
	var key []byte
	if row != nil {
		if key, err = schema.AppendKey(nil, c.table, row); err != nil {
			panic(err)
		}
	}
	return change{table: c.table, info: info, body: body, key: key, partition: c.partition, offset: c.offset}
}

func TestCompaction(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			cat := testCatalog(t)
			w := upsertWriter(t, cat, version, 1)
			// A row cap well under the table's rows: the pick stops at it.
			w.s.cfg.Compaction = CompactionConfig{MinGroup: 3, MaxRows: 100}
			rng := rand.New(rand.NewPCG(uint64(version), 21))
			want := model{}
			var off int64
			commit := func() {
				t.Helper()
				w.buf = randomChanges(rng, want, 1+rng.IntN(60), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 10; i++ {
				commit()
			}
			before := len(w.up.data)
			// The sink keeps committing while the rewrite is "running":
			// deletes and updates of rows in the old files must carry over.
			if !compactOnce(t, w, func() { commit(); commit() }) {
				t.Fatal("nothing to compact")
			}
			if st := w.comp.Stats(); st.FilesIn < 2 || st.RowsIn > 100 {
				t.Fatalf("compacted %d files of %d rows; want at least 2 and at most the 100-row cap", st.FilesIn, st.RowsIn)
			}
			if len(w.up.data) >= before {
				t.Errorf("%d data files before, %d after compaction", before, len(w.up.data))
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			if version == 3 {
				checkInvariants(t, cat, w.cfg.Ident)
			} else {
				// Position-delete files that applied only to the compacted
				// files went with them; every one left covers a live file.
				sum := w.tbl.CurrentSnapshot().Summary.Properties
				if sum["removed-delete-files"] == "" || sum["removed-delete-files"] == "0" {
					t.Errorf("the compaction removed no position-delete file: %v", sum)
				}
				pathField, _ := iceberg.PositionalDeleteSchema.FindFieldByName("file_path")
				for _, d := range w.up.posDeletes {
					lo, hi := string(d.LowerBoundValues()[pathField.ID]), string(d.UpperBoundValues()[pathField.ID])
					covers := false
					for path := range w.up.data {
						covers = covers || (lo <= path && path <= hi)
					}
					if !covers {
						t.Errorf("position-delete file %s [%s, %s] applies to no live data file", d.FilePath(), lo, hi)
					}
				}
			}
			// The index points every key at its row: more commits stay right,
			// and a restart needs no rebuild.
			for i := 0; i < 5; i++ {
				commit()
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))
			spotCheckIndex(t, w)
			w.close()
			dir := w.s.cfg.IndexDir
			w2 := upsertWriter(t, cat, version, 1)
			w2.s.cfg.IndexDir = dir
			if err := w2.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			spotCheckIndex(t, w2)
			w2.close()
		})
	}
}

// spotCheckIndex follows every key of the index to its file and position
// and checks the row there has that key.
func spotCheckIndex(t *testing.T, w *tableWriter) {
	t.Helper()
	fs, err := w.tbl.FS(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	byFile := map[string]map[int64][]byte{}
	it, err := w.up.idx.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) == 0 || k[0] != idxPrefixKey {
			continue
		}
		loc, ok, err := w.up.idx.get(k[1:])
		if err != nil || !ok {
			t.Fatalf("get %x: %v", k, err)
		}
		if byFile[loc.file] == nil {
			byFile[loc.file] = map[int64][]byte{}
		}
		byFile[loc.file][loc.pos] = append([]byte(nil), k[1:]...)
		n++
	}
	it.Close()
	for path, want := range byFile {
		if _, live := w.up.data[path]; !live {
			t.Fatalf("index points at %s, not a live data file", path)
		}
		pf, closeFn, err := parquetFile(fs, path)
		if err != nil {
			t.Fatal(err)
		}
		err = readColumns(pf, w.up.keys, func(pos int64, vals []any) error {
			k, ok := want[pos]
			if !ok {
				return nil
			}
			got, err := encodeKey(nil, []any{vals[0]})
			if err != nil {
				return err
			}
			if string(got) != string(k) {
				return fmt.Errorf("%s@%d holds key %x, index says %x", path, pos, got, k)
			}
			delete(want, pos)
			return nil
		})
		closeFn()
		if err != nil {
			t.Fatal(err)
		}
		if len(want) > 0 {
			t.Fatalf("%d index entries point past %s", len(want), path)
		}
	}
	if n == 0 {
		t.Fatal("empty index")
	}
}
