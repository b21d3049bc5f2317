package iceberg

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// pqKindsSchema has a column of every kind pqWriter writes, optional and
// required.
func pqKindsSchema() *iceberg.Schema {
	id := 0
	f := func(name string, t iceberg.Type, req bool) iceberg.NestedField {
		id++
		return iceberg.NestedField{ID: id, Name: name, Type: t, Required: req}
	}
	return iceberg.NewSchema(0,
		f("id", iceberg.PrimitiveTypes.Int64, true),
		f("b", iceberg.PrimitiveTypes.Bool, false),
		f("i32", iceberg.PrimitiveTypes.Int32, false),
		f("i64", iceberg.PrimitiveTypes.Int64, false),
		f("f32", iceberg.PrimitiveTypes.Float32, false),
		f("f64", iceberg.PrimitiveTypes.Float64, false),
		f("d9", iceberg.DecimalTypeOf(9, 2), false),
		f("d18", iceberg.DecimalTypeOf(18, 4), false),
		f("s", iceberg.PrimitiveTypes.String, false),
		f("sreq", iceberg.PrimitiveTypes.String, true),
		f("bin", iceberg.PrimitiveTypes.Binary, false),
		f("date", iceberg.PrimitiveTypes.Date, false),
		f("time", iceberg.PrimitiveTypes.Time, false),
		f("ts", iceberg.PrimitiveTypes.Timestamp, false),
		f("tstz", iceberg.PrimitiveTypes.TimestampTz, false),
		f("nulls", iceberg.PrimitiveTypes.Int64, false), // NULL in every row
	)
}

// pqKindsRow is row i (Iceberg field order): extremes in the first rows,
// NULLs in every column often, long texts whose bounds are cut.
func pqKindsRow(i int, rng *rand.Rand) []any {
	long := strings.Repeat("é", 40) + fmt.Sprint(rng.Int64()) // over statsPrefix bytes
	row := []any{int64(i), rng.IntN(2) == 1, int64(rng.Int32()), rng.Int64() - rng.Int64(), float32(rng.NormFloat64()), rng.NormFloat64() * 1e6,
		fmt.Sprintf("%d.%02d", rng.IntN(10_000_000)-5_000_000, rng.IntN(100)), fmt.Sprintf("%d.%04d", rng.Int64N(1e14)-5e13, rng.IntN(10_000)),
		fmt.Sprintf("text-%d", rng.IntN(1e9)), "", []byte(fmt.Sprintf("bin-%x", rng.Uint64())), int32(rng.IntN(40000) - 20000),
		rng.Int64N(86_400_000_000), rng.Int64(), -rng.Int64(), nil}
	switch i {
	case 0:
		row = []any{int64(i), false, int64(math.MinInt32), int64(math.MinInt64), float32(math.Inf(-1)), math.Inf(-1), "-9999999.99", "-99999999999999.9999",
			"", "", []byte{}, int32(math.MinInt32), int64(0), int64(math.MinInt64), int64(math.MinInt64), nil}
	case 1:
		row = []any{int64(i), true, int64(math.MaxInt32), int64(math.MaxInt64), float32(math.Inf(1)), math.Inf(1), "9999999.99", "99999999999999.9999",
			strings.Repeat("\U0010FFFF", 30), strings.Repeat("z", 200), bytes.Repeat([]byte{0xff}, 100), int32(math.MaxInt32), int64(86_399_999_999), int64(math.MaxInt64), int64(math.MaxInt64), nil}
	case 2:
		row = []any{int64(i), nil, nil, nil, float32(math.NaN()), math.NaN(), nil, nil, nil, long, nil, nil, nil, nil, nil, nil}
	case 3:
		row[4], row[5], row[8] = float32(math.Copysign(0, -1)), math.Copysign(0, -1), long
	}
	if i > 3 && rng.IntN(5) == 0 {
		for c := 1; c < len(row); c++ {
			if c != 9 && rng.IntN(2) == 0 {
				row[c] = nil
			}
		}
	}
	return row
}

