package faultsuite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/mirror"
)

// TestDroppedColumnReadsNull (issue 22): a column added with a default
// that rows already there hold becomes an Iceberg column with that
// initial-default (format 3). Dropped at the source — here while cdcd is
// stopped, so the reader knows the column only from its own record — it
// stays in the Iceberg table, and rows written after the drop read NULL
// there through iceberg-go's scan, not the default a reader fills into a
// file that lacks the column; rows nobody touched since the ALTER keep
// the default, and so does a compaction.
func TestDroppedColumnReadsNull(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE t (id int PRIMARY KEY, v text);
			INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 200) g;`,
		Tables: []string{"public.t"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`ALTER TABLE t ADD COLUMN c text DEFAULT 'red'`)
	p.exec(`INSERT INTO t VALUES (201, 'with c', 'blue')`)
	p.waitCaughtUp()
	p.stop()
	p.exec(`ALTER TABLE t DROP COLUMN c`)
	p.start()
	p.exec(`INSERT INTO t VALUES (202, 'after the drop')`)
	p.exec(`UPDATE t SET v = 'updated after the drop' WHERE id <= 10 OR id = 201`)
	p.waitCaughtUp()
	p.requireMirror()
	check := func(when string) {
		t.Helper()
		got := p.icebergColumn("public.t", "c", "id")
		want := func(id int) string {
			switch {
			case id <= 10 || id == 201 || id == 202:
				return mirror.Null // written after the drop
			}
			return "red"
		}
		bad := 0
		for id := 1; id <= 202; id++ {
			if g := got[fmt.Sprint(id)]; g != want(id) && bad < 5 {
				bad++
				t.Errorf("%s: id %d: Iceberg column c reads %q, want %q", when, id, g, want(id))
			}
		}
	}
	check("streamed")
	p.compact("cdc.t")
	check("after a compaction")
}

// TestAddedDefaultAcrossRestart (issue 22): ALTER TABLE … ADD COLUMN …
// DEFAULT while cdcd is stopped or killed, before its stream has seen the
// table's new shape. On format 3 the column gets its initial-default; on
// format 2 the table's rows must be read again, a decision the reader
// takes from its own durable record of the table's columns, since it no
// longer holds the old shape in memory. The mirror ends equal either way.
func TestAddedDefaultAcrossRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format int
		kill   bool
	}{{2, true}, {3, true}, {2, false}} {
		t.Run(fmt.Sprintf("v%d/kill=%t", tc.format, tc.kill), func(t *testing.T) {
			t.Parallel()
			p := newPipeline(t, pipelineOptions{
				DDL: `CREATE TABLE t (id int PRIMARY KEY, v text);
					INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 2000) g;`,
				Tables:        []string{"public.t"},
				FormatVersion: tc.format,
			})
			p.start()
			p.waitCaughtUp()
			p.exec(`UPDATE t SET v = 'streamed' WHERE id <= 5`)
			p.waitCaughtUp()
			if tc.kill {
				p.exec(`ALTER TABLE t ADD COLUMN c text DEFAULT 'red'`)
				p.kill()
			} else {
				p.stop()
				p.exec(`ALTER TABLE t ADD COLUMN c text DEFAULT 'red'`)
			}
			p.start()
			p.exec(`INSERT INTO t VALUES (2001, 'new', 'blue')`)
			p.waitCaughtUp()
			p.waitMirror("public.t", 3*time.Minute)
			queued := p.logContains(`origin=added-default`)
			if queued != (tc.format == 2) {
				t.Errorf("the table's rows were read again: %t, want %t", queued, tc.format == 2)
			}
		})
	}
}

// icebergColumn reads column col of sourceTable's mirror through
// iceberg-go's scan, by the rendered key (keys: the key columns).
func (p *pipeline) icebergColumn(sourceTable, col string, keys ...string) map[string]string {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	rows, _, _, _, err := mirror.IcebergRows(p.ctx, p.icebergTable(cat, sourceTable), keys)
	if err != nil {
		p.t.Fatal(err)
	}
	out := make(map[string]string, len(rows))
	for k, r := range rows {
		out[k] = r[col]
	}
	return out
}

// compact runs cdcd compact on the Iceberg table (namespace.name) and
// waits for the daemon to log the compaction.
func (p *pipeline) compact(icebergTable string) {
	p.t.Helper()
	before := countLog(p, "msg=compacted")
	if _, stderr, code := p.cdcd("compact", "-c", p.CfgPath, icebergTable); code != 0 {
		p.t.Fatalf("cdcd compact: exit %d: %s", code, stderr)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for countLog(p, "msg=compacted") <= before {
		if time.Now().After(deadline) {
			p.t.Fatal("no compaction within 2m of cdcd compact")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func countLog(p *pipeline, s string) int { return strings.Count(p.logTail(1<<30), s) }

// TestUpdatedRowKeepsRowID (issue 22): through the real pipeline, a row
// updated at the source keeps its Iceberg _row_id (v3 row lineage) and
// takes the update's commit as its _last_updated_sequence_number, read
// with iceberg-go's scan; across a compaction and a restart too. Inserted
// rows get ids no other row has.
func TestUpdatedRowKeepsRowID(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE t (id int PRIMARY KEY, v text);
			INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 500) g;`,
		Tables: []string{"public.t"},
	})
	p.start()
	p.waitCaughtUp()
	first := p.rowLineage("public.t")
	step := func(what, sql string, updated func(id int64) bool) {
		t.Helper()
		before := p.rowLineage("public.t")
		p.exec(sql)
		p.waitCaughtUp()
		p.requireMirror()
		after := p.rowLineage("public.t")
		owner := map[int64]int64{}
		for id, l := range after {
			if o, dup := owner[l[0]]; dup {
				t.Errorf("%s: ids %d and %d share row id %d", what, id, o, l[0])
			}
			owner[l[0]] = id
			b, had := before[id]
			switch {
			case !had:
			case updated(id) && (l[0] != first[id][0] || l[1] <= b[1]):
				t.Errorf("%s: updated id %d has row id %d, sequence number %d; want row id %d, sequence number above %d", what, id, l[0], l[1], first[id][0], b[1])
			case !updated(id) && l != b:
				t.Errorf("%s: untouched id %d has lineage %v, had %v", what, id, l, b)
			}
		}
	}
	step("an update", `UPDATE t SET v = 'u1' WHERE id <= 50; INSERT INTO t SELECT g, 'new' FROM generate_series(501, 510) g; DELETE FROM t WHERE id BETWEEN 491 AND 495`,
		func(id int64) bool { return id <= 50 })
	step("a second update", `UPDATE t SET v = 'u2' WHERE id <= 20`, func(id int64) bool { return id <= 20 })
	p.compact("cdc.t")
	step("an update after a compaction", `UPDATE t SET v = 'u3' WHERE id BETWEEN 10 AND 30`, func(id int64) bool { return id >= 10 && id <= 30 })
	p.stop()
	p.start()
	step("an update after a restart", `UPDATE t SET v = 'u4' WHERE id BETWEEN 25 AND 100`, func(id int64) bool { return id >= 25 && id <= 100 })
}

// rowLineage reads each row's _row_id and _last_updated_sequence_number
// of sourceTable's mirror (key column id, an integer) through iceberg-go's
// scan.
func (p *pipeline) rowLineage(sourceTable string) map[int64][2]int64 {
	p.t.Helper()
	cat := p.openCatalog()
	defer closeCatalog(cat)
	at, err := p.icebergTable(cat, sourceTable).Scan(table.WithSelectedFields("id"), table.WithRowLineage()).ToArrowTable(p.ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer at.Release()
	out := map[int64][2]int64{}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(n string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(n)[0]) }
		ids, rowIDs, seqs := col("id"), col(iceberg.RowIDColumnName).(*array.Int64), col(iceberg.LastUpdatedSequenceNumberColumnName).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			if rowIDs.IsNull(i) || seqs.IsNull(i) {
				p.t.Fatalf("row %d of %s has no lineage", i, sourceTable)
			}
			var id int64
			switch a := ids.(type) {
			case *array.Int32:
				id = int64(a.Value(i))
			case *array.Int64:
				id = a.Value(i)
			}
			out[id] = [2]int64{rowIDs.Value(i), seqs.Value(i)}
		}
	}
	return out
}
