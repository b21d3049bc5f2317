package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
)

// summarize prints, per table, what landed in Iceberg next to the source.
func summarize(ctx context.Context, out io.Writer, d *daemon.Daemon, conn *pgx.Conn, cfg *config.Config) error {
	fmt.Fprintln(out, "\nWhat landed in Iceberg (read back with iceberg-go's scan):")
	for _, name := range cfg.Source.Postgres.Tables {
		ns, tbl := cfg.Sink.Iceberg.TableIdent(name)
		ident := table.Identifier{ns, tbl}
		t, err := d.Catalog().LoadTable(ctx, ident)
		if err != nil {
			return fmt.Errorf("demo: load %s.%s: %w", ns, tbl, err)
		}
		scan := t.Scan()
		at, err := scan.ToArrowTable(ctx)
		if err != nil {
			return fmt.Errorf("demo: scan %s.%s: %w", ns, tbl, err)
		}
		var live int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier(strings.Split(name, ".")).Sanitize()).Scan(&live); err != nil {
			at.Release()
			return err
		}
		if t.Properties()["cdcd.mode"] == "append" {
			fmt.Fprintf(out, "\n  %s.%s  <-  PostgreSQL %s (%d rows there now)\n", ns, tbl, name, live)
			fmt.Fprintf(out, "    location:   %s\n", t.Location())
			fmt.Fprintf(out, "    snapshots:  %d (current %d)\n", len(t.Metadata().Snapshots()), t.CurrentSnapshot().SnapshotID)
			fmt.Fprintf(out, "    data files: %d parquet files under %s\n", countFiles(t.Location()), strings.TrimPrefix(t.Location(), "file://")+"/data")
			fmt.Fprintf(out, "    changelog:  %d rows  %s\n", at.NumRows(), opCounts(at))
			printRows(out, at, 6)
			at.Release()
			continue
		}
		same, differ, err := compareWithSource(ctx, conn, name, at)
		if err != nil {
			at.Release()
			return err
		}
		verdict := "identical: every row compared"
		if differ > 0 {
			verdict = fmt.Sprintf("%d rows differ", differ)
		}
		fmt.Fprintf(out, "\n  %s.%s  <-  PostgreSQL %s\n", ns, tbl, name)
		fmt.Fprintf(out, "    rows:       %d in Iceberg, %d in PostgreSQL — %s (%d matched)\n", at.NumRows(), live, verdict, same)
		fmt.Fprintf(out, "    location:   %s\n", t.Location())
		summary := t.CurrentSnapshot().Summary.Properties
		fmt.Fprintf(out, "    snapshots:  %d, each carrying the log offsets it covers (now %s)\n", len(t.Metadata().Snapshots()), summary["cdcd.offsets"])
		fmt.Fprintf(out, "    files:      %s data files, %s deletion vectors (%s rows deleted or replaced)\n",
			summary["total-data-files"], summary["total-delete-files"], summary["total-position-deletes"])
		printRows(out, at, 5)
		at.Release()
	}
	return nil
}

func countFiles(location string) int {
	n := 0
	_ = filepath.WalkDir(filepath.Join(strings.TrimPrefix(location, "file://"), "data"), func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() && strings.HasSuffix(e.Name(), ".parquet") {
			n++
		}
		return nil
	})
	return n
}

func column(at arrow.Table, name string) *arrow.Chunked {
	idx := at.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return nil
	}
	return at.Column(idx[0]).Data()
}

// opCounts renders "(r: 8, c: 150, u: 70, d: 12)".
func opCounts(at arrow.Table) string {
	counts := map[string]int{}
	if col := column(at, "_cdc_op"); col != nil {
		for _, chunk := range col.Chunks() {
			s := chunk.(*array.String)
			for i := 0; i < s.Len(); i++ {
				counts[s.Value(i)]++
			}
		}
	}
	var parts []string
	for _, op := range []string{"r", "c", "u", "d", "t"} {
		if counts[op] > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", op, counts[op]))
		}
	}
	return "(" + strings.Join(parts, ", ") + ")  r=snapshot read c=insert u=update d=delete t=truncate"
}

