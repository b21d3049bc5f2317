package iceberg

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	gosnappy "github.com/golang/snappy"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/cdcd-dev/cdcd/schema"
)

// decode is decodeInto for one row: its values in leaf order.
func (c *rowCodec) decode(row []byte, dst []parquet.Value) ([]parquet.Value, error) {
	pending := make([][]parquet.Value, len(c.out))
	if _, err := c.decodeInto(row, pending); err != nil {
		return dst, err
	}
	for leaf, p := range pending {
		if len(p) != 1 {
			return dst, fmt.Errorf("leaf %d: %d values for one row", leaf, len(p))
		}
		dst = append(dst, p[0])
	}
	return dst, nil
}

// afterImage encodes env as the log does and returns its after-image's
// bytes (schema.EnvelopeInfo.After).
func afterImage(tb testing.TB, tt *schema.Table, env *schema.Envelope) []byte {
	tb.Helper()
	body, err := schema.AppendEnvelope(nil, tt, env)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := schema.ScanEnvelope(tt, body)
	if err != nil {
		tb.Fatal(err)
	}
	return info.After
}

// rowWriteReference writes rows of Parquet values (leaf order) the way the
// writer did before it wrote by column: parquet-go's WriteRows, in batches
// cut where dataFileWriter cuts them (writeBatchRows rows, writeBatchBytes
// of byte-array values).
func rowWriteReference(t *testing.T, fs *fileSchema, rows []parquet.Row) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, append([]parquet.WriterOption{fs.pq}, writerOptions...)...)
	var batch []parquet.Row
	size := 0
	for _, r := range rows {
		batch = append(batch, r)
		for _, v := range r {
			if k := v.Kind(); k == parquet.ByteArray || k == parquet.FixedLenByteArray {
				size += len(v.ByteArray())
			}
		}
		if len(batch) >= writeBatchRows || size >= writeBatchBytes {
			if _, err := w.WriteRows(batch); err != nil {
				t.Fatal(err)
			}
			batch, size = batch[:0], 0
		}
	}
	if _, err := w.WriteRows(batch); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// closed closes d's file (in memory) and returns its bytes.