// commitSchemaWith is sc's commit file schema as made with pqWriter on
// or off (pqWriterOn), checking that pqWriter takes it exactly when on.
func commitSchemaWith(t *testing.T, sc *iceberg.Schema, on bool) *fileSchema {
	t.Helper()
	defer func(was bool) { pqWriterOn = was }(pqWriterOn)
	pqWriterOn = on
	fs, err := newCommitFileSchema(sc)
	if err != nil {
		t.Fatal(err)
	}
	if (fs.plan != nil) != on {
		t.Fatalf("pqWriter on %v: plan %v", on, fs.plan != nil)
	}
	return fs
}

// writePQBoth writes rows into a commit file through parquet-go's writer
// and through pqWriter, and returns both files.
func writePQBoth(t *testing.T, sc *iceberg.Schema, rows [][]any) (old, new []byte) {
	t.Helper()
	write := func(on bool) []byte {
		d := newDataFileWriter(commitSchemaWith(t, sc, on))
		for _, r := range rows {
			if err := d.add(r); err != nil {
				t.Fatal(err)
			}
		}
		return append([]byte(nil), closed(t, d)...)
	}
	return write(false), write(true)
}

// pqDataFile is the DataFile iceberg-go derives from a file's footer.
func pqDataFile(t *testing.T, sc *iceberg.Schema, data []byte) iceberg.DataFile {
	t.Helper()
	footer, err := parquetFooter(data, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	md, err := metadata.NewFileMetaData(footer, nil)
	if err != nil {
		t.Fatal(err)
	}
	df, err := table.DataFileFromMetadata(table.DataFileArgs{
		Schema: sc, Spec: *iceberg.UnpartitionedSpec, Format: iceberg.ParquetFile, Metadata: md,
		FilePath: "f.parquet", FileSize: int64(len(data)), Content: iceberg.EntryContentData, FormatVersion: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return df
}

// arrowValues reads a file with arrow-go (as iceberg-go's scan does): each
// column's values as text, NULLs as "<nil>".
func arrowValues(t *testing.T, data []byte) map[string][]string {
	t.Helper()
	tbl, err := pqarrow.ReadTable(context.Background(), bytes.NewReader(data), nil, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	out := map[string][]string{}
	for c := range int(tbl.NumCols()) {
		col := tbl.Column(c)
		var vals []string
		for _, chunk := range col.Data().Chunks() {
			for i := range chunk.Len() {
				if chunk.IsNull(i) {
					vals = append(vals, "<nil>")
				} else {
					vals = append(vals, chunk.ValueStr(i))
				}
			}
		}
		out[col.Name()] = vals
	}
	return out
}

// parquetGoRows reads every row of a file with parquet-go.
func parquetGoRows(t *testing.T, data []byte) []parquet.Row {
	t.Helper()
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var rows []parquet.Row
	for _, rg := range pf.RowGroups() {
		rr := rg.Rows()
		buf := make([]parquet.Row, 100)
		for {
			n, err := rr.ReadRows(buf)
			for _, r := range buf[:n] {
				rows = append(rows, r.Clone())
			}
			if err != nil {
				break
			}
		}
		rr.Close()
	}
	return rows
}

// TestPQWriterMatchesParquetGo: the same rows (every kind pqWriter takes,
// NULLs, empty strings, extremes, NaN and -0, long texts whose bounds are
// cut; several pages a column and two row groups) written by parquet-go's
// writer and by pqWriter read back equal through arrow-go (iceberg-go's
// reader) and through parquet-go, row by row in the order written (the
// key index's positions), and give iceberg-go the same DataFile: record
// count, value, null and NaN counts, lower and upper bounds.
func TestPQWriterMatchesParquetGo(t *testing.T) {
	sc := pqKindsSchema()
	for _, n := range []int{1, 5, 1000, rowGroupRows + 1500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(n), 9))
			rows := make([][]any, n)
			for i := range rows {
				rows[i] = pqKindsRow(i, rng)
			}
			old, new := writePQBoth(t, sc, rows)

			nv := sameAsParquetGo(t, sc, old, new, n, "s", n > 3) // NULL-only and NaN-holding columns have no bounds
			if ids := nv["id"]; ids[n-1] != fmt.Sprint(n-1) {
				t.Errorf("the last row's id is %s, want %d", ids[n-1], n-1)
			}
		})
	}
}

