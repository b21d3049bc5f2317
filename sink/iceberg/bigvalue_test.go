package iceberg

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// bigText is n bytes of text that snappy hardly compresses.
func bigText(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ."
	for i := 0; i < n; i += 8 {
		u := rng.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = letters[u&63]
			u >>= 8
		}
	}
	return string(b)
}

// TestBounds: a truncated lower bound sorts at or before its value, an
// upper bound at or after it, both short; text bounds stay valid UTF-8.
func TestBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	runes := []rune{'a', 'z', 0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, utf8.MaxRune}
	randText := func(n int) []byte {
		var b []byte
		for len(b) < n {
			b = utf8.AppendRune(b, runes[rng.IntN(len(runes))])
		}
		return b
	}
	randBinary := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			if rng.IntN(3) == 0 {
				b[i] = 0xFF
			} else {
				b[i] = byte(rng.IntN(256))
			}
		}
		return b
	}
	check := func(v []byte, text bool) {
		t.Helper()
		lo, hi := lowerBound(v, text), upperBound(v, text)
		if bytes.Compare(lo, v) > 0 || bytes.Compare(hi, v) < 0 {
			t.Fatalf("bounds [%x, %x] do not hold %x", lo, hi, v)
		}
		_, short := incremented(v[:cut(v, statsPrefix, text)], text)
		if len(v) > statsPrefix && (len(lo) > statsPrefix || short && len(hi) > statsPrefix+utf8.UTFMax) {
			t.Fatalf("bounds of %d and %d bytes for a value of %d", len(lo), len(hi), len(v))
		}
		if text && utf8.Valid(v) && (!utf8.Valid(lo) || !utf8.Valid(hi) && !allMaxRune(v[:statsPrefix])) {
			t.Fatalf("bounds %q, %q of valid text are not valid UTF-8", lo, hi)
		}
	}
	for i := 0; i < 20000; i++ {
		n := rng.IntN(3 * statsPrefix)
		check(randText(n), true)
		check(randBinary(n), false)
	}
	// Prefixes no increment fits into.
	maxRunes := bytes.Repeat(utf8.AppendRune(nil, utf8.MaxRune), 40)
	check(append(maxRunes, 'a'), true)
	ff := bytes.Repeat([]byte{0xFF}, 1000)
	check(append(ff, 0x00, 0x01), false)
	if hi := upperBound(append(ff, 0x00, 0x01), false); len(hi) != 1001 || hi[1000] != 0x01 {
		t.Errorf("upper bound of 1000×0xFF 00 01 is %x, want the prefix up to 00 incremented", hi)
	}
	// A value with no short upper bound is refused, all others are not.
	long := bytes.Repeat([]byte{0xFF}, maxUpperBound+10)
	if err := checkBoundable(long); !errors.Is(err, errUnboundable) {
		t.Errorf("checkBoundable of %d×0xFF: %v", len(long), err)
	}
	long[maxUpperBound-1] = 0xFE
	if err := checkBoundable(long); err != nil {
		t.Error(err)
	}
	check(long, false)
	if err := checkBoundable([]byte(strings.Repeat(string(utf8.MaxRune), maxUpperBound))); err != nil {
		t.Error(err)
	}
}

func allMaxRune(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r != utf8.MaxRune && n == len(b) && !utf8.FullRune(b) {
			return true // a cut rune at the end
		}
		if r != utf8.MaxRune {
			return false
		}
		b = b[n:]
	}
	return true
}

