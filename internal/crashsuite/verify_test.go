package crashsuite

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/icebergcheck"
	"github.com/cdcd-dev/cdcd/internal/mirror"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// null renders SQL NULL on both sides.
const null = mirror.Null

// rowset maps a key (the id column, rendered) to its row: column -> value.
type rowset map[string]map[string]string

// sourceRows reads a table from PostgreSQL with every column rendered the
// way render renders the Iceberg value, and returns its current columns.
func sourceRows(ctx context.Context, conn *pgx.Conn, tbl string) (rowset, []string, error) {
	rows, err := conn.Query(ctx, `SELECT column_name, data_type FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`, tbl)
	if err != nil {
		return nil, nil, err
	}
	var cols, exprs []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, nil, err
		}
		cols = append(cols, name)
		switch typ {
		case "timestamp with time zone":
			exprs = append(exprs, fmt.Sprintf("(extract(epoch FROM %s) * 1000000)::bigint::text", name))
		case "bytea":
			exprs = append(exprs, fmt.Sprintf("encode(%s, 'hex')", name))
		case "double precision":
			exprs = append(exprs, name) // rendered from the float64
		default:
			exprs = append(exprs, name+"::text")
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	rows, err = conn.Query(ctx, "SELECT "+strings.Join(exprs, ", ")+" FROM "+tbl)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	out := rowset{}
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, nil, err
		}
		row := make(map[string]string, len(cols))
		for i, v := range vals {
			switch v := v.(type) {
			case nil:
				row[cols[i]] = null
			case string:
				row[cols[i]] = v
			case float64:
				row[cols[i]] = strconv.FormatFloat(v, 'g', -1, 64)
			default:
				return nil, nil, fmt.Errorf("%s.%s: unexpected %T", tbl, cols[i], v)
			}
		}
		out[row["id"]] = row
	}
	return out, cols, rows.Err()
}

// scanned is a table read with iceberg-go's scan: every row, by column name.
type scanned struct {
	cols []string
	rows []map[string]string
}

func scanTable(ctx context.Context, tbl *table.Table) (*scanned, error) {
	at, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		return nil, err
	}
	defer at.Release()
	s := &scanned{}
	for _, f := range at.Schema().Fields() {
		s.cols = append(s.cols, f.Name)
	}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		for i := 0; i < int(rec.NumRows()); i++ {
			row := make(map[string]string, len(s.cols))
			for j, name := range s.cols {
				row[name] = mirror.Render(rec.Column(j), i)
			}
			s.rows = append(s.rows, row)
		}
	}
	return s, nil
}

// upsertRows are an upsert table's rows by key; a key seen twice is an error.
func upsertRows(s *scanned) (rowset, error) {
	out := rowset{}
	for _, r := range s.rows {
		if _, dup := out[r["id"]]; dup {
			return nil, fmt.Errorf("key %s appears twice", r["id"])
		}
		out[r["id"]] = r
	}
	return out, nil
}

// clRow is one changelog row.
type clRow struct {
	op        string
	lsn       int64
	part      int64
	off       int64
	vals      map[string]string
	unchanged []string
}

// foldChangelog folds a changelog table into the rows it describes: per
// key in log order (partition, offset) the last change wins; a value the
// source sent as unchanged is the key's previous one (for the insert of a
// key change, the old key's: the delete with the same commit LSN — the
// workload changes at most one key of a table per transaction, since the
// changelog row does not name the old key); a truncate (its own
// transaction in the workload, recorded in partition 0) removes every key
// whose last change has a lower commit LSN. It also returns every
// (partition, offset) present, counted, the truncates' LSNs and how many
// values it took from an old key.
func foldChangelog(s *scanned) (rowset, map[[2]int64]int, []int64, int, error) {
	fromOld := 0
	var rows []clRow
	seen := map[[2]int64]int{}
	var truncates []int64
	for _, r := range s.rows {
		c := clRow{op: r["_cdc_op"], vals: map[string]string{}}
		var err error
		if c.lsn, err = strconv.ParseInt(r["_cdc_lsn"], 10, 64); err != nil {
			return nil, nil, nil, 0, fmt.Errorf("_cdc_lsn %q", r["_cdc_lsn"])
		}
		c.part, _ = strconv.ParseInt(r["_cdc_partition"], 10, 64)
		c.off, _ = strconv.ParseInt(r["_cdc_offset"], 10, 64)
		seen[[2]int64{c.part, c.off}]++
		if u := r["_cdc_unchanged"]; u != null && u != "" {
			if err := json.Unmarshal([]byte(u), &c.unchanged); err != nil {
				return nil, nil, nil, 0, fmt.Errorf("_cdc_unchanged %q: %w", u, err)
			}
		}
		for k, v := range r {
			if !strings.HasPrefix(k, "_cdc_") {
				c.vals[k] = v
			}
		}
		if c.op == "t" {
			truncates = append(truncates, c.lsn)
			continue
		}
		rows = append(rows, c)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].part != rows[j].part {
			return rows[i].part < rows[j].part
		}
		return rows[i].off < rows[j].off
	})
	// The deletes per commit LSN, to find a key change's old key.
	deletes := map[int64][]string{}
	for _, r := range rows {
		if r.op == "d" {
			deletes[r.lsn] = append(deletes[r.lsn], r.vals["id"])
		}
	}
	// Values as of each key's delete, for the inserts of key changes.
	type state struct {
		lsn  int64
		live bool
		vals map[string]string
	}
	last := map[string]*state{}
	// Keys change in source order: replay in commit-LSN order, keeping the
	// per-key order (partition, offset) inside each key.
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].lsn < rows[j].lsn })
	for _, r := range rows {
		k := r.vals["id"]
		prev := last[k]
		if r.op == "d" {
			if prev != nil {
				prev.live, prev.lsn = false, r.lsn
			} else {
				last[k] = &state{lsn: r.lsn}
			}
			continue
		}
		vals := r.vals
		for _, col := range r.unchanged {
			from := prev
			if r.op == "c" {
				if d := deletes[r.lsn]; len(d) == 1 {
					from = last[d[0]]
					fromOld++
				} else {
					return nil, nil, nil, 0, fmt.Errorf("key %s: insert with unchanged %s at LSN %d, but %d deletes in its transaction", k, col, r.lsn, len(d))
				}
			}
			if from == nil {
				return nil, nil, nil, 0, fmt.Errorf("key %s: %s unchanged at LSN %d with no earlier value", k, col, r.lsn)
			}
			vals[col] = from.vals[col]
		}
		last[k] = &state{lsn: r.lsn, live: true, vals: vals}
	}
	out := rowset{}
	for k, st := range last {
		if !st.live {
			continue
		}
		truncated := false
		for _, tl := range truncates {
			truncated = truncated || tl > st.lsn
		}
		if !truncated {
			out[k] = st.vals
		}
	}
	return out, seen, truncates, fromOld, nil
}

