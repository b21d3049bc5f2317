package iceberg

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

func testCatalog(t testing.TB) catalog.Catalog {
	t.Helper()
	dir := t.TempDir()
	cat, err := OpenCatalog(t.Context(), CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Name: "test", Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.(interface{ Close() error }).Close() })
	return cat
}

// testLogs holds each test's log.
var testLogs sync.Map

// bufferFedLog is the log of tests that fill a writer's buffer directly:
// its partitions claim to hold every offset the table may have read.
type bufferFedLog struct{ log.Log }

func (l bufferFedLog) DescribeTopic(ctx context.Context, name string) (log.TopicInfo, error) {
	info, err := l.Log.DescribeTopic(ctx, name)
	for i := range info.Partitions {
		info.Partitions[i].End = 1 << 62
	}
	return info, err
}

// newWriter returns a table writer over cat with n partitions; the tests
// fill its buffer directly (the log only receives consumer offsets).
// The writers of one test share a log, as a restarted sink does.
func newWriter(t testing.TB, cat catalog.Catalog, pipeline string, n int) *tableWriter {
	var lg *log.Embedded
	if v, ok := testLogs.Load(t); ok {
		lg = v.(*log.Embedded)
	} else {
		var err error
		if lg, err = log.Open(t.TempDir(), log.Options{}, nil); err != nil {
			t.Fatal(err)
		}
		testLogs.Store(t, lg)
		t.Cleanup(func() { testLogs.Delete(t); lg.Close() })
		if err := lg.CreateTopic(t.Context(), "t", log.TopicConfig{Partitions: int32(n)}); err != nil {
			t.Fatal(err)
		}
	}
	s := &Sink{cfg: Config{Pipeline: pipeline, FormatVersion: 3, Group: "g", CommitBudget: time.Minute, RetryInterval: time.Minute},
		cat: cat, lg: bufferFedLog{lg}, logger: slog.New(slog.DiscardHandler)}
	s.cfg.Maintenance = s.cfg.Maintenance.WithDefaults()
	return &tableWriter{
		s: s, cfg: TableConfig{Topic: "t", Ident: table.Identifier{"ns", "tbl"}}, stats: &TableStats{},
		logger: s.logger, partitions: n, next: make([]int64, n), committed: make([]int64, n),
	}
}

var everyKind = &schema.Table{Namespace: "public", Name: "kinds", Columns: []schema.Column{
	{Name: "id", Kind: schema.Int64},
	{Name: "b", Kind: schema.Bool, Nullable: true},
	{Name: "i2", Kind: schema.Int16, Nullable: true},
	{Name: "i4", Kind: schema.Int32, Nullable: true},
	{Name: "f4", Kind: schema.Float32, Nullable: true},
	{Name: "f8", Kind: schema.Float64, Nullable: true},
	{Name: "dec", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true},
	{Name: "free", Kind: schema.Decimal, Nullable: true},
	{Name: "s", Kind: schema.String, Nullable: true},
	{Name: "raw", Kind: schema.Bytes, Nullable: true},
	{Name: "doc", Kind: schema.JSON, Nullable: true},
	{Name: "u", Kind: schema.UUID, Nullable: true},
	{Name: "d", Kind: schema.Date, Nullable: true},
	{Name: "t", Kind: schema.Time, Nullable: true},
	{Name: "ts", Kind: schema.Timestamp, Nullable: true},
	{Name: "tstz", Kind: schema.TimestampTZ, Nullable: true},
}, Key: []int{0}}