// sameAsParquetGo checks the file new against parquet-go's old of the
// same n rows: its row groups (and, past one group, several pages of
// column paged in the first), arrow-go's and parquet-go's readings of
// both equal value by value, and DataFileFromMetadata's counts, bounds
// and split offsets equal (with bounds for most columns when
// wantBounds). It returns arrow-go's reading of new.
func sameAsParquetGo(t *testing.T, sc *iceberg.Schema, old, new []byte, n int, paged string, wantBounds bool) map[string][]string {
	t.Helper()
	pf, err := file.NewParquetReader(bytes.NewReader(new))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := pf.NumRowGroups(), (n+rowGroupRows-1)/rowGroupRows; got != want {
		t.Errorf("%d row groups, want %d", got, want)
	}
	if n > rowGroupRows {
		pr, err := pf.RowGroup(0).GetColumnPageReader(pf.MetaData().Schema.ColumnIndexByName(paged))
		if err != nil {
			t.Fatal(err)
		}
		pages := 0
		for pr.Next() {
			pages++
		}
		if pages < 2 {
			t.Errorf("column %s: %d page(s) in row group 0, want several", paged, pages)
		}
	}

	ov, nv := arrowValues(t, old), arrowValues(t, new)
	if len(nv) != len(sc.Fields()) {
		t.Fatalf("arrow-go read %d columns, want %d", len(nv), len(sc.Fields()))
	}
	for name, want := range ov {
		got := nv[name]
		if len(got) != n || len(want) != n {
			t.Fatalf("column %s: %d values (parquet-go's file %d), want %d", name, len(got), len(want), n)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("column %s row %d: %q, parquet-go's file has %q", name, i, got[i], want[i])
			}
		}
	}

	orows, nrows := parquetGoRows(t, old), parquetGoRows(t, new)
	if len(nrows) != n || len(orows) != n {
		t.Fatalf("parquet-go read %d rows (%d of its own file), want %d", len(nrows), len(orows), n)
	}
	for i := range orows {
		if !sameRow(orows[i], nrows[i]) {
			t.Fatalf("row %d: parquet-go reads %v, in its own file %v", i, nrows[i], orows[i])
		}
	}

	odf, ndf := pqDataFile(t, sc, old), pqDataFile(t, sc, new)
	if odf.Count() != ndf.Count() || ndf.Count() != int64(n) {
		t.Errorf("record count %d, parquet-go's %d, want %d", ndf.Count(), odf.Count(), n)
	}
	for what, pair := range map[string][2]map[int]int64{
		"value counts": {odf.ValueCounts(), ndf.ValueCounts()},
		"null counts":  {odf.NullValueCounts(), ndf.NullValueCounts()},
		"NaN counts":   {odf.NaNValueCounts(), ndf.NaNValueCounts()},
	} {
		if !maps.Equal(pair[0], pair[1]) {
			t.Errorf("%s: %v, parquet-go's %v", what, pair[1], pair[0])
		}
	}
	for what, pair := range map[string][2]map[int][]byte{
		"lower bounds": {odf.LowerBoundValues(), ndf.LowerBoundValues()},
		"upper bounds": {odf.UpperBoundValues(), ndf.UpperBoundValues()},
	} {
		if !maps.EqualFunc(pair[0], pair[1], bytes.Equal) {
			t.Errorf("%s: %v, parquet-go's %v", what, pair[1], pair[0])
		}
	}
	if wantBounds && len(odf.LowerBoundValues()) < 10 {
		t.Errorf("only %d lower bounds", len(odf.LowerBoundValues()))
	}
	if len(odf.SplitOffsets()) != len(ndf.SplitOffsets()) {
		t.Errorf("split offsets %v, parquet-go's %v", ndf.SplitOffsets(), odf.SplitOffsets())
	}
	return nv
}

