package crashsuite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/internal/mirror"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// The MariaDB configurations' final checks, record by record: the log is
// read whole (the daemon stopped), and a changelog table must hold each of
// its records exactly once — a truncate (the loads' reset markers) once,
// from partition 0 — and fold into the source. MySQL positions carry no
// commit LSN, so the fold is per partition in offset order (a key's
// changes are all in one partition): a key's last change wins, and a
// truncate in a partition removes the keys whose last change in that
// partition came before it.

// myTopic is what the checks need of one topic.
type myTopic struct {
	end    []int64           // per partition
	resets [][]int64         // per partition: offsets of the truncates
	tombs  map[[2]int64]bool // partition, offset: a delete's tombstone (no row)
}

// readMyLog reads every table topic, by table name.
func readMyLog(ctx context.Context, dir string) (map[string]*myTopic, error) {
	lg, err := openLog(dir)
	if err != nil {
		return nil, err
	}
	defer lg.Close()
	topics, err := tableTopics(ctx, lg)
	if err != nil {
		return nil, err
	}
	out := map[string]*myTopic{}
	for _, topic := range topics {
		info, err := lg.DescribeTopic(ctx, topic)
		if err != nil {
			return nil, err
		}
		mt := &myTopic{end: make([]int64, len(info.Partitions)), resets: make([][]int64, len(info.Partitions)), tombs: map[[2]int64]bool{}}
		for _, p := range info.Partitions {
			if p.Start != 0 {
				return nil, fmt.Errorf("%s/%d starts at %d: retention removed records", topic, p.Partition, p.Start)
			}
			mt.end[p.Partition] = p.End
			for off := p.Start; off < p.End; {
				recs, err := lg.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{MaxBytes: 4 << 20})
				if err != nil {
					return nil, err
				}
				if len(recs) == 0 {
					return nil, fmt.Errorf("%s/%d: nothing at offset %d, before the end %d", topic, p.Partition, off, p.End)
				}
				for i := range recs {
					if recs[i].Offset != off {
						return nil, fmt.Errorf("%s/%d: offset %d where %d was expected", topic, p.Partition, recs[i].Offset, off)
					}
					if recs[i].Header(schema.HeaderReset) != nil {
						mt.resets[p.Partition] = append(mt.resets[p.Partition], off)
					}
					if recs[i].Value == nil {
						mt.tombs[[2]int64{int64(p.Partition), off}] = true
					}
					off++
				}
			}
		}
		out[topic[strings.LastIndexByte(topic, '.')+1:]] = mt
	}
	return out, nil
}

// openMyCatalog opens the daemon's catalog; close it with closeMyCatalog.
func openMyCatalog(t *testing.T, dir string) catalog.Catalog {
	cat, err := sinkice.OpenCatalog(t.Context(), sinkice.CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"),
		Name: "cdcd", Warehouse: "file://" + filepath.Join(dir, "warehouse")})
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func closeMyCatalog(cat catalog.Catalog) { cat.(interface{ Close() error }).Close() }

// clScan is a changelog table read with iceberg-go's scan, each value
// rendered as mirror.Render renders it.
func clScan(ctx context.Context, tbl *table.Table) ([]map[string]string, error) {
	s, err := scanTable(ctx, tbl)
	if err != nil {
		return nil, err
	}
	return s.rows, nil
}

// changelogHolds reports whether the changelog of db.tb has a row whose id
// is id (the workload's last change).
func changelogHolds(t *testing.T, dir, db, tb, id string) bool {
	cat := openMyCatalog(t, dir)
	defer closeMyCatalog(cat)
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"mirror", db + "_" + tb})
	if err != nil {
		return false
	}
	rows, err := clScan(t.Context(), tbl)
	if err != nil {
		return false
	}
	for _, r := range rows {
		if r["id"] == id {
			return true
		}
	}
	return false
}