func closed(t *testing.T, d *dataFileWriter) []byte {
	t.Helper()
	if err := d.writePending(); err != nil {
		t.Fatal(err)
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	return d.buf.Bytes()
}

func sameFile(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Fatalf("%s: the file written by column (%d bytes) differs from parquet-go's WriteRows (%d bytes) from byte %d on", what, len(got), len(want), i)
}

// TestColumnWritesMatchWriteRows: a data file whose rows go to parquet-go a
// column at a time (dataFileWriter) is byte for byte the file parquet-go's
// row API (WriteRows) makes of the same rows in the same batches — pages,
// levels, statistics, column and offset indexes, field ids, footer — for
// the codec's rows (every kind it takes, NULLs, a column the version lacks
// with a default, the row lineage columns) and for the generic path's
// (lists of lists with NULL and empty lists, uuids, decimals over 18 digits,
// large values that cut a batch by bytes). Several pages a column.
func TestColumnWritesMatchWriteRows(t *testing.T) {
	t.Run("codec", func(t *testing.T) {
		sc, err := upsertSchema(codecTable)
		if err != nil {
			t.Fatal(err)
		}
		fields := append(slices.Clone(sc.Fields()), iceberg.NestedField{ID: 100, Name: "later", Type: iceberg.PrimitiveTypes.String})
		fs, err := newFileSchema(iceberg.SchemaWithRowLineage(iceberg.NewSchemaWithIdentifiers(sc.ID, sc.IdentifierFieldIDs, fields...)))
		if err != nil {
			t.Fatal(err)
		}
		defaults := make([]any, len(fs.ice.Fields()))
		defaults[len(fields)-1] = "the default"
		c := newRowCodec(codecTable, fs, defaults)
		if c == nil {
			t.Fatal("no codec")
		}
		idLeaf, idCol, ok := rowIDLeaf(fs, fs.ice.Fields())
		if !ok {
			t.Fatal("no _row_id column")
		}
		rng := rand.New(rand.NewPCG(3, 4))
		d := newDataFileWriter(fs)
		var ref []parquet.Row
		const n = 30_000
		for i := range n {
			row := randomCodecRow(rng, int64(i))
			if i%997 == 0 {
				row[9] = strings.Repeat("y", 20<<10+rng.IntN(40<<10)) // cuts a batch by bytes
			}
			after := afterImage(t, codecTable, &schema.Envelope{Op: 'c', After: row, Source: schema.SourceInfo{Position: []byte("p")}})
			want, err := c.decode(after, nil)
			if err != nil {
				t.Fatal(err)
			}
			if i%5 == 0 {
				id := int64(i) * 7
				want[idLeaf] = parquet.Int64Value(id).Level(0, 1, idCol)
				err = d.addAvroRowID(c, after, idLeaf, idCol, id)
			} else {
				err = d.addAvro(c, after)
			}
			if err != nil {
				t.Fatal(err)
			}
			ref = append(ref, want)
			if i == 10 {
				// A row the codec refuses leaves nothing behind.
				if err := d.addAvro(c, after[:len(after)-1]); err == nil {
					t.Fatal("a cut row decoded")
				}
			}
		}
		sameFile(t, "codec rows", closed(t, d), rowWriteReference(t, fs, ref))
	})
	t.Run("generic", func(t *testing.T) {
		sc := iceberg.NewSchemaWithIdentifiers(1, []int{1},
			iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
			iceberg.NestedField{ID: 2, Name: "ints", Type: &iceberg.ListType{ElementID: 6, Element: iceberg.PrimitiveTypes.Int32}},
			iceberg.NestedField{ID: 3, Name: "grid", Type: &iceberg.ListType{ElementID: 7, ElementRequired: true,
				Element: &iceberg.ListType{ElementID: 8, Element: iceberg.PrimitiveTypes.String}}},
			iceberg.NestedField{ID: 4, Name: "u", Type: iceberg.PrimitiveTypes.UUID},
			iceberg.NestedField{ID: 5, Name: "wide", Type: iceberg.DecimalTypeOf(30, 5)},
			iceberg.NestedField{ID: 9, Name: "s", Type: iceberg.PrimitiveTypes.String},
		)
		fs, err := newFileSchema(sc)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		null := func(v any) any {
			if rng.IntN(6) == 0 {
				return nil
			}
			return v
		}
		list := func(elem func() any) any {
			l := make([]any, rng.IntN(4)) // empty lists too
			for i := range l {
				l[i] = elem()
			}
			return null(l)
		}
		d := newDataFileWriter(fs)
		var ref []parquet.Row
		for i := range 20_000 {
			var u [16]byte
			for j := range u {
				u[j] = byte(rng.IntN(256))
			}
			s := fmt.Sprintf("s%d", rng.IntN(1000))
			if i%1009 == 0 {
				s = strings.Repeat("z", 30<<10+rng.IntN(40<<10))
			}
			row := []any{
				int64(i),
				list(func() any { return null(int64(rng.Int32())) }),
				list(func() any {
					l := make([]any, rng.IntN(3))
					for k := range l {
						l[k] = null(fmt.Sprint(rng.IntN(100)))
					}
					return l
				}),
				null(u),
				null(fmt.Sprintf("%d.%05d", rng.Int64()-rng.Int64(), rng.IntN(100000))),
				null(s),
			}
			var want parquet.Row
			for _, fi := range fs.order {
				if want, err = fs.cols[fi].appendTo(want, row[fi]); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.add(row); err != nil {
				t.Fatal(err)
			}
			ref = append(ref, want)
			if i == 10 {
				// A row refused half-way leaves nothing behind.
				bad := append([]any(nil), row...)
				bad[5] = int64(1) // not a string
				if err := d.add(bad); err == nil {
					t.Fatal("an int64 for a string column was taken")
				}
			}
		}
		sameFile(t, "generic rows", closed(t, d), rowWriteReference(t, fs, ref))
	})
}

// BenchmarkDataFileAvroCommit is BenchmarkDataFileAvro with a commit's
// file schema (commitCodec).
func BenchmarkDataFileAvroCommit(b *testing.B) { benchDataFileAvro(b, newCommitFileSchema) }

// TestCommitCodecIsSnappy: the commit files' codec says Snappy and what it
// encodes, compressible or not, any Snappy decoder gives back whole (here
// golang/snappy's, which is not the encoder's library).
func TestCommitCodecIsSnappy(t *testing.T) {
	c := &commitCodec{}
	if c.CompressionCodec() != format.Snappy {
		t.Fatalf("codec %v, want SNAPPY", c.CompressionCodec())
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var dst []byte
	for _, n := range []int{0, 1, 16, 1000, 256 << 10, 1 << 20} {
		for _, random := range []bool{false, true} {
			src := make([]byte, n)
			for i := range src {
				if random {
					src[i] = byte(rng.IntN(256))
				} else {
					src[i] = "label-000000"[i%12]
				}
			}
			var err error
			if dst, err = c.Encode(dst[:0], src); err != nil {
				t.Fatal(err)
			}
			got, err := gosnappy.Decode(nil, dst)
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("%d bytes (random %v): decoded %d bytes, %v", n, random, len(got), err)
			}
			if !random && n >= 1000 && len(dst) > n/4 {
				t.Errorf("%d repetitive bytes compressed to %d", n, len(dst))
			}
		}
	}
}