// sameRow: the rows' values have the same kinds, levels, columns and
// bytes (Row.Equal says NaN is not NaN).
func sameRow(a, b parquet.Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Kind() != y.Kind() || x.DefinitionLevel() != y.DefinitionLevel() || x.RepetitionLevel() != y.RepetitionLevel() ||
			x.Column() != y.Column() || x.IsNull() != y.IsNull() || (!x.IsNull() && !bytes.Equal(x.Bytes(), y.Bytes())) {
			return false
		}
	}
	return true
}

// TestPQWriterDirectRows: rows the codec decodes straight into pqWriter's
// pages (decodePQ), mixed with runs of rows that take the generic path
// (as the sink's rows with unchanged TOASTed values do) and with rows
// that first fail to decode part way (an after-image of extreme values,
// which would widen every bound, cut short or with a byte too many) and
// then take the generic path (upsert's fallback), make the file that
// parquet-go's writer makes of the same rows, all by the generic path:
// arrow-go and parquet-go read the same values row by row in the order
// added (the key index's positions), and iceberg-go derives the same
// record, value, null and NaN counts and lower and upper bounds. Into the
// table's own schema and into an evolved one (columns the version lacks,
// with and without a default, widened types, a column read past); 7 rows,
// 3,000, and two row groups of several pages.
func TestPQWriterDirectRows(t *testing.T) {
	own, err := upsertSchema(codecTable)
	if err != nil {
		t.Fatal(err)
	}
	evolved := codecEvolvedSchema()
	// The bait: every value at or beyond the random rows' extremes.
	bait := afterImage(t, codecTable, &schema.Envelope{Op: 'c', Source: schema.SourceInfo{Position: []byte("p")}, After: []any{
		int64(math.MaxInt64), true, int64(math.MaxInt16), int64(math.MinInt32), float32(math.Inf(-1)), 1e300,
		"-9999999999.99", "999999.999", "~~~~", strings.Repeat("\U0010FFFF", 40), "~", bytes.Repeat([]byte{0xff}, 40),
		int32(math.MaxInt32), int64(86_399_999_999), int64(math.MinInt64), int64(math.MaxInt64),
	}})
	for _, sc := range []*iceberg.Schema{own, evolved} {
		defaults := make([]any, len(sc.Fields()))
		if sc == evolved {
			defaults[len(defaults)-1] = int32(42)
		}
		for _, n := range []int{7, 3000, rowGroupRows + 1500} {
			t.Run(fmt.Sprintf("schema%d/%d", sc.ID, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(n), 21))
				afters := make([][]byte, n)
				vals := make([][]any, n) // Iceberg field order, for the generic path
				for i := range afters {
					env := &schema.Envelope{Op: 'c', After: randomCodecRow(rng, int64(i)), Source: schema.SourceInfo{Position: []byte("p")}}
					body, err := schema.AppendEnvelope(nil, codecTable, env)
					if err != nil {
						t.Fatal(err)
					}
					info, err := schema.ScanEnvelope(codecTable, body)
					if err != nil {
						t.Fatal(err)
					}
					afters[i] = info.After
					dec, err := schema.DecodeEnvelope(codecTable, body)
					if err != nil {
						t.Fatal(err)
					}
					v := make([]any, len(sc.Fields()))
					for fi, f := range sc.Fields() {
						if ci := codecTable.ColumnIndex(f.Name); ci >= 0 {
							v[fi] = dec.After[ci]
						} else {
							v[fi] = defaults[fi]
						}
					}
					vals[i] = v
				}
				oldFS := commitSchemaWith(t, sc, false)
				d := newDataFileWriter(oldFS)
				for i := range vals {
					if err := d.add(vals[i]); err != nil {
						t.Fatal(err)
					}
				}
				old := append([]byte(nil), closed(t, d)...)

				fs := commitSchemaWith(t, sc, true)
				c := newRowCodec(codecTable, fs, defaults)
				if c == nil {
					t.Fatal("no codec")
				}
				d = newDataFileWriter(fs)
				direct, generic, failed := 0, 0, 0
				for i := range afters {
					switch {
					case i%50 >= 20 && i%50 < 25: // a run of generic rows
						if err := d.add(vals[i]); err != nil {
							t.Fatal(err)
						}
						generic++
						continue
					case i%7 == 3:
						cut := bait[:len(bait)-1-rng.IntN(len(bait)/2)]
						if i%21 == 3 {
							cut = append(bait[:len(bait):len(bait)], 0) // a byte too many
						}
						if err := d.addAvro(c, cut); err == nil {
							t.Fatalf("row %d: the bait cut to %d of %d bytes decoded", i, len(cut), len(bait))
						}
						if d.pw.err != nil {
							t.Fatalf("row %d: an undone row failed the file: %v", i, d.pw.err)
						}
						if err := d.add(vals[i]); err != nil { // the fallback
							t.Fatal(err)
						}
						failed++
						continue
					}
					if err := d.addAvro(c, afters[i]); err != nil {
						t.Fatalf("row %d: %v", i, err)
					}
					direct++
				}
				if d.rows != int64(n) {
					t.Fatalf("%d rows written, want %d", d.rows, n)
				}
				if n >= 3000 && (direct == 0 || generic == 0 || failed == 0) {
					t.Fatalf("direct %d, generic %d, failed then generic %d: want each", direct, generic, failed)
				}
				new := append([]byte(nil), closed(t, d)...)
				sameAsParquetGo(t, sc, old, new, n, "j", true)
			})
		}
	}
}