// printRows prints up to n rows; a changelog's latest n changes.
func printRows(out io.Writer, at arrow.Table, n int) {
	if column(at, "_cdc_lsn") == nil {
		printMirror(out, at, n)
		return
	}
	rows := int(at.NumRows())
	if rows == 0 {
		return
	}
	type ref struct {
		chunk, idx int
		lsn, off   int64
	}
	var refs []ref
	lsn, off := column(at, "_cdc_lsn"), column(at, "_cdc_offset")
	for c := range lsn.Chunks() {
		l := lsn.Chunk(c).(*array.Int64)
		o := off.Chunk(c).(*array.Int64)
		for i := 0; i < l.Len(); i++ {
			refs = append(refs, ref{c, i, l.Value(i), o.Value(i)})
		}
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].lsn != refs[j].lsn {
			return refs[i].lsn < refs[j].lsn
		}
		return refs[i].off < refs[j].off
	})
	if len(refs) > n {
		refs = refs[len(refs)-n:]
	}
	show := []string{}
	for _, f := range at.Schema().Fields() {
		if f.Name == "_cdc_unchanged" || f.Name == "_cdc_tx_id" || f.Name == "_cdc_commit_ts" {
			continue
		}
		show = append(show, f.Name)
	}
	fmt.Fprintf(out, "    latest %d changes (by commit LSN):\n", len(refs))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "      "+strings.Join(show, "\t"))
	for _, r := range refs {
		vals := make([]string, len(show))
		for i, name := range show {
			vals[i] = column(at, name).Chunk(r.chunk).ValueStr(r.idx)
		}
		fmt.Fprintln(tw, "      "+strings.Join(vals, "\t"))
	}
	tw.Flush()
}

func printNext(out io.Writer, cfgPath string) {
	fmt.Fprintf(out, `
Point cdcd at your own database:
  1. In postgresql.conf: wal_level = logical (restart), and a user with REPLICATION
     that can read the tables (or a superuser while you try it out).
  2. Copy %s, set source.postgres.dsn and tables (every table needs a primary key),
     and data_dir for the log, catalog and warehouse.
  3. cdcd validate -c cdcd.yaml && cdcd run -c cdcd.yaml
  The tables land in the SQLite catalog (data_dir/catalog.db), readable by any engine
  that speaks Iceberg's SQL catalog (Spark, Trino, PyIceberg, DuckDB).
`, cfgPath)
}

// printMirror prints the first n rows of a mirrored table by key.
func printMirror(out io.Writer, at arrow.Table, n int) {
	names := make([]string, 0, at.NumCols())
	for _, f := range at.Schema().Fields() {
		names = append(names, f.Name)
	}
	fmt.Fprintf(out, "    a few rows:\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "      "+strings.Join(names, "\t"))
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	shown := 0
	for tr.Next() && shown < n {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()) && shown < n; i++ {
			vals := make([]string, rec.NumCols())
			for j := range vals {
				vals[j] = rec.Column(j).ValueStr(i)
				if d, ok := rec.Column(j).(*array.Decimal128); ok && !d.IsNull(i) {
					vals[j] = renderArrow(d, i)
				}
			}
			fmt.Fprintln(tw, "      "+strings.Join(vals, "\t"))
			shown++
		}
	}
	tw.Flush()
}

// compareWithSource compares every row of the Iceberg table with the
// source table, column by column, keyed by the first column (the key).
func compareWithSource(ctx context.Context, conn *pgx.Conn, source string, at arrow.Table) (same, differ int, err error) {
	var exprs []string
	for _, f := range at.Schema().Fields() {
		col := pgx.Identifier{f.Name}.Sanitize()
		switch f.Type.ID() {
		case arrow.TIMESTAMP:
			exprs = append(exprs, "(extract(epoch from "+col+") * 1000000)::bigint::text")
		default:
			exprs = append(exprs, col+"::text")
		}
	}
	rows, err := conn.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+pgx.Identifier(strings.Split(source, ".")).Sanitize())
	if err != nil {
		return 0, 0, err
	}
	want := map[string]string{}
	for rows.Next() {
		vals := make([]*string, len(exprs))
		ptrs := make([]any, len(exprs))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return 0, 0, err
		}
		rendered := make([]string, len(vals))
		for i, v := range vals {
			if v != nil {
				rendered[i] = *v
			}
		}
		want[rendered[0]] = strings.Join(rendered, "|")
	}
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			vals := make([]string, rec.NumCols())
			for j := range vals {
				vals[j] = renderArrow(rec.Column(j), i)
			}
			if want[vals[0]] == strings.Join(vals, "|") {
				same++
				delete(want, vals[0])
			} else {
				differ++
			}
		}
	}
	return same, differ + len(want), nil
}

func renderArrow(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return ""
	}
	switch a := a.(type) {
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Timestamp:
		return fmt.Sprint(int64(a.Value(i)))
	}
	return a.ValueStr(i)
}