// TestBoundedFileStatistics: a data file with megabyte values has small
// page headers (arrow-go's reader, iceberg-go's scan, refuses those over
// 4 MiB), small column chunk statistics and column index entries, and each
// of them bounds the values.
func TestBoundedFileStatistics(t *testing.T) {
	sc := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "b", Type: iceberg.PrimitiveTypes.Binary})
	fs, err := newFileSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	big := bigText(1_200_000, 1)
	bigBin := append(bytes.Repeat([]byte{0xFF}, 10), []byte(bigText(1_200_000, 2))...)
	rows := [][]any{{int64(1), "a", []byte{1}}, {int64(2), big, bigBin}, {int64(3), "zz" + big, []byte{0xFF, 0xFF}}, {int64(4), nil, nil}}
	d := newDataFileWriter(fs)
	for _, r := range rows {
		if err := d.add(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.writePending(); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	data := d.buf.Bytes()
	footer, err := parquetFooter(data, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if len(footer) > 16<<10 {
		t.Errorf("footer of %d bytes", len(footer))
	}
	// Every page header within 16 KiB.
	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 3; c++ {
		pr, err := r.RowGroup(0).GetColumnPageReader(c)
		if err != nil {
			t.Fatal(err)
		}
		pr.SetMaxPageHeaderSize(16 << 10)
		pages := 0
		for pr.Next() {
			pages++
		}
		if pr.Err() != nil {
			t.Fatalf("column %d page %d: %v", c, pages, pr.Err())
		}
	}
	// Column chunk statistics and column index bound every value.
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string][][]byte{"s": {[]byte("a"), []byte(big), []byte("zz" + big)}, "b": {{1}, bigBin, {0xFF, 0xFF}}}
	for _, cc := range pf.Metadata().RowGroups[0].Columns {
		name := cc.MetaData.PathInSchema[0]
		if vals[name] == nil {
			continue
		}
		st := cc.MetaData.Statistics
		boundsHold(t, name+" chunk", st.MinValue, st.MaxValue, vals[name])
	}
	for i, ci := range pf.ColumnIndexes() {
		name := []string{"b", "id", "s"}[i]
		if vals[name] == nil {
			continue
		}
		for p := range ci.MinValues {
			if len(ci.MinValues[p]) > statsPrefix || len(ci.MaxValues[p]) > statsPrefix+utf8.UTFMax {
				t.Errorf("%s column index page %d: bounds of %d and %d bytes", name, p, len(ci.MinValues[p]), len(ci.MaxValues[p]))
			}
		}
		if len(ci.MinValues) == 1 {
			boundsHold(t, name+" column index", ci.MinValues[0], ci.MaxValues[0], vals[name])
		}
	}
}

func boundsHold(t *testing.T, what string, lo, hi []byte, vals [][]byte) {
	t.Helper()
	if len(lo) > statsPrefix || len(hi) > statsPrefix+utf8.UTFMax {
		t.Errorf("%s: bounds of %d and %d bytes", what, len(lo), len(hi))
	}
	for _, v := range vals {
		if bytes.Compare(lo, v) > 0 || bytes.Compare(hi, v) < 0 {
			t.Errorf("%s: bounds [%.20x, %.20x] do not hold %.20x…", what, lo, hi, v)
		}
	}
}

// TestFooterBeyondTail: a streamed file whose footer is longer than the
// tail the writer keeps is finished by reading its footer back.
func TestFooterBeyondTail(t *testing.T) {
	sc := iceberg.NewSchemaWithIdentifiers(1, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String})
	fs, err := newFileSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.buf = []change{{table: kv, env: &schema.Envelope{After: []any{int64(1), "x", int64(1)}, Op: 'c'}}}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	wfs := mustFS(t, w).(icebergio.WriteFileIO)
	path := w.tbl.Location() + "/data/footer.parquet"
	d, err := streamDataFile(fs, wfs, path)
	if err != nil {
		t.Fatal(err)
	}
	d.tail.keep = 16 // less than any footer
	for i := 0; i < 1000; i++ {
		if err := d.add([]any{int64(i), fmt.Sprint("v", i)}); err != nil {
			t.Fatal(err)
		}
	}
	df, err := d.finish(wfs, path, w.tbl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if df.Count() != 1000 || df.LowerBoundValues()[2] == nil {
		t.Errorf("%d rows, lower bounds %v", df.Count(), df.LowerBoundValues())
	}
	if len(d.tail.last) > 32 {
		t.Errorf("the tail kept %d bytes", len(d.tail.last))
	}
	w.close()
}

// TestFailedFinishRemovesFile: a data file that was stored but cannot be
// registered (here: partition values the spec does not have) is removed,
// streamed or written whole.
func TestFailedFinishRemovesFile(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	w.buf = []change{{table: kv, env: &schema.Envelope{After: []any{int64(1), "x", int64(1)}, Op: 'c'}}}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer w.close()
	fs, err := newFileSchema(w.tbl.Schema())
	if err != nil {
		t.Fatal(err)
	}
	wfs := mustFS(t, w).(icebergio.WriteFileIO)
	for _, streamed := range []bool{true, false} {
		path := fmt.Sprintf("%s/data/failed-%t.parquet", w.tbl.Location(), streamed)
		d := newDataFileWriter(fs)
		if streamed {
			if d, err = streamDataFile(fs, wfs, path); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.add([]any{int64(1), "x", int64(1)}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.finish(wfs, path, w.tbl, map[int]any{1000: int64(1)}); err == nil {
			t.Fatal("finish with partition values of no spec succeeded")
		}
		if f, err := wfs.Open(path); err == nil {
			f.Close()
			t.Errorf("streamed=%t: %s is left behind", streamed, path)
		}
	}
}

var bigKV = &schema.Table{Namespace: "public", Name: "big", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64},
	{Name: "s", Kind: schema.String, Nullable: true},
	{Name: "b", Kind: schema.Bytes, Nullable: true},
	{Name: "n", Kind: schema.Int32, Nullable: true},
}, Key: []int{0}}

// scanBig reads bigKV's table with iceberg-go's scan: id -> row.
func scanBig(t *testing.T, cat catalog.Catalog, ident table.Identifier) map[int64][]any {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	at, err := tbl.Scan(table.WithSelectedFields("id", "s", "b", "n")).ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	out := map[int64][]any{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make([]any, 4)
			for j, name := range []string{"id", "s", "b", "n"} {
				a := rec.Column(rec.Schema().FieldIndices(name)[0])
				if a.IsNull(i) {
					continue
				}
				switch a := a.(type) {
				case *array.Int64:
					row[j] = a.Value(i)
				case *array.Int32:
					row[j] = int64(a.Value(i))
				case *array.String:
					row[j] = a.Value(i)
				case *array.LargeString:
					row[j] = a.Value(i)
				case *array.Binary:
					row[j] = bytes.Clone(a.Value(i))
				case *array.LargeBinary:
					row[j] = bytes.Clone(a.Value(i))
				default:
					t.Fatalf("column %s: %T", name, a)
				}
			}
			out[row[0].(int64)] = row
		}
	}
	return out
}

