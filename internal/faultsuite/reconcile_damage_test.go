package faultsuite

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	iceberggo "github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/reconcile"
)

// Damage to a mirror and to a source behind the pipeline's back, each of
// the kinds issue 21 names, for the reconcile to find.

// ledgerDDL is the damaged tables' shape.
const ledgerDDL = `CREATE TABLE %[1]s (id int PRIMARY KEY, owner text, balance numeric(12,2), at timestamptz);
	INSERT INTO %[1]s SELECT g, 'o' || g, g * 1.25, '2024-01-01'::timestamptz + g * interval '1 minute' FROM generate_series(1, %[2]d) g;`

// damageDV deletes rows of the mirror through a deletion vector (a
// merge-on-read delete; the daemon is stopped).
func (p *pipeline) damageDV(sourceTable string, ids ...int32) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl := p.icebergTable(cat, sourceTable)
	tx := tbl.NewTransaction()
	if err := tx.SetProperties(iceberggo.Properties{table.WriteDeleteModeKey: table.WriteModeMergeOnRead}); err != nil {
		p.t.Fatal(err)
	}
	tbl, err := tx.Commit(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	tx = tbl.NewTransaction()
	if err := tx.Delete(p.ctx, idFilter(ids), nil); err != nil {
		p.t.Fatalf("damage: delete through a deletion vector: %v", err)
	}
	if tbl, err = tx.Commit(p.ctx); err != nil {
		p.t.Fatal(err)
	}
	if s := tbl.CurrentSnapshot(); s == nil || s.Summary == nil || s.Summary.Properties["added-position-deletes"] == "" && s.Summary.Properties["added-dvs"] == "" {
		p.t.Fatalf("damage: the delete wrote no deletion vector: %+v", s.Summary)
	}
}

func idFilter(ids []int32) iceberggo.BooleanExpression {
	var in []iceberggo.BooleanExpression
	for _, k := range ids {
		in = append(in, iceberggo.EqualTo(iceberggo.Reference("id"), k))
	}
	if len(in) == 1 {
		return in[0]
	}
	return iceberggo.NewOr(in[0], in[1], in[2:]...)
}

// damageRewrite rewrites the data file holding row id with column col of
// that row set to value (a copy-on-write overwrite): a string, float32 or
// float64, as the column's type is.
func (p *pipeline) damageRewrite(sourceTable string, id int32, col string, value any) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl := p.icebergTable(cat, sourceTable)
	scan := tbl.Scan(table.WithRowFilter(idFilter([]int32{id})))
	at, err := scan.ToArrowTable(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer at.Release()
	if at.NumRows() != 1 {
		p.t.Fatalf("damage: %d rows with id %d", at.NumRows(), id)
	}
	rec := rebuild(p.t, at, func(name string, b array.Builder, old arrow.Array) bool {
		if name != col {
			return false
		}
		switch v := value.(type) {
		case string:
			b.(*array.StringBuilder).Append(v)
		case float32:
			b.(*array.Float32Builder).Append(v)
		case float64:
			b.(*array.Float64Builder).Append(v)
		default:
			p.t.Fatalf("damage: a %T value", value)
		}
		return true
	})
	defer rec.Release()
	p.commitOverwrite(tbl, rec, idFilter([]int32{id}))
}

// damageAppend adds a row with key id (other columns NULL but owner).
func (p *pipeline) damageAppend(sourceTable string, id int32, owner string) {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl := p.icebergTable(cat, sourceTable)
	sc, err := table.SchemaToArrowSchema(tbl.Schema(), nil, true, false)
	if err != nil {
		p.t.Fatal(err)
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, f := range sc.Fields() {
		switch f.Name {
		case "id":
			b.Field(i).(*array.Int32Builder).Append(id)
		case "owner":
			b.Field(i).(*array.StringBuilder).Append(owner)
		default:
			b.Field(i).AppendNull()
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	rdr, err := array.NewRecordReader(sc, []arrow.RecordBatch{rec})
	if err != nil {
		p.t.Fatal(err)
	}
	defer rdr.Release()
	tx := tbl.NewTransaction()
	if err := tx.Append(p.ctx, rdr, nil); err != nil {
		p.t.Fatalf("damage: append: %v", err)
	}
	if _, err := tx.Commit(p.ctx); err != nil {
		p.t.Fatal(err)
	}
}

// rebuild copies the one row of at, letting set write a column instead.
func rebuild(t *testing.T, at arrow.Table, set func(name string, b array.Builder, old arrow.Array) bool) arrow.RecordBatch {
	t.Helper()
	sc := at.Schema()
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i, f := range sc.Fields() {
		old := at.Column(i).Data().Chunk(0)
		if set(f.Name, b.Field(i), old) {
			continue
		}
		if old.IsNull(0) {
			b.Field(i).AppendNull()
			continue
		}
		if err := b.Field(i).AppendValueFromString(old.ValueStr(0)); err != nil {
			t.Fatalf("damage: copy %s: %v", f.Name, err)
		}
	}
	return b.NewRecordBatch()
}

func (p *pipeline) commitOverwrite(tbl *table.Table, rec arrow.RecordBatch, filter iceberggo.BooleanExpression) {
	p.t.Helper()
	rdr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		p.t.Fatal(err)
	}
	defer rdr.Release()
	tx := tbl.NewTransaction()
	if err := tx.Overwrite(p.ctx, rdr, nil, table.WithOverwriteFilter(filter)); err != nil {
		p.t.Fatalf("damage: overwrite: %v", err)
	}
	if _, err := tx.Commit(p.ctx); err != nil {
		p.t.Fatal(err)
	}
}

// bypass runs statements at the source without the pipeline seeing them:
// in one transaction, the publication stops publishing every operation,
// the statements run, and it publishes them again. Logical decoding reads
// the publication as of each change, so the changes are never sent; and
// no one sees the publication changed.
func (p *pipeline) bypass(stmts ...string) {
	p.t.Helper()
	pub := p.Names.Publication
	sql := fmt.Sprintf("BEGIN; ALTER PUBLICATION %s SET (publish = '');", pub)
	for _, s := range stmts {
		sql += s + ";"
	}
	sql += fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'); COMMIT;", pub)
	p.exec(sql)
}

// keyIDs lists the id column of keys, sorted.
func keyIDs(t *testing.T, keys []reconcile.KeyDiff) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.Key["id"])
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) < len(out[j]) || len(out[i]) == len(out[j]) && out[i] < out[j] })
	return out
}

