package postgres

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitColumnType waits (two minutes) until a publication check has
// recorded in the reader's state that column of table has type typ.
func waitColumnType(t *testing.T, e *env, table, column, typ string) {
	t.Helper()
	key := "postgres/" + e.names.Slot
	var seen map[string]string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		raw, _ := e.state.Load(t.Context(), key)
		var st sourceState
		if raw != nil {
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatalf("the stored state: %v", err)
			}
		}
		seen = st.ColumnTypes[table].Types
		if seen[column] == typ {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no check recorded %s.%s as %s within 2 minutes; the state has %v", table, column, typ, seen)
		}
	}
}

// TestColumnTypeChangedReadsAgain: ALTER COLUMN ... TYPE ... USING
// rewrites every row without a change pgoutput sends; the table is read
// again, once, and the mirror ends equal to the source. A type change
// without a rewrite (varchar(40) -> varchar(80)) reads nothing.
func TestColumnTypeChangedReadsAgain(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ct (id int PRIMARY KEY, v varchar(20), big varchar(40));
		INSERT INTO ct SELECT g, 'v' || g, 'w' || g FROM generate_series(1, 300) g`)
	logs := &syncBuffer{}
	e.logs = logs
	m := newMirror(4)
	_, r := e.startReader(t, []string{"ct"}, true, m, fastChecks)
	e.exec(t, "INSERT INTO ct VALUES (1000, 'v1000', 'w1000')")
	waitKey(t, m, "public.ct", 1000)
	waitColumnType(t, e, "public.ct", "big", "character varying(40)")

	// No rewrite: the check that records the new type would have queued
	// the snapshot before it saved the type.
	e.exec(t, "ALTER TABLE ct ALTER COLUMN big TYPE varchar(80)")
	waitColumnType(t, e, "public.ct", "big", "character varying(80)")
	if p := r.Snapshots().Progress(); len(p) != 0 {
		t.Fatalf("a type change without a rewrite started snapshots: %+v", p)
	}

	e.exec(t, "ALTER TABLE ct ALTER COLUMN v TYPE text USING upper(v)")
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		p := r.Snapshots().Progress()
		if len(p) == 1 && !p[0].Finished.IsZero() {
			if p[0].Origin != "column-type-changed" || p[0].Where != "" {
				t.Errorf("snapshot %+v, want one of the whole table, origin column-type-changed", p[0])
			}
			if p[0].Rows != 301 {
				t.Errorf("the snapshot read %d rows, want the table's 301", p[0].Rows)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no finished snapshot 2 minutes after the type change: %+v", p)
		}
	}
	e.exec(t, "INSERT INTO ct VALUES (1001, 'v1001', 'w1001')")
	waitSettled(t, r, m, "public.ct", 1001)
	compareMirror(t, m, e.conn, "ct")
	var warned bool
	for _, line := range strings.Split(logs.String(), "\n") {
		warned = warned || strings.Contains(line, "level=WARN") && strings.Contains(line, "reading the table again") &&
			strings.Contains(line, "table=public.ct") && strings.Contains(line, "column=v") &&
			strings.Contains(line, `old_type="character varying(20)"`) && strings.Contains(line, "new_type=text")
	}
	if !warned {
		t.Errorf("no WARN naming the table, the column and both types; logs:\n%s", logs.String())
	}
}

// TestRetyped: which type changes read a table again.
func TestRetyped(t *testing.T) {
	was := tableTypes{OID: 7, Rel: 100, Types: map[string]string{"v": "integer", "w": "text"}}
	for _, tc := range []struct {
		name string
		now  tableTypes
		want int
	}{
		{"rewritten", tableTypes{OID: 7, Rel: 101, Types: map[string]string{"v": "bigint", "w": "text"}}, 1},
		{"no rewrite", tableTypes{OID: 7, Rel: 100, Types: map[string]string{"v": "bigint", "w": "text"}}, 0},
		{"vacuum full", tableTypes{OID: 7, Rel: 101, Types: map[string]string{"v": "integer", "w": "text"}}, 0},
		{"another table", tableTypes{OID: 8, Rel: 101, Types: map[string]string{"v": "bigint", "w": "text"}}, 0},
		{"column added", tableTypes{OID: 7, Rel: 101, Types: map[string]string{"v": "integer", "w": "text", "x": "int"}}, 0},
	} {
		if got := retyped(was, tc.now); len(got) != tc.want {
			t.Errorf("%s: %v, want %d changes", tc.name, got, tc.want)
		}
	}
	part := tableTypes{OID: 9, Types: map[string]string{"v": "integer"}}
	if got := retyped(part, tableTypes{OID: 9, Types: map[string]string{"v": "numeric(12,2)"}}); len(got) != 1 {
		t.Errorf("a partitioned table's type change: %v, want it read again", got)
	}
	if got := retyped(tableTypes{}, was); len(got) != 0 {
		t.Errorf("a first check: %v, want nothing", got)
	}
}

// BenchmarkCheckColumnTypes: what the column types add to each publication
// check, for 10 and 100 captured tables of 20 columns, against
// readPublication (a part of the check that was there before) in the same
// run. Reports the reader's CPU per check; the server's is not counted.
//
//	go test ./source/postgres -run '^$' -bench CheckColumnTypes -benchtime 200x
func BenchmarkCheckColumnTypes(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("tables=%d", n), func(b *testing.B) {
			var ddl strings.Builder
			var names []string
			for i := range n {
				fmt.Fprintf(&ddl, "CREATE TABLE bt%d (id int PRIMARY KEY", i)
				for c := range 19 {
					fmt.Fprintf(&ddl, ", c%d %s", c, []string{"text", "bigint", "numeric(12,2)", "varchar(40)"}[c%4])
				}
				ddl.WriteString(");\n")
				names = append(names, fmt.Sprintf("bt%d", i))
			}
			e := setup(b, ddl.String()+"CREATE PUBLICATION bench_pub FOR TABLE "+strings.Join(names, ", "))
			r := New(Config{Slot: "s", Publication: "bench_pub"}, &memState{}, discard)
			var checks []tableCheck
			for _, name := range names {
				ct, err := describeNamed(b.Context(), e.conn, "public", name)
				if err != nil {
					b.Fatal(err)
				}
				checks = append(checks, tableCheck{name: "public." + name, t: ct})
			}
			known, err := r.checkColumnTypes(b.Context(), e.conn, checks, nil)
			if err != nil {
				b.Fatal(err)
			}
			for _, part := range []struct {
				name string
				fn   func() error
			}{
				{"column-types", func() error { _, err := r.checkColumnTypes(b.Context(), e.conn, checks, known); return err }},
				{"read-publication", func() error { _, err := readPublication(b.Context(), e.conn, "bench_pub"); return err }},
			} {
				cpu0, t0 := cpuTime(), time.Now()
				for range b.N {
					if err := part.fn(); err != nil {
						b.Fatal(err)
					}
				}
				el, cpu := time.Since(t0), cpuTime()-cpu0
				b.ReportMetric(float64(el.Microseconds())/float64(b.N), part.name+"-wall-µs/check")
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), part.name+"-cpu-µs/check")
			}
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			b.ReportMetric(float64(ru.Maxrss)/1024, "peak-rss-MB")
		})
	}
}