// compareRows reports the rows that differ in the source's columns (the
// Iceberg table keeps dropped columns; they are not compared).
func compareRows(t *testing.T, what string, cols []string, want, got rowset) {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 8 {
			t.Errorf(what+": "+format, args...)
		}
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			report("key %s is in the source but not in Iceberg", k)
			continue
		}
		for _, c := range cols {
			gv, has := g[c]
			if !has {
				report("key %s: Iceberg has no column %s", k, c)
				break
			}
			if gv != w[c] {
				report("key %s column %s: Iceberg has %q, the source %q", k, c, abbrev(gv), abbrev(w[c]))
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			report("key %s is in Iceberg but not in the source", k)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d differences (source %d rows, Iceberg %d)", what, bad, len(want), len(got))
	}
}

func abbrev(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%s…(%d bytes)", s[:60], len(s))
	}
	return s
}

// checkInvariants checks an Iceberg table's metadata: no data file live
// twice, at most one live deletion vector per data file (v3) and none for
// a file that is not live, no commit id on two snapshots, and the
// cdcd.offsets of the snapshot ancestry never moving backwards and ending
// at the log's end offsets (end). Summaries record only where each commit
// ends, so consecutive ones tile the log by construction once they never
// go back and the newest ends where the log does; in changelog mode
// checkCoverage checks the tiling row by row.
func checkInvariants(t *testing.T, ctx context.Context, tbl *table.Table, pipeline string, end []int64) (snapshots int) {
	t.Helper()
	name := strings.Join(tbl.Identifier(), ".")
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		t.Errorf("%s: no snapshot", name)
		return 0
	}
	problems, err := icebergcheck.FileProblems(ctx, tbl)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", name, p)
	}
	// The ancestry, oldest first.
	var chain []*table.Snapshot
	meta := tbl.Metadata()
	for s := snap; s != nil; {
		chain = append(chain, s)
		if s.ParentSnapshotID == nil {
			break
		}
		s = meta.SnapshotByID(*s.ParentSnapshotID)
	}
	var prev map[string]int64
	var prevID int64
	commits := map[string]int64{}
	for i := len(chain) - 1; i >= 0; i-- {
		s := chain[i]
		if s.Summary == nil {
			continue
		}
		if id, ok := s.Summary.Properties[sinkice.PropCommitID]; ok {
			if other, dup := commits[id]; dup {
				t.Errorf("%s: commit %s landed twice, as snapshots %d and %d", name, id, other, s.SnapshotID)
			}
			commits[id] = s.SnapshotID
		}
		off, ok := s.Summary.Properties[sinkice.PropOffsets]
		if !ok {
			continue
		}
		snapshots++
		if p := s.Summary.Properties[sinkice.PropPipeline]; p != pipeline {
			t.Errorf("%s: snapshot %d written by pipeline %q", name, s.SnapshotID, p)
		}
		cur := map[string]int64{}
		if err := json.Unmarshal([]byte(off), &cur); err != nil {
			t.Fatalf("%s: snapshot %d: %s %q: %v", name, s.SnapshotID, sinkice.PropOffsets, off, err)
		}
		if len(cur) != len(end) {
			t.Errorf("%s: snapshot %d: offsets %s name %d partitions, the topic has %d", name, s.SnapshotID, off, len(cur), len(end))
		}
		for p, o := range cur {
			if prev != nil && o < prev[p] {
				t.Errorf("%s: snapshot %d's offsets %s go back from snapshot %d's %v", name, s.SnapshotID, off, prevID, prev)
			}
		}
		prev, prevID = cur, s.SnapshotID
	}
	for p, e := range end {
		if got := prev[strconv.Itoa(p)]; got != e {
			t.Errorf("%s: the newest snapshot's offsets end partition %d at %d; the log ends at %d", name, p, got, e)
		}
	}
	return snapshots
}