// sameBig compares scanned rows with the wanted ones byte for byte.
func sameBig(t *testing.T, what string, want, got map[int64][]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for id, w := range want {
		g := got[id]
		if g == nil {
			t.Fatalf("%s: row %d missing", what, id)
		}
		for j := range w {
			if wb, gb := asBytes(w[j]), asBytes(g[j]); !bytes.Equal(wb, gb) || (w[j] == nil) != (g[j] == nil) {
				t.Fatalf("%s: row %d column %d: got %d bytes (%.40q…), want %d (%.40q…)", what, id, j, len(gb), gb, len(wb), wb)
			}
		}
	}
}

// asBytes renders a scanned or wanted value as bytes to compare.
func asBytes(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	case nil:
		return nil
	}
	return fmt.Append(nil, v)
}

// checkBigBounds: every data file's manifest bounds of s and b are short
// and hold the values of its rows (here: one row per file, or all rows).
func checkBigBounds(t *testing.T, cat catalog.Catalog, ident table.Identifier, want map[int64][]any) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := tbl.Scan().PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var vals [2][][]byte
	for _, r := range want {
		for j, c := range []int{1, 2} {
			switch v := r[c].(type) {
			case string:
				vals[j] = append(vals[j], []byte(v))
			case []byte:
				vals[j] = append(vals[j], v)
			}
		}
	}
	for _, task := range tasks {
		df := task.File
		for j, name := range []string{"s", "b"} {
			f, _ := tbl.Schema().FindFieldByName(name)
			lo, hi := df.LowerBoundValues()[f.ID], df.UpperBoundValues()[f.ID]
			if len(lo) > 16*utf8.UTFMax || len(hi) > 16*utf8.UTFMax {
				t.Errorf("%s: bounds of %s of %d and %d bytes", df.FilePath(), name, len(lo), len(hi))
			}
			// Every value of the table is between the bounds of the file
			// holding it; with one big value per table a file's bounds
			// hold at least the value of the smallest and the largest.
			if lo != nil {
				n := 0
				for _, v := range vals[j] {
					if bytes.Compare(lo, v) <= 0 {
						n++
					}
				}
				if n == 0 {
					t.Errorf("%s: lower bound %q of %s is above every value", df.FilePath(), lo, name)
				}
			}
			if hi != nil {
				n := 0
				for _, v := range vals[j] {
					if bytes.Compare(hi, v) >= 0 {
						n++
					}
				}
				if n == 0 {
					t.Errorf("%s: upper bound %q of %s is below every value", df.FilePath(), hi, name)
				}
			}
		}
	}
}

