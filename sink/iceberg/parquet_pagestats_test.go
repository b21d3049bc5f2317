package iceberg

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/iceberg-go"
	"github.com/parquet-go/parquet-go"

	"github.com/cdcd-dev/cdcd/schema"
)

// TestNoPageHeaderStatistics: a commit's data file (rows through the
// codec, several pages a column) has no bounds in its page headers,
// while the column chunk statistics (Iceberg's bounds) and the column
// index (a bound pair and a null count a page) are there and hold the
// values: the id column's chunk bounds are exactly its first and last id,
// and its pages' bounds, in order, cover every id once.
func TestNoPageHeaderStatistics(t *testing.T) {
	const n = 60_000
	sc, err := upsertSchema(benchTable)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := newCommitFileSchema(iceberg.SchemaWithRowLineage(sc))
	if err != nil {
		t.Fatal(err)
	}
	codec := newRowCodec(benchTable, fs, nil)
	if codec == nil {
		t.Fatal("no codec for the benchmark table")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	d := newDataFileWriter(fs)
	for i := range n {
		row := afterImage(t, benchTable, &schema.Envelope{Op: 'r', After: benchRow(int64(i), rng), Source: schema.SourceInfo{Position: []byte("p")}})
		if err := d.addAvro(codec, row); err != nil {
			t.Fatal(err)
		}
	}
	data := closed(t, d)

	r, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	leaves := pf.Metadata().RowGroups[0].Columns
	indexes := pf.ColumnIndexes()
	for c := range leaves {
		name := leaves[c].MetaData.PathInSchema[0]
		pr, err := r.RowGroup(0).GetColumnPageReader(c)
		if err != nil {
			t.Fatal(err)
		}
		pages := 0
		for pr.Next() {
			dp, ok := pr.Page().(file.DataPage)
			if !ok {
				t.Fatalf("column %s page %d: a %T, not a data page", name, pages, pr.Page())
			}
			if st := dp.Statistics(); st.HasMin || st.HasMax {
				t.Errorf("column %s page %d: the page header has bounds (min %v, max %v)", name, pages, st.HasMin, st.HasMax)
			}
			pages++
		}
		if pr.Err() != nil {
			t.Fatalf("column %s page %d: %v", name, pages, pr.Err())
		}
		if name == iceberg.RowIDColumnName || name == iceberg.LastUpdatedSequenceNumberColumnName {
			continue // NULL in every row: no bounds
		}
		// (pqWriter counts a boolean as the byte it holds until its page
		// is cut, and a definition level as a byte: 60,000 of the flag
		// column fit one page of 256 KiB.)
		if pages < 2 && name != "flag" {
			t.Errorf("column %s: %d page(s), want several", name, pages)
		}
		st := leaves[c].MetaData.Statistics
		if st.MinValue == nil || st.MaxValue == nil {
			t.Errorf("column %s: no column chunk bounds", name)
		}
		if len(indexes[c].MinValues) != pages || len(indexes[c].MaxValues) != pages || len(indexes[c].NullCounts) != pages {
			t.Errorf("column %s: column index of %d/%d bounds and %d null counts for %d pages", name,
				len(indexes[c].MinValues), len(indexes[c].MaxValues), len(indexes[c].NullCounts), pages)
		}
		if name != "id" {
			continue
		}
		lo, hi := int64(binary.LittleEndian.Uint64(st.MinValue)), int64(binary.LittleEndian.Uint64(st.MaxValue))
		if lo != 0 || hi != n-1 {
			t.Errorf("id: column chunk bounds [%d, %d], want [0, %d]", lo, hi, n-1)
		}
		next := int64(0)
		for p := range indexes[c].MinValues {
			plo, phi := int64(binary.LittleEndian.Uint64(indexes[c].MinValues[p])), int64(binary.LittleEndian.Uint64(indexes[c].MaxValues[p]))
			if plo != next || phi < plo {
				t.Errorf("id: page %d bounds [%d, %d], want it to start at %d", p, plo, phi, next)
			}
			next = phi + 1
		}
		if next != n {
			t.Errorf("id: the pages' bounds end at %d, want %d", next-1, n-1)
		}
	}
}