func TestCommitEveryKindReadsBack(t *testing.T) {
	cat := testCatalog(t)
	w := newWriter(t, cat, "p", 2)
	row := []any{int64(7), true, int64(-3), int64(1 << 30), float32(2.5), -0.125, "-12345.67", "NaN", "hé", []byte{0, 255},
		`{"a":1}`, [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, int32(19000), int64(3_600_000_000),
		int64(1_700_000_000_123_456), int64(1_700_000_000_654_321)}
	unchanged := append([]any(nil), row...)
	unchanged[8] = schema.Unchanged
	w.buf = []change{
		{table: everyKind, env: &schema.Envelope{After: row, Op: 'c', Source: schema.SourceInfo{LSN: 100, TxID: 5, TsMs: 1_700_000_000_000}}, partition: 1, offset: 0},
		{table: everyKind, env: &schema.Envelope{Before: []any{int64(7), nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil},
			After: unchanged, Op: 'u', Source: schema.SourceInfo{LSN: 200}}, partition: 1, offset: 1},
	}
	w.next[1] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(t.Context(), w.cfg.Ident)
	if err != nil {
		t.Fatal(err)
	}
	if got := tbl.CurrentSnapshot().Summary.Properties[PropOffsets]; got != `{"0":0,"1":2}` {
		t.Errorf("offsets %s", got)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	if at.NumRows() != 2 {
		t.Fatalf("%d rows", at.NumRows())
	}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	tr.Next()
	rec := tr.RecordBatch()
	get := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
	checks := map[string]string{
		"id": "7", "b": "true", "i2": "-3", "i4": "1073741824", "f4": "2.5", "f8": "-0.125", "free": "NaN", "s": "hé",
		"doc": `{"a":1}`, "_cdc_op": "c", "_cdc_lsn": "100", "_cdc_tx_id": "5", "_cdc_partition": "1", "_cdc_offset": "0",
	}
	for name, want := range checks {
		if got := get(name).ValueStr(0); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := get("dec").(*array.Decimal128).Value(0).ToString(2); got != "-12345.67" {
		t.Errorf("dec = %s", got)
	}
	if got := get("u").(*extensions.UUIDArray).Value(0); got.String() != "01020304-0506-0708-090a-0b0c0d0e0f10" {
		t.Errorf("uuid = %s", got)
	}
	if got := int64(get("tstz").(*array.Timestamp).Value(0)); got != 1_700_000_000_654_321 {
		t.Errorf("tstz = %d", got)
	}
	if got := int32(get("d").(*array.Date32).Value(0)); got != 19000 {
		t.Errorf("date = %d", got)
	}
	// The update's unchanged column is null and named.
	if !get("s").IsNull(1) || get("_cdc_unchanged").ValueStr(1) != `["s"]` || !get("_cdc_unchanged").IsNull(0) {
		t.Errorf("unchanged: s null=%t, _cdc_unchanged=%q/%q", get("s").IsNull(1), get("_cdc_unchanged").ValueStr(1), get("_cdc_unchanged").ValueStr(0))
	}
}

func TestOffsetsResumeAndOwnership(t *testing.T) {
	cat := testCatalog(t)
	w := newWriter(t, cat, "p", 3)
	tbl := &schema.Table{Namespace: "public", Name: "x", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}}, Key: []int{0}}
	w.buf = []change{{table: tbl, env: &schema.Envelope{After: []any{int64(1)}, Op: 'c'}, partition: 2, offset: 4}}
	w.next = []int64{0, 0, 5}
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A maintenance-style commit without offsets must not hide them.
	loaded, err := cat.LoadTable(t.Context(), w.cfg.Ident)
	if err != nil {
		t.Fatal(err)
	}
	tx := loaded.NewTransaction()
	if err := tx.AddFiles(t.Context(), nil, nil, false); err != nil {
		t.Fatal(err)
	}
	if loaded, err = tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	next, snap, err := committedOffsets(loaded, "p", 3)
	if err != nil || snap == nil || next[2] != 5 {
		t.Fatalf("offsets %v from %v: %v", next, snap, err)
	}
	if snap.SnapshotID == loaded.CurrentSnapshot().SnapshotID {
		t.Fatal("walked to the snapshot without offsets")
	}
	// Resuming loads them.
	w2 := newWriter(t, cat, "p", 3)
	if w2.tbl, err = cat.LoadTable(t.Context(), w2.cfg.Ident); err != nil {
		t.Fatal(err)
	}
	if w2.committed, _, err = committedOffsets(w2.tbl, "p", 3); err != nil || w2.committed[2] != 5 {
		t.Fatalf("resume offsets %v %v", w2.committed, err)
	}
	// Another pipeline is refused, by name.
	if _, _, err := committedOffsets(loaded, "other", 3); err == nil || !strings.Contains(err.Error(), `pipeline "p"`) {
		t.Fatalf("other pipeline: %v", err)
	}
	// A commit id that landed is found; an unknown one is not.
	id := loaded.Metadata().Snapshots()[0].Summary.Properties[PropCommitID]
	if !hasCommit(loaded, id) || hasCommit(loaded, "nope") {
		t.Fatal("hasCommit")
	}
}

func TestEvolveAddsColumnsAndRefusesTypeChanges(t *testing.T) {
	cat := testCatalog(t)
	w := newWriter(t, cat, "p", 1)
	v1 := &schema.Table{Namespace: "public", Name: "x", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}, {Name: "n", Kind: schema.Int32, Nullable: true}}, Key: []int{0}}
	v2 := &schema.Table{Namespace: "public", Name: "x", Columns: append(append([]schema.Column(nil), v1.Columns...), schema.Column{Name: "note", Kind: schema.String, Nullable: true}), Key: []int{0}}
	w.buf = []change{{table: v1, env: &schema.Envelope{After: []any{int64(1), int64(2)}, Op: 'c'}, offset: 0}}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{{table: v2, env: &schema.Envelope{After: []any{int64(2), nil, "hi"}, Op: 'c'}, offset: 1}}
	w.next[0] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.tbl.Schema().FindFieldByName("note"); !ok {
		t.Fatal("note was not added")
	}
	// Rows of the old version still write (the new column is null).
	w.buf = []change{{table: v1, env: &schema.Envelope{After: []any{int64(3), int64(4)}, Op: 'c'}, offset: 2}}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	v3 := &schema.Table{Namespace: "public", Name: "x", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}, {Name: "n", Kind: schema.String, SourceType: "text"}}, Key: []int{0}}
	w.buf = []change{{table: v3, env: &schema.Envelope{After: []any{int64(5), "five"}, Op: 'c'}, offset: 3}}
	w.next[0] = 4
	err := w.evolve(context.Background())
	if err == nil || !strings.Contains(err.Error(), `column "n" of public.x changed type`) {
		t.Fatalf("type change: %v", err)
	}
}