// checkMariaDBTables checks every table after the run and returns a line
// per table for the log.
func checkMariaDBTables(t *testing.T, dir string, db *sql.DB, name, mode string) []string {
	ctx := t.Context()
	logs, err := readMyLog(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	cat := openMyCatalog(t, dir)
	defer closeMyCatalog(cat)
	var summary []string
	for _, tb := range []string{"acct", "item"} {
		tl := logs[tb]
		if tl == nil {
			t.Fatalf("no topic for %s in the log", tb)
		}
		tbl, err := cat.LoadTable(ctx, table.Identifier{"mirror", name + "_" + tb})
		if err != nil {
			t.Fatal(err)
		}
		snaps := checkInvariants(t, ctx, tbl, "crashmy", tl.end)
		var records, resets int64
		for p, e := range tl.end {
			records += e
			resets += int64(len(tl.resets[p]))
		}
		line := fmt.Sprintf("%s: %d log records (%d truncates), %d snapshots with offsets", tb, records, resets, snaps)
		if mode == "upsert" {
			chk, err := sinkice.VerifyIndex(ctx, tbl, filepath.Join(dir, "index"))
			if err != nil {
				t.Fatalf("%s: verify the key index: %v", tb, err)
			}
			for _, p := range chk.Problems {
				t.Errorf("%s: key index: %s", tb, p)
			}
			line += fmt.Sprintf(", %d index keys each found at its row", chk.IndexKeys)
		} else {
			line += checkMyChangelog(t, db, name, tb, tbl, tl)
		}
		summary = append(summary, line)
	}
	return summary
}

// checkMyChangelog checks a changelog table against its topic and its
// source table.
func checkMyChangelog(t *testing.T, db *sql.DB, name, tb string, tbl *table.Table, tl *myTopic) string {
	ctx := t.Context()
	want, cols, keys, err := mirror.MySQLSourceRows(ctx, db, name, tb)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := clScan(ctx, tbl)
	if err != nil {
		t.Fatalf("scan %s: %v", tb, err)
	}
	type change struct {
		off  int64
		op   string
		key  string
		vals map[string]string
	}
	parts := make([][]change, len(tl.end))
	seen := map[[2]int64]int{}
	bad := 0
	report := func(format string, a ...any) {
		if bad++; bad <= 8 {
			t.Errorf(tb+": "+format, a...)
		}
	}
	for _, r := range rows {
		p, err1 := strconv.ParseInt(r["_cdc_partition"], 10, 64)
		off, err2 := strconv.ParseInt(r["_cdc_offset"], 10, 64)
		if err1 != nil || err2 != nil || p < 0 || int(p) >= len(parts) {
			report("a changelog row with partition %q offset %q", r["_cdc_partition"], r["_cdc_offset"])
			continue
		}
		seen[[2]int64{p, off}]++
		kv := make([]string, len(keys))
		for i, k := range keys {
			kv[i] = r[k]
		}
		parts[p] = append(parts[p], change{off: off, op: r["_cdc_op"], key: strings.Join(kv, "|"), vals: r})
	}
	// Coverage: every record once; a truncate's copies in partitions other
	// than 0 make no row.
	for p, end := range tl.end {
		trunc := map[int64]bool{}
		for _, o := range tl.resets[p] {
			trunc[o] = true
		}
		for off := int64(0); off < end; off++ {
			n := seen[[2]int64{int64(p), off}]
			if n != 1 && !(n == 0 && p > 0 && trunc[off]) && !(n == 0 && tl.tombs[[2]int64{int64(p), off}]) {
				report("log record %d/%d is in the changelog %d times", p, off, n)
			}
			delete(seen, [2]int64{int64(p), off})
		}
	}
	for k, n := range seen {
		report("the changelog has %d rows for %d/%d, past the log's end", n, k[0], k[1])
	}
	// The fold, per partition in offset order, the truncates from the log.
	got := map[string]map[string]string{}
	for p, cs := range parts {
		sort.Slice(cs, func(i, j int) bool { return cs[i].off < cs[j].off })
		live := map[string]map[string]string{}
		next := 0
		resets := tl.resets[p]
		for _, c := range cs {
			for next < len(resets) && resets[next] < c.off {
				clear(live)
				next++
			}
			switch c.op {
			case "t":
			case "d":
				delete(live, c.key)
			default:
				live[c.key] = c.vals
			}
		}
		if next < len(resets) {
			clear(live) // a truncate after the partition's last change
		}
		for k, v := range live {
			if _, dup := got[k]; dup {
				report("key %s is live in two partitions", k)
			}
			got[k] = v
		}
	}
	wantBy := map[string]map[string]string{}
	for _, row := range want {
		kv := make([]string, len(keys))
		for i, k := range keys {
			kv[i] = row[k]
		}
		wantBy[strings.Join(kv, "|")] = row
	}
	for k, w := range wantBy {
		g, ok := got[k]
		if !ok {
			report("key %s is in MariaDB but not in the folded changelog", k)
			continue
		}
		for _, c := range cols {
			if g[c] != w[c] {
				report("key %s column %s: the changelog folds to %q, MariaDB has %q", k, c, abbrev(g[c]), abbrev(w[c]))
			}
		}
	}
	for k := range got {
		if _, ok := wantBy[k]; !ok {
			report("key %s is in the folded changelog but not in MariaDB", k)
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d problems (MariaDB %d rows, folded changelog %d)", tb, bad, len(wantBy), len(got))
	}
	return fmt.Sprintf(", %d changelog rows, each log record once, folding into MariaDB's %d rows", len(rows), len(wantBy))
}