// TestPQWriterKeepsBounded: a writer that wrote a file of large values
// (pages of one value, row groups' chunks of MBs) keeps at most pqKeep of
// its buffers for the next file, a chunk over pqChunkKeep is not kept
// from one row group to the next, and a writer of ordinary files keeps
// its page buffers (the reuse the pool is for).
func TestPQWriterKeepsBounded(t *testing.T) {
	fields := []iceberg.NestedField{{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}}
	for i := range 5 {
		fields = append(fields, iceberg.NestedField{ID: i + 2, Name: fmt.Sprint("c", i), Type: iceberg.PrimitiveTypes.Binary})
	}
	fs, err := newCommitFileSchema(iceberg.NewSchema(0, fields...))
	if err != nil {
		t.Fatal(err)
	}
	if fs.plan == nil {
		t.Fatal("no pqWriter plan")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	write := func(rows, size int) *pqWriter {
		d := newDataFileWriter(fs)
		for i := range rows {
			row := []any{int64(i)}
			for range 5 {
				v := make([]byte, size)
				for j := range v {
					v[j] = byte(rng.Uint32()) // incompressible
				}
				row = append(row, v)
			}
			if err := d.add(row); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.writePending(); err != nil {
			t.Fatal(err)
		}
		w := d.pw
		if err := w.close(d.groupRows); err != nil {
			t.Fatal(err)
		}
		return w
	}
	big := write(24, 256<<10) // a chunk of 6 MiB a column
	if got := big.pqKept(); got < 3*pqKeep {
		t.Fatalf("the writer of large values holds %d bytes before trim, want the file's tens of MB", got)
	}
	big.trim()
	if got := big.pqKept(); got > pqKeep {
		t.Errorf("a writer keeps %d bytes after trim, want <= %d", got, pqKeep)
	}
	huge := write(12, 1<<20) // a chunk of 12 MiB a column
	for i := range huge.cols {
		if c := cap(huge.cols[i].chunk); c > pqChunkKeep {
			t.Errorf("column %d keeps a chunk of %d bytes after its row group, want <= %d", i, c, pqChunkKeep)
		}
	}
	small := write(20_000, 16)
	had := 0
	for i := range small.cols {
		had += cap(small.cols[i].vals)
	}
	small.trim()
	kept := 0
	for i := range small.cols {
		kept += cap(small.cols[i].vals)
	}
	if kept != had || kept == 0 {
		t.Errorf("an ordinary file's writer keeps %d bytes of page buffers of %d", kept, had)
	}
}

// TestPQWritersSurviveCollections: a released writer is there for the
// next file even after collections (a sync.Pool is emptied by two), and
// the free list keeps at most pqFreeMax writers.
func TestPQWritersSurviveCollections(t *testing.T) {
	fs, err := newCommitFileSchema(iceberg.NewSchema(0,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true}))
	if err != nil {
		t.Fatal(err)
	}
	for drained := false; !drained; {
		select {
		case <-pqWriters:
		default:
			drained = true
		}
	}
	w := newPQWriter(fs.plan, io.Discard)
	w.release()
	runtime.GC()
	runtime.GC()
	if got := newPQWriter(fs.plan, io.Discard); got != w {
		t.Fatal("the released writer did not survive two collections: its buffers are made again for the next file")
	}
	ws := make([]*pqWriter, pqFreeMax+2)
	for i := range ws {
		ws[i] = newPQWriter(fs.plan, io.Discard)
	}
	for _, w := range ws {
		w.release()
	}
	if n := len(pqWriters); n != pqFreeMax {
		t.Errorf("the free list holds %d writers, want %d", n, pqFreeMax)
	}
}

// TestPageBytesBounds: a page's byte-array bounds (boundBytes, which
// compares values by their first 8 bytes before it compares them whole)
// are the least and greatest values by bytes.Compare, for values that
// differ only past 8 bytes, only in a trailing zero, or are prefixes of
// one another, in many orders.
func TestPageBytesBounds(t *testing.T) {
	vals := [][]byte{
		{}, {0}, {0, 0}, []byte("a"), []byte("a\x00"), []byte("a\x00\x00\x00\x00\x00\x00\x00"),
		[]byte("a\x00\x00\x00\x00\x00\x00\x00\x01"), []byte("abcdefgh"), []byte("abcdefgh\x00"),
		[]byte("abcdefghi"), []byte("abcdefgi"), []byte("abcdefg"), bytes.Repeat([]byte{0xff}, 8),
		bytes.Repeat([]byte{0xff}, 9), []byte("\xff\xff\xff\xff\xff\xff\xff\xfe\xff"), []byte("b"),
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 500 {
		n := 1 + rng.IntN(len(vals))
		perm := rng.Perm(len(vals))[:n]
		var c pqCol
		lo, hi := vals[perm[0]], vals[perm[0]]
		for _, i := range perm {
			v := vals[i]
			at := len(c.vals)
			c.vals = append(c.vals, v...)
			c.boundBytes(at, len(c.vals))
			if bytes.Compare(v, lo) < 0 {
				lo = v
			}
			if bytes.Compare(v, hi) > 0 {
				hi = v
			}
		}
		gotLo, gotHi := c.vals[c.blo[0]:c.blo[1]], c.vals[c.bhi[0]:c.bhi[1]]
		if !bytes.Equal(gotLo, lo) || !bytes.Equal(gotHi, hi) {
			t.Fatalf("round %d, values %v: bounds %q, %q; want %q, %q", round, perm, gotLo, gotHi, lo, hi)
		}
	}
}