func TestEvolveWidensTypes(t *testing.T) {
	cat := testCatalog(t)
	w := newWriter(t, cat, "p", 1)
	v1 := &schema.Table{Namespace: "public", Name: "w", Columns: []schema.Column{{Name: "id", Kind: schema.Int64},
		{Name: "n", Kind: schema.Int32, Nullable: true}, {Name: "d", Kind: schema.Decimal, Precision: 10, Scale: 2, Nullable: true}}, Key: []int{0}}
	v2 := &schema.Table{Namespace: "public", Name: "w", Columns: []schema.Column{{Name: "id", Kind: schema.Int64},
		{Name: "n", Kind: schema.Int64, Nullable: true}, {Name: "d", Kind: schema.Decimal, Precision: 20, Scale: 2, Nullable: true}}, Key: []int{0}}
	w.buf = []change{{table: v1, env: &schema.Envelope{After: []any{int64(1), int64(2), "3.25"}, Op: 'c'}, offset: 0}}
	w.next[0] = 1
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.buf = []change{{table: v2, env: &schema.Envelope{After: []any{int64(2), int64(1) << 40, "123456789012345678.99"}, Op: 'c'}, offset: 1}}
	w.next[0] = 2
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	n, _ := w.tbl.Schema().FindFieldByName("n")
	d, _ := w.tbl.Schema().FindFieldByName("d")
	if !n.Type.Equals(iceberg.PrimitiveTypes.Int64) || !d.Type.Equals(iceberg.DecimalTypeOf(20, 2)) {
		t.Fatalf("types after widening: n %s, d %s", n.Type, d.Type)
	}
	// A narrower version still writes into the wider columns.
	w.buf = []change{{table: v1, env: &schema.Envelope{After: []any{int64(3), int64(7), "1.00"}, Op: 'c'}, offset: 2}}
	w.next[0] = 3
	if err := w.commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	at, err := w.tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	if at.NumRows() != 3 {
		t.Fatalf("%d rows", at.NumRows())
	}
}

// TestEvolveListColumns: a table with an array column takes new table
// versions (the list's element id is the catalog's, not the one a type
// built from the table model has) and a new array column, in both modes.
func TestEvolveListColumns(t *testing.T) {
	for _, mode := range []string{ModeAppend, ModeUpsert} {
		t.Run(mode, func(t *testing.T) {
			cat := testCatalog(t)
			w := newWriter(t, cat, "p", 1)
			w.s.cfg.Mode, w.s.cfg.IndexDir = mode, t.TempDir()
			ints := schema.Column{Name: "ints", Kind: schema.List, Nullable: true, SourceType: "integer[]", Elem: &schema.Column{Kind: schema.Int32, Nullable: true}}
			v1 := &schema.Table{Namespace: "public", Name: "l", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}, ints}, Key: []int{0}}
			v2 := &schema.Table{Namespace: "public", Name: "l", Columns: append(append([]schema.Column(nil), v1.Columns...),
				schema.Column{Name: "n", Kind: schema.Int32, Nullable: true},
				schema.Column{Name: "tags", Kind: schema.List, Nullable: true, SourceType: "text[]", Elem: &schema.Column{Kind: schema.String, Nullable: true}}), Key: []int{0}}
			w.buf = []change{{table: v1, env: &schema.Envelope{After: []any{int64(1), []any{int64(1), nil}}, Op: 'c', Source: schema.SourceInfo{Position: []byte{0}}}, offset: 0}}
			w.next[0] = 1
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.buf = []change{{table: v2, env: &schema.Envelope{After: []any{int64(2), []any{}, int64(5), []any{"a", nil}}, Op: 'c', Source: schema.SourceInfo{Position: []byte{1}}}, offset: 1}}
			w.next[0] = 2
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"n", "tags"} {
				if _, ok := w.tbl.Schema().FindFieldByName(name); !ok {
					t.Fatalf("%s was not added", name)
				}
			}
			// A third version with the same columns: still no type change.
			v3 := &schema.Table{Namespace: v2.Namespace, Name: v2.Name, Columns: v2.Columns, Key: v2.Key}
			w.buf = []change{{table: v3, env: &schema.Envelope{After: []any{int64(3), nil, nil, []any{"b"}}, Op: 'c', Source: schema.SourceInfo{Position: []byte{2}}}, offset: 2}}
			w.next[0] = 3
			if err := w.commit(t.Context()); err != nil {
				t.Fatal(err)
			}
			at, err := w.tbl.Scan().ToArrowTable(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer at.Release()
			if at.NumRows() != 3 {
				t.Fatalf("%d rows", at.NumRows())
			}
		})
	}
}
