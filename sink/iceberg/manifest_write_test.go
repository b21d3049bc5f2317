package iceberg

import (
	"bytes"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/iceberg-go"
	"github.com/google/uuid"
)

// mwSchema has a column of every type a partition can come from.
func mwSchema() *iceberg.Schema {
	return iceberg.NewSchema(7,
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "s", Type: iceberg.PrimitiveTypes.String},
		iceberg.NestedField{ID: 3, Name: "d", Type: iceberg.PrimitiveTypes.Date},
		iceberg.NestedField{ID: 4, Name: "ts", Type: iceberg.PrimitiveTypes.Timestamp},
		iceberg.NestedField{ID: 5, Name: "tstz", Type: iceberg.PrimitiveTypes.TimestampTz},
		iceberg.NestedField{ID: 6, Name: "i", Type: iceberg.PrimitiveTypes.Int32},
		iceberg.NestedField{ID: 7, Name: "dec", Type: iceberg.DecimalTypeOf(10, 2)},
		iceberg.NestedField{ID: 8, Name: "f", Type: iceberg.PrimitiveTypes.Float64},
		iceberg.NestedField{ID: 9, Name: "u", Type: iceberg.PrimitiveTypes.UUID},
		iceberg.NestedField{ID: 10, Name: "bo", Type: iceberg.PrimitiveTypes.Bool},
		iceberg.NestedField{ID: 11, Name: "b", Type: iceberg.PrimitiveTypes.Binary},
		iceberg.NestedField{ID: 12, Name: "fx", Type: iceberg.FixedTypeOf(4)},
		iceberg.NestedField{ID: 13, Name: "fl", Type: iceberg.PrimitiveTypes.Float32},
		iceberg.NestedField{ID: 14, Name: "t", Type: iceberg.PrimitiveTypes.Time},
		iceberg.NestedField{ID: 15, Name: "dec30", Type: iceberg.DecimalTypeOf(30, 4)},
	)
}

// mwSpec partitions by every transform cdcd offers and identity of every
// type (one decimal: iceberg-go's writer names every decimal's Avro type
// "fixed", so two of different precisions conflict there).
func mwSpec() iceberg.PartitionSpec {
	id := 1000
	f := func(src int, name string, tr iceberg.Transform) iceberg.PartitionField {
		id++
		return iceberg.PartitionField{SourceIDs: []int{src}, FieldID: id, Name: name, Transform: tr}
	}
	return iceberg.NewPartitionSpecID(3,
		f(2, "s", iceberg.IdentityTransform{}),
		f(1, "id_bucket_8", iceberg.BucketTransform{NumBuckets: 8}),
		f(2, "s_trunc_4", iceberg.TruncateTransform{Width: 4}),
		f(1, "id_trunc_10", iceberg.TruncateTransform{Width: 10}),
		f(4, "ts_day", iceberg.DayTransform{}),
		f(5, "tstz_month", iceberg.MonthTransform{}),
		f(3, "d_year", iceberg.YearTransform{}),
		f(4, "ts_hour", iceberg.HourTransform{}),
		f(3, "d", iceberg.IdentityTransform{}),
		f(4, "ts", iceberg.IdentityTransform{}),
		f(5, "tstz", iceberg.IdentityTransform{}),
		f(6, "i", iceberg.IdentityTransform{}),
		f(7, "dec", iceberg.IdentityTransform{}),
		f(8, "f", iceberg.IdentityTransform{}),
		f(9, "u", iceberg.IdentityTransform{}),
		f(10, "bo", iceberg.IdentityTransform{}),
		f(11, "b", iceberg.IdentityTransform{}),
		f(12, "fx", iceberg.IdentityTransform{}),
		f(13, "fl", iceberg.IdentityTransform{}),
		f(14, "t", iceberg.IdentityTransform{}),
	)
}