// requireFound requires a report to list exactly these keys, and the
// differing ones with exactly these columns.
func requireFound(t *testing.T, r *reconcile.TableReport, missing, extra []string, differ map[string][]string) {
	t.Helper()
	if r == nil {
		t.Fatal("no report")
	}
	if got := keyIDs(t, r.Missing); !slices.Equal(got, missing) || r.MissingCount != len(missing) {
		t.Errorf("missing in Iceberg: %v (%d), want %v", got, r.MissingCount, missing)
	}
	if got := keyIDs(t, r.Extra); !slices.Equal(got, extra) || r.ExtraCount != len(extra) {
		t.Errorf("extra in Iceberg: %v (%d), want %v", got, r.ExtraCount, extra)
	}
	got := map[string][]string{}
	for _, d := range r.Differ {
		for _, c := range d.Columns {
			got[d.Key["id"]] = append(got[d.Key["id"]], c.Column)
		}
		t.Logf("differs: %v: %+v", d.Key, d.Columns)
	}
	if fmt.Sprint(got) != fmt.Sprint(differ) || r.DifferCount != len(differ) {
		t.Errorf("differing: %v (%d), want %v", got, r.DifferCount, differ)
	}
}

// TestReconcileFindsDamage: every kind of damage is found with its keys
// and columns, with the daemon running and stopped: a row deleted from the
// mirror through a deletion vector, a value changed in a rewritten data
// file, an extra row in the mirror, and an insert, an update and a delete
// at the source that the pipeline never saw.
func TestReconcileFindsDamage(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{DDL: fmt.Sprintf(ledgerDDL, "ledger", 3000), Tables: []string{"public.ledger"}})
	p.start()
	p.waitCaughtUp()
	p.requireMirror()
	p.stop()
	// The rewrite first: iceberg-go's copy-on-write rewrite of a file
	// brings back rows its deletion vector deleted.
	p.damageRewrite("public.ledger", 700, "owner", "tampered")
	p.damageDV("public.ledger", 5, 2999)
	p.damageAppend("public.ledger", 100001, "ghost")
	p.bypass("UPDATE ledger SET balance = balance + 1 WHERE id = 1200",
		"DELETE FROM ledger WHERE id = 1300", "INSERT INTO ledger VALUES (50000, 'unseen', 1, now())")
	if d := p.diff("public.ledger"); len(d.Missing) != 3 || len(d.Extra) != 2 || len(d.Differ) != 2 {
		t.Fatalf("the damage did not take (iceberg-go's scan): %s", d)
	}
	wantMissing, wantExtra := []string{"5", "2999", "50000"}, []string{"1300", "100001"}
	wantDiffer := map[string][]string{"700": {"owner"}, "1200": {"balance"}}

	reps, code := p.reconcileReport()
	if code != 4 {
		t.Errorf("daemon stopped: exit %d, want 4", code)
	}
	requireFound(t, reps["public.ledger"], wantMissing, wantExtra, wantDiffer)

	p.start()
	p.waitCaughtUp()
	p.exec("UPDATE ledger SET owner = owner || '+' WHERE id BETWEEN 10 AND 20") // the pipeline flows
	p.waitCaughtUp()
	reps, code = p.reconcileReport()
	if code != 4 {
		t.Errorf("daemon running: exit %d, want 4", code)
	}
	requireFound(t, reps["public.ledger"], wantMissing, wantExtra, wantDiffer)

	// In segments of 1,200 rows: the mirror is read once, beside the
	// first, and each later segment compares the rows of that read after
	// the last segment's end (1300, 2999, 50000 and 100001 lie there).
	reps, code = p.reconcileReport("--chunk-rows", "400", "--segment-rows", "1200")
	if code != 4 {
		t.Errorf("in segments: exit %d, want 4", code)
	}
	requireFound(t, reps["public.ledger"], wantMissing, wantExtra, wantDiffer)
}