// TestBigValues: text and binary values of 1.2 MB, 5 MB and 51 MB commit
// into tables iceberg-go's scan reads back byte for byte — in upsert mode
// (v3 and v2) after inserts, after an update whose big values arrive
// unchanged (taken from the table), after a compaction and after an index
// rebuild, and in append mode. CDCD_BIGVALUE_MB adds a size (slow).
func TestBigValues(t *testing.T) {
	sizes := []int{1_200_000, 5 << 20, 51 << 20}
	if mb, _ := strconv.Atoi(os.Getenv("CDCD_BIGVALUE_MB")); mb > 0 {
		sizes = []int{mb << 20}
	}
	for _, n := range sizes {
		modes := []string{"upsert-v3", "upsert-v2", "append"}
		if n > 5<<20 {
			modes = []string{"upsert-v3", "append"}
		}
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s-%dB", mode, n), func(t *testing.T) { testBigValues(t, mode, n) })
		}
	}
}

func testBigValues(t *testing.T, mode string, n int) {
	cat := testCatalog(t)
	var w *tableWriter
	switch mode {
	case "upsert-v3":
		w = upsertWriter(t, cat, 3, 2)
	case "upsert-v2":
		w = upsertWriter(t, cat, 2, 2)
	default:
		w = newWriter(t, cat, "p", 2)
		w.s.cfg.Mode = ModeAppend
	}
	w.s.cfg.Compaction, w.s.cfg.TargetFileSize = CompactionConfig{MinGroup: 2}, 128<<20
	w.s.cfg.Compaction = w.s.cfg.Compaction.WithDefaults()
	text := bigText(n, uint64(n))
	bin := append([]byte{0xFF, 0xFF, 0}, bigText(n, uint64(n)+1)...)
	want := map[int64][]any{
		1: {int64(1), text, bin, int64(1)},
		2: {int64(2), "small", []byte{1, 2}, int64(2)},
		3: {int64(3), "zz" + text[:n/2], nil, nil},
	}
	var off [2]int64
	mk := func(op byte, row []any, p int32) change {
		c := encoded(change{table: bigKV, env: &schema.Envelope{After: row, Op: op, Source: schema.SourceInfo{
			Position: []byte(fmt.Sprintf("%012d", off[0]+off[1]))}}, partition: p, offset: off[p]})
		off[p]++
		return c
	}
	commit := func(cs ...change) {
		t.Helper()
		w.buf = cs
		w.next = []int64{off[0], off[1]}
		if err := w.commit(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	commit(mk('c', want[1], 0), mk('c', want[2], 1), mk('c', want[3], 1))
	if mode == "append" {
		sameBig(t, "append", want, scanBig(t, cat, w.cfg.Ident))
		return
	}
	sameBig(t, "inserts", want, scanBig(t, cat, w.cfg.Ident))
	checkBigBounds(t, cat, w.cfg.Ident, want)
	// The big values arrive unchanged (TOASTed) and come from the table.
	commit(mk('u', []any{int64(1), schema.Unchanged, schema.Unchanged, int64(10)}, 0))
	want[1][3] = int64(10)
	sameBig(t, "update with unchanged values", want, scanBig(t, cat, w.cfg.Ident))
	compactAll(t, w)
	sameBig(t, "compacted", want, scanBig(t, cat, w.cfg.Ident))
	checkBigBounds(t, cat, w.cfg.Ident, want)
	// The key index lost: rebuilt from the table's files.
	dir := w.s.cfg.IndexDir
	w.close()
	if err := os.RemoveAll(filepath.Join(dir, identString(w.cfg.Ident))); err != nil {
		t.Fatal(err)
	}
	version := 3
	if mode == "upsert-v2" {
		version = 2
	}
	w = upsertWriter(t, cat, version, 2)
	w.s.cfg.IndexDir, w.s.cfg.TargetFileSize = dir, 128<<20
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	off = [2]int64{w.next[0], w.next[1]}
	commit(mk('u', []any{int64(3), schema.Unchanged, []byte("b3"), int64(3)}, 1))
	want[3][2], want[3][3] = []byte("b3"), int64(3)
	sameBig(t, "after the index rebuild", want, scanBig(t, cat, w.cfg.Ident))
	w.close()
	chk, err := VerifyIndex(t.Context(), w.tbl, dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(chk.Problems) > 0 {
		t.Fatalf("index: %v", chk.Problems)
	}
}

// TestUnboundableValuePauses: a binary value with no short upper bound
// (64 KiB of 0xFF and more) pauses the table, naming the column and the
// fix, instead of being retried.
func TestUnboundableValuePauses(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	defer w.close()
	ff := bytes.Repeat([]byte{0xFF}, maxUpperBound+1)
	w.buf = []change{{table: bigKV, env: &schema.Envelope{After: []any{int64(1), "x", ff, nil}, Op: 'c'}}}
	w.next[0] = 1
	err := w.commit(t.Context())
	var pe *PauseError
	if !errors.As(err, &pe) || classify(err) != ErrPaused {
		t.Fatalf("commit: %v (class %v)", err, classify(err))
	}
	if !strings.Contains(pe.What, `column "b"`) || !strings.Contains(pe.Fix, "cdcd snapshot -c FILE --replace") {
		t.Errorf("pause: %s / %s", pe.What, pe.Fix)
	}
}

// TestReadsUnboundedFiles: the sink's own reader (unchanged values, index
// rebuild, compaction, verify) reads data files written before statistics
// were truncated — the 5 MB value in the footer and, twice, in a page
// header — so a compaction
// can rewrite them into files iceberg-go's scan reads.
func TestReadsUnboundedFiles(t *testing.T) {
	big := bigText(5<<20, 3)
	pq := parquet.NewSchema("table", parquet.Group{
		"id": parquet.FieldID(parquet.Int(64), 1),
		"s":  parquet.FieldID(parquet.Optional(parquet.String()), 2),
	})
	path := filepath.Join(t.TempDir(), "old.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewWriter(f, pq)
	if _, err := w.WriteRows([]parquet.Row{
		{parquet.Int64Value(1).Level(0, 0, 0), parquet.ByteArrayValue([]byte(big)).Level(0, 1, 1)},
		{parquet.Int64Value(2).Level(0, 0, 0), parquet.ByteArrayValue([]byte("small")).Level(0, 1, 1)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, _ := os.ReadFile(path)
	if footer, err := parquetFooter(data, int64(len(data))); err != nil || len(footer) < len(big) {
		t.Fatalf("the old file's footer is %d bytes (%v): not the shape this test needs", len(footer), err)
	}
	pf, closeFn, err := parquetFile(icebergio.LocalFS{}, path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	fields := []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}, {ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String}}
	var got []any
	if err := readColumns(pf, fields, func(_ int64, vals []any) error { got = append(got, vals[1]); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != big || got[1] != "small" {
		t.Fatalf("read %d values", len(got))
	}
}