// mwPartition is entry i's partition tuple: every field's value of the
// transform's result type, nil for some.
func mwPartition(spec iceberg.PartitionSpec, sc *iceberg.Schema, i int) map[int]any {
	out := map[int]any{}
	for _, f := range spec.PartitionType(sc).FieldList {
		if (i+f.ID)%5 == 0 {
			out[f.ID] = nil
			continue
		}
		n := int64(i*37%11) - 3
		var v any
		switch t := f.Type.(type) {
		case iceberg.Int32Type:
			v = int32(n)
		case iceberg.Int64Type:
			v = n * 1e12
		case iceberg.StringType:
			v = fmt.Sprintf("v%03d", n+10)
		case iceberg.DateType:
			v = iceberg.Date(19000 + n)
		case iceberg.TimestampType, iceberg.TimestampTzType:
			v = iceberg.Timestamp(1700000000000000 + n*3600e6)
		case iceberg.TimeType:
			v = iceberg.Time(n * 1e6)
		case iceberg.DecimalType:
			v = iceberg.Decimal{Val: decimal128.FromI64(n * 12345), Scale: t.Scale()}
		case iceberg.Float64Type:
			v = float64(n) / 4
			if i == 3 {
				v = math.NaN()
			}
		case iceberg.Float32Type:
			v = float32(n) / 2
		case iceberg.UUIDType:
			v = uuid.UUID{15: byte(n + 5), 0: byte(i)}
		case iceberg.BooleanType:
			v = n%2 == 0
		case iceberg.BinaryType:
			v = []byte{byte(n), 1, 2}
		case iceberg.FixedType:
			v = []byte{byte(n), 0, 0, byte(i)}
		}
		out[f.ID] = v
	}
	return out
}

// mwEntries is a manifest's worth of entries of every status.
func mwEntries(t *testing.T, version int, content iceberg.ManifestContent, spec iceberg.PartitionSpec, sc *iceberg.Schema, n int) []iceberg.ManifestEntry {
	t.Helper()
	var out []iceberg.ManifestEntry
	for i := range n {
		ec, format := iceberg.EntryContentData, iceberg.ParquetFile
		if content == iceberg.ManifestContentDeletes {
			ec = iceberg.EntryContentPosDeletes
			if version >= 3 && i%3 != 2 {
				format = iceberg.PuffinFile
			} else if i%3 == 2 {
				ec = iceberg.EntryContentEqDeletes
			}
		}
		b, err := iceberg.NewDataFileBuilder(spec, ec, fmt.Sprintf("s3://b/t/data/f-%d.%s", i, format), format,
			mwPartition(spec, sc, i), nil, nil, int64(100+i), int64(4096+i))
		if err != nil {
			t.Fatal(err)
		}
		if i%4 != 1 {
			b.ColumnSizes(map[int]int64{1: 10, 2: int64(20 + i), 13: 7}).
				ValueCounts(map[int]int64{1: 100, 2: 99}).
				NullValueCounts(map[int]int64{1: 0, 2: int64(i)}).
				LowerBoundValues(map[int][]byte{1: {1, 0, 0, 0, 0, 0, 0, 0}, 2: []byte("a")}).
				UpperBoundValues(map[int][]byte{1: {9, 0, 0, 0, 0, 0, 0, byte(i)}, 2: []byte("zz")})
		}
		if i%4 == 2 {
			b.NaNValueCounts(map[int]int64{8: 3}).ColumnSizes(map[int]int64{}).KeyMetadata([]byte{7, 7}).SplitOffsets([]int64{4, 1000 + int64(i)})
		}
		if ec == iceberg.EntryContentData && i%2 == 0 {
			b.SortOrderID(1)
		}
		if ec == iceberg.EntryContentEqDeletes {
			b.EqualityFieldIDs([]int{1, 2})
		}
		if version >= 3 && ec == iceberg.EntryContentData && i%3 == 0 {
			b.FirstRowID(int64(1000 * i))
		}
		if format == iceberg.PuffinFile {
			b.ReferencedDataFile(fmt.Sprintf("s3://b/t/data/d-%d.parquet", i)).ContentOffset(int64(4 + i)).ContentSizeInBytes(int64(40 + i))
		} else if ec == iceberg.EntryContentPosDeletes && i%2 == 0 {
			b.ReferencedDataFile(fmt.Sprintf("s3://b/t/data/d-%d.parquet", i))
		}
		df := b.Build()
		snap, seq, fseq := int64(11), int64(3+i%2), int64(2+i%2)
		switch i % 3 {
		case 0:
			out = append(out, iceberg.NewManifestEntry(iceberg.EntryStatusADDED, &snap, nil, nil, df))
		case 1:
			old := int64(5)
			out = append(out, iceberg.NewManifestEntry(iceberg.EntryStatusEXISTING, &old, &seq, &fseq, df))
		case 2: // older than the others: not the manifest's min_sequence_number
			dseq := int64(1)
			out = append(out, iceberg.NewManifestEntry(iceberg.EntryStatusDELETED, &snap, &dseq, &dseq, df))
		}
	}
	return out
}

// writeBoth writes entries with iceberg-go's writer and with cdcd's.
func writeBoth(t testing.TB, version int, content iceberg.ManifestContent, spec iceberg.PartitionSpec, sc *iceberg.Schema, entries []iceberg.ManifestEntry, layouts *manifestLayouts) (theirs, ours []byte, mfTheirs, mfOurs iceberg.ManifestFile) {
	t.Helper()
	const snapID = 11
	var tb bytes.Buffer
	mw, err := iceberg.NewManifestWriter(version, &tb, spec, sc, snapID, iceberg.WithManifestWriterContent(content))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Status() {
		case iceberg.EntryStatusADDED:
			err = mw.Add(e)
		case iceberg.EntryStatusEXISTING:
			err = mw.Existing(e)
		default:
			err = mw.Delete(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if mfTheirs, err = mw.ToManifestFile("theirs.avro", int64(tb.Len())); err != nil {
		t.Fatal(err)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := layouts.get(uuid.UUID{1}, version, content, spec, sc)
	if err != nil {
		t.Fatal(err)
	}
	var ob bytes.Buffer
	cw := &countingWriter{w: &ob}
	w, err := newManifestWriter(l, cw, snapID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Status() {
		case iceberg.EntryStatusADDED:
			err = w.add(e)
		case iceberg.EntryStatusEXISTING:
			err = w.existing(e)
		default:
			err = w.delete(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	if mfOurs, err = w.manifestFile("ours.avro", cw.n); err != nil {
		t.Fatal(err)
	}
	return tb.Bytes(), ob.Bytes(), mfTheirs, mfOurs
}

// entryFields is every field of a manifest entry as iceberg-go reads it.
type entryFields struct {
	Status                     iceberg.ManifestEntryStatus
	Snapshot, Seq              int64
	FileSeq                    *int64
	Content                    iceberg.ManifestEntryContent
	Path                       string
	Format                     iceberg.FileFormat
	Partition                  map[int]any
	Count, Size                int64
	ColSizes, Values, Nulls    map[int]int64
	NaNs                       map[int]int64
	Lower, Upper               map[int][]byte
	Key                        []byte
	Splits                     []int64
	EqIDs                      []int
	SortOrder                  *int
	FirstRowID                 *int64
	Ref                        *string
	ContentOffset, ContentSize *int64
	SpecID                     int32
}

func fieldsOf(e iceberg.ManifestEntry) entryFields {
	df := e.DataFile()
	part := df.Partition()
	for k, v := range part {
		if f, ok := v.(float64); ok && math.IsNaN(f) {
			part[k] = "NaN" // NaN != NaN for DeepEqual
		}
	}
	return entryFields{
		Status: e.Status(), Snapshot: e.SnapshotID(), Seq: e.SequenceNum(), FileSeq: e.FileSequenceNum(),
		Content: df.ContentType(), Path: df.FilePath(), Format: df.FileFormat(), Partition: part,
		Count: df.Count(), Size: df.FileSizeBytes(),
		ColSizes: df.ColumnSizes(), Values: df.ValueCounts(), Nulls: df.NullValueCounts(), NaNs: df.NaNValueCounts(),
		Lower: df.LowerBoundValues(), Upper: df.UpperBoundValues(), Key: df.KeyMetadata(), Splits: df.SplitOffsets(),
		EqIDs: df.EqualityFieldIDs(), SortOrder: df.SortOrderID(), FirstRowID: df.FirstRowID(),
		Ref: df.ReferencedDataFile(), ContentOffset: df.ContentOffset(), ContentSize: df.ContentSizeInBytes(),
		SpecID: df.SpecID(),
	}
}

// listFields is every field of a ManifestFile but its path and length.
type listFields struct {
	Version                 int
	SpecID                  int32
	Content                 iceberg.ManifestContent
	Seq, MinSeq, Snapshot   int64
	Added, Existing, Delete int32
	AddedR, ExistingR, DelR int64
	Partitions              []iceberg.FieldSummary
	FirstRowID              *int64
	Key                     []byte
}

func listFieldsOf(m iceberg.ManifestFile) listFields {
	return listFields{
		Version: m.Version(), SpecID: m.PartitionSpecID(), Content: m.ManifestContent(),
		Seq: m.SequenceNum(), MinSeq: m.MinSequenceNum(), Snapshot: m.SnapshotID(),
		Added: m.AddedDataFiles(), Existing: m.ExistingDataFiles(), Delete: m.DeletedDataFiles(),
		AddedR: m.AddedRows(), ExistingR: m.ExistingRows(), DelR: m.DeletedRows(),
		Partitions: m.Partitions(), FirstRowID: m.FirstRowID(), Key: m.KeyMetadata(),
	}
}

func readEntries(t *testing.T, mf iceberg.ManifestFile, b []byte) []entryFields {
	t.Helper()
	es, err := iceberg.ReadManifest(mf, bytes.NewReader(b), false)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]entryFields, len(es))
	for i, e := range es {
		out[i] = fieldsOf(e)
	}
	return out
}

func TestManifestWriterMatchesIcebergGo(t *testing.T) {
	sc := mwSchema()
	specs := map[string]iceberg.PartitionSpec{"unpartitioned": *iceberg.UnpartitionedSpec, "partitioned": mwSpec()}
	var layouts manifestLayouts
	for _, version := range []int{2, 3} {
		for sname, spec := range specs {
			for _, content := range []iceberg.ManifestContent{iceberg.ManifestContentData, iceberg.ManifestContentDeletes} {
				for _, n := range []int{1, 12, 3000} {
					t.Run(fmt.Sprintf("v%d/%s/%s/%d", version, sname, content, n), func(t *testing.T) {
						entries := mwEntries(t, version, content, spec, sc, n)
						theirs, ours, mfT, mfO := writeBoth(t, version, content, spec, sc, entries, &layouts)
						if mfO.Length() != int64(len(ours)) || mfO.FilePath() != "ours.avro" {
							t.Fatalf("manifest file says %s of %d bytes, wrote %d", mfO.FilePath(), mfO.Length(), len(ours))
						}
						if got, want := listFieldsOf(mfO), listFieldsOf(mfT); !reflect.DeepEqual(got, want) {
							t.Fatalf("manifest file:\n got %+v\nwant %+v", got, want)
						}
						got, want := readEntries(t, mfO, ours), readEntries(t, mfT, theirs)
						if len(got) != len(want) || len(got) != n {
							t.Fatalf("%d entries read back, iceberg-go's %d, wrote %d", len(got), len(want), n)
						}
						for i := range got {
							if !reflect.DeepEqual(got[i], want[i]) {
								t.Fatalf("entry %d:\n got %+v\nwant %+v", i, got[i], want[i])
							}
						}
						// The file's metadata: the same keys and values, no codec.
						hT, err := parseOCFHeader(theirs)
						if err != nil {
							t.Fatal(err)
						}
						hO, err := parseOCFHeader(ours)
						if err != nil {
							t.Fatal(err)
						}
						wantMeta := map[string]string{}
						for _, kv := range hT {
							if kv[0] != "avro.codec" {
								wantMeta[kv[0]] = kv[1]
							}
						}
						gotMeta := map[string]string{}
						for _, kv := range hO {
							gotMeta[kv[0]] = kv[1]
						}
						if len(wantMeta) != 7 || !reflect.DeepEqual(gotMeta, wantMeta) {
							t.Fatalf("header metadata: %d keys, iceberg-go's %d (codec dropped), or a value differs", len(gotMeta), len(wantMeta))
						}
						r, err := iceberg.NewManifestReader(mfO, bytes.NewReader(ours))
						if err != nil {
							t.Fatal(err)
						}
						if sid, _ := r.SchemaID(); sid != sc.ID || r.Version() != version || r.ManifestContent() != content {
							t.Fatalf("reader: schema id %d, version %d, content %s", sid, r.Version(), r.ManifestContent())
						}
						if ps, err := r.PartitionSpec(); err != nil || !ps.Equals(spec) {
							t.Fatalf("reader: partition spec %v, %v", ps, err)
						}
						// Both in a manifest list: the same entries read back
						// (first_row_id assigned alike).
						var lt, lo bytes.Buffer
						if err := iceberg.WriteManifestList(version, &lt, 11, nil, ptr(int64(9)), 500, []iceberg.ManifestFile{mfT, mfT}); err != nil {
							t.Fatal(err)
						}
						if err := iceberg.WriteManifestList(version, &lo, 11, nil, ptr(int64(9)), 500, []iceberg.ManifestFile{mfO, mfO}); err != nil {
							t.Fatal(err)
						}
						rt, err := iceberg.ReadManifestList(&lt)
						if err != nil {
							t.Fatal(err)
						}
						ro, err := iceberg.ReadManifestList(&lo)
						if err != nil {
							t.Fatal(err)
						}
						for i := range rt {
							if got, want := listFieldsOf(ro[i]), listFieldsOf(rt[i]); !reflect.DeepEqual(got, want) {
								t.Fatalf("manifest list entry %d:\n got %+v\nwant %+v", i, got, want)
							}
						}
					})
				}
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestManifestWriterRejects holds the writer to iceberg-go's refusals.
func TestManifestWriterRejects(t *testing.T) {
	sc := mwSchema()
	var layouts manifestLayouts
	l, err := layouts.get(uuid.UUID{2}, 3, iceberg.ManifestContentData, *iceberg.UnpartitionedSpec, sc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := newManifestWriter(l, &bytes.Buffer{}, 11)
	if err != nil {
		t.Fatal(err)
	}
	del := mwEntries(t, 3, iceberg.ManifestContentDeletes, *iceberg.UnpartitionedSpec, sc, 1)[0]
	if err := w.add(del); err == nil {
		t.Fatal("a delete file went into a data manifest")
	}
	data := mwEntries(t, 3, iceberg.ManifestContentData, *iceberg.UnpartitionedSpec, sc, 1)[0]
	if err := w.existing(iceberg.NewManifestEntry(iceberg.EntryStatusEXISTING, ptr(int64(5)), nil, nil, data.DataFile())); err == nil {
		t.Fatal("an EXISTING entry without a sequence number was written")
	}
	if err := w.close(); err != iceberg.ErrEmptyManifest {
		t.Fatalf("empty manifest: %v", err)
	}
	// Layouts are cached per key.
	l2, _ := layouts.get(uuid.UUID{2}, 3, iceberg.ManifestContentData, *iceberg.UnpartitionedSpec, sc)
	l3, _ := layouts.get(uuid.UUID{3}, 3, iceberg.ManifestContentData, *iceberg.UnpartitionedSpec, sc)
	if l2 != l || l3 == l {
		t.Fatal("layout cache keyed wrongly")
	}
}

func BenchmarkManifestWrite(b *testing.B) {
	sc := mwSchema()
	spec := *iceberg.UnpartitionedSpec
	for _, n := range []int{1, 50} {
		t := &testing.T{}
		entries := mwEntries(t, 3, iceberg.ManifestContentData, spec, sc, n)
		for i, e := range entries { // all ADDED, as a commit's
			entries[i] = iceberg.NewManifestEntry(iceberg.EntryStatusADDED, ptr(int64(11)), nil, nil, e.DataFile())
		}
		b.Run(fmt.Sprintf("iceberg-go/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				mw, err := iceberg.NewManifestWriter(3, &buf, spec, sc, 11)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range entries {
					if err := mw.Add(e); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := mw.ToManifestFile("m.avro", int64(buf.Len())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/manifest")
		})
		b.Run(fmt.Sprintf("cdcd/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var layouts manifestLayouts
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				l, err := layouts.get(uuid.UUID{1}, 3, iceberg.ManifestContentData, spec, sc)
				if err != nil {
					b.Fatal(err)
				}
				w, err := newManifestWriter(l, &buf, 11)
				if err != nil {
					b.Fatal(err)
				}
				for _, e := range entries {
					if err := w.add(e); err != nil {
						b.Fatal(err)
					}
				}
				if err := w.close(); err != nil {
					b.Fatal(err)
				}
				if _, err := w.manifestFile("m.avro", int64(buf.Len())); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/manifest")
		})
	}
}

// TestManifestListMatchesIcebergGo writes lists of new manifests (sequence
// numbers and v3 row ids unassigned) and of manifests read back from a list
// (assigned), with iceberg-go's list writer and with cdcd's, and compares
// every field read back, the file metadata and the next row id.
func TestManifestListMatchesIcebergGo(t *testing.T) {
	sc := mwSchema()
	var layouts manifestLayouts
	for _, version := range []int{2, 3} {
		t.Run(fmt.Sprintf("v%d", version), func(t *testing.T) {
			var fresh []iceberg.ManifestFile
			for _, spec := range []iceberg.PartitionSpec{*iceberg.UnpartitionedSpec, mwSpec()} {
				for _, content := range []iceberg.ManifestContent{iceberg.ManifestContentData, iceberg.ManifestContentDeletes} {
					_, _, _, mf := writeBoth(t, version, content, spec, sc, mwEntries(t, version, content, spec, sc, 7), &layouts)
					fresh = append(fresh, mf)
				}
			}
			// An older snapshot's manifests, as a later commit reuses them.
			var old bytes.Buffer
			if err := iceberg.WriteManifestList(version, &old, 11, nil, ptr(int64(4)), 100, fresh); err != nil {
				t.Fatal(err)
			}
			reused, err := iceberg.ReadManifestList(&old)
			if err != nil {
				t.Fatal(err)
			}
			for _, list := range [][]iceberg.ManifestFile{fresh, append(reused, fresh...)} {
				parent := int64(10)
				var theirs, ours bytes.Buffer
				var lw *iceberg.ManifestListWriter
				if version == 2 {
					lw, err = iceberg.NewManifestListWriterV2(&theirs, 11, 9, &parent)
				} else {
					lw, err = iceberg.NewManifestListWriterV3(&theirs, 11, 9, 500, &parent)
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := lw.AddManifests(list); err != nil {
					t.Fatal(err)
				}
				if err := lw.Close(); err != nil {
					t.Fatal(err)
				}
				first := int64(0)
				if version == 3 {
					first = 500
				}
				next, err := layouts.writeList(&ours, version, 11, 9, first, &parent, list)
				if err != nil {
					t.Fatal(err)
				}
				if version == 3 && next != *lw.NextRowID() || version == 2 && next != first {
					t.Fatalf("next row id %d, iceberg-go's %v", next, lw.NextRowID() != nil && *lw.NextRowID() == next)
				}
				hT, err := parseOCFHeader(theirs.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				hO, err := parseOCFHeader(ours.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				wantMeta, gotMeta := map[string]string{}, map[string]string{}
				for _, kv := range hT {
					if kv[0] != "avro.codec" {
						wantMeta[kv[0]] = kv[1]
					}
				}
				for _, kv := range hO {
					gotMeta[kv[0]] = kv[1]
				}
				if !reflect.DeepEqual(gotMeta, wantMeta) {
					t.Fatalf("list metadata:\n got %.300q\nwant %.300q", gotMeta, wantMeta)
				}
				rt, err := iceberg.ReadManifestList(&theirs)
				if err != nil {
					t.Fatal(err)
				}
				ro, err := iceberg.ReadManifestList(&ours)
				if err != nil {
					t.Fatal(err)
				}
				if len(ro) != len(rt) || len(ro) != len(list) {
					t.Fatalf("%d manifests read back, iceberg-go's %d, wrote %d", len(ro), len(rt), len(list))
				}
				for i := range rt {
					got, want := listFieldsOf(ro[i]), listFieldsOf(rt[i])
					if !reflect.DeepEqual(got, want) || ro[i].FilePath() != rt[i].FilePath() || ro[i].Length() != rt[i].Length() {
						t.Fatalf("manifest %d:\n got %+v\nwant %+v", i, got, want)
					}
				}
			}
		})
	}
}

func BenchmarkManifestListWrite(b *testing.B) {
	sc := mwSchema()
	var layouts manifestLayouts
	t := &testing.T{}
	var one []iceberg.ManifestFile
	for _, content := range []iceberg.ManifestContent{iceberg.ManifestContentData, iceberg.ManifestContentDeletes} {
		_, _, _, mf := writeBoth(t, 3, content, *iceberg.UnpartitionedSpec, sc, mwEntries(t, 3, content, *iceberg.UnpartitionedSpec, sc, 3), &layouts)
		one = append(one, mf)
	}
	for _, n := range []int{2, 200} {
		var list []iceberg.ManifestFile
		for len(list) < n {
			list = append(list, one...)
		}
		b.Run(fmt.Sprintf("iceberg-go/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				lw, err := iceberg.NewManifestListWriterV3(&buf, 11, 9, 500, ptr(int64(10)))
				if err != nil {
					b.Fatal(err)
				}
				if err := lw.AddManifests(list); err != nil {
					b.Fatal(err)
				}
				if err := lw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/list")
		})
		b.Run(fmt.Sprintf("cdcd/%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				if _, err := layouts.writeList(&buf, 3, 11, 9, 500, ptr(int64(10)), list); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(buf.Len()), "bytes/list")
		})
	}
}
