package reconcile

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// TableReport is what a reconcile found in one table.
type TableReport struct {
	// Table is the source's table, Iceberg the mirror's.
	Table   string `json:"table"`
	Iceberg string `json:"iceberg"`
	// Rows is how many rows were compared and found equal or different;
	// Ranges how many key ranges matched by their hashes alone, Drilled
	// how many were read key by key.
	Rows    int64 `json:"rows"`
	Ranges  int   `json:"ranges"`
	Drilled int   `json:"ranges_read_by_key"`
	// Parallel is how many key ranges were read from the source at once
	// (Config.Parallel, fewer for a small table or one read in a single
	// range).
	Parallel int `json:"parallel_reads"`
	// Counts of keys: in the source and not in Iceberg, in Iceberg and not
	// in the source, in both with other values, live more than once in
	// Iceberg; Unchecked changed each time they were compared (the next
	// round checks them).
	MissingCount   int   `json:"missing"`
	ExtraCount     int   `json:"extra"`
	DifferCount    int   `json:"differing"`
	DuplicateCount int   `json:"duplicate"`
	Unchecked      int64 `json:"unchecked"`
	// The keys, up to Config.MaxListed of each kind.
	Missing   []KeyDiff `json:"missing_keys,omitempty"`
	Extra     []KeyDiff `json:"extra_keys,omitempty"`
	Differ    []KeyDiff `json:"differing_keys,omitempty"`
	Duplicate []KeyDiff `json:"duplicate_keys,omitempty"`
	// Skipped are the columns not compared.
	Skipped []Skipped `json:"skipped_columns,omitempty"`

	Duration      time.Duration `json:"duration_ns"`
	RowsPerSecond float64       `json:"rows_per_second"`
	// SourceCPU is the database's CPU time spent on the reads, when cdcd
	// can see the server's processes (the same host).
	SourceCPU             time.Duration `json:"source_cpu_ns,omitempty"`
	SourceCPUMicrosPerRow float64       `json:"source_cpu_us_per_row,omitempty"`
	// Error says why the table could not be compared.
	Error string `json:"error,omitempty"`
	// Repaired is what a repair did (cdcd reconcile --repair).
	Repaired *Repaired `json:"repair,omitempty"`

	listed int
	plan   *RepairPlan
}

// Repaired is a repair: the snapshot that re-read the differing rows and
// the comparison after it.
type Repaired struct {
	RepairPlan
	// Error says why the repair did not complete.
	Error string `json:"error,omitempty"`
	// After compares what the snapshot re-read: the keys, or the whole
	// table after a replace.
	After *TableReport `json:"after,omitempty"`
}

// EqualNow reports whether the mirror equals the source: equal when
// compared, or repaired and found equal after.
func (r *TableReport) EqualNow() bool {
	if r.Repaired != nil {
		return r.Repaired.Error == "" && r.Repaired.After != nil && r.Repaired.After.Equal()
	}
	return r.Equal()
}

// KeyDiff is one key that differs: its key columns' values as the source
// prints them and, for values that differ, the columns.
type KeyDiff struct {
	Key     map[string]string `json:"key"`
	Columns []ColumnDiff      `json:"columns,omitempty"`
	// Rows: how many times a duplicate key is live in Iceberg.
	Rows int `json:"rows,omitempty"`
}

// ColumnDiff is a column whose value differs: the source's (read again for
// the report: it may have changed since) and Iceberg's.
type ColumnDiff struct {
	Column  string `json:"column"`
	Source  string `json:"source"`
	Iceberg string `json:"iceberg"`
}

// Equal reports whether the mirror equals the source in every row
// compared.
func (r *TableReport) Equal() bool {
	return r.Error == "" && r.MissingCount+r.ExtraCount+r.DifferCount+r.DuplicateCount == 0
}

func keyMap(t *Table, lit Key) map[string]string {
	m := make(map[string]string, len(lit))
	for i, ci := range t.Key {
		m[t.Columns[ci].Name] = lit[i]
	}
	return m
}

func (r *TableReport) addMissing(t *Table, lit Key) {
	r.MissingCount++
	r.Rows++
	if len(r.Missing) < r.listed {
		r.Missing = append(r.Missing, KeyDiff{Key: keyMap(t, lit)})
	}
}

func (r *TableReport) addExtra(t *Table, lit Key) {
	r.ExtraCount++
	if len(r.Extra) < r.listed {
		r.Extra = append(r.Extra, KeyDiff{Key: keyMap(t, lit)})
	}
}

func (r *TableReport) addDiffer(t *Table, lit Key, cols []ColumnDiff) {
	r.DifferCount++
	r.Rows++
	if len(r.Differ) < r.listed {
		r.Differ = append(r.Differ, KeyDiff{Key: keyMap(t, lit), Columns: cols})
	}
}

func (r *TableReport) addDuplicate(t *Table, lit Key, rows int) {
	r.DuplicateCount++
	if len(r.Duplicate) < r.listed {
		r.Duplicate = append(r.Duplicate, KeyDiff{Key: keyMap(t, lit), Rows: rows})
	}
}

func (r *TableReport) unchecked(_ *Table, _ Key) { r.Unchecked++ }

// Differences lists every listed difference as a line for people.
func (r *TableReport) Differences() []string {
	var out []string
	key := func(k map[string]string) string {
		parts := make([]string, 0, len(k))
		for c, v := range k {
			parts = append(parts, c+"="+v)
		}
		return strings.Join(sortedStrings(parts), ", ")
	}
	for _, d := range r.Missing {
		out = append(out, "missing in Iceberg: "+key(d.Key))
	}
	for _, d := range r.Extra {
		out = append(out, "extra in Iceberg: "+key(d.Key))
	}
	for _, d := range r.Differ {
		var cols []string
		for _, c := range d.Columns {
			cols = append(cols, fmt.Sprintf("%s (source %q, Iceberg %q)", c.Column, c.Source, c.Iceberg))
		}
		out = append(out, "differs: "+key(d.Key)+": "+strings.Join(cols, "; "))
	}
	for _, d := range r.Duplicate {
		out = append(out, fmt.Sprintf("live %d times in Iceberg: %s", d.Rows, key(d.Key)))
	}
	return out
}

func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// WriteText writes reports as a table, then each difference.
func WriteText(w io.Writer, reps []*TableReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tRESULT\tROWS\tRANGES\tMISSING\tEXTRA\tDIFFERING\tUNCHECKED\tDURATION\tROWS/S\tSOURCE CPU/ROW")
	for _, r := range reps {
		result := "equal"
		switch {
		case r.Error != "":
			result = "not compared"
		case !r.Equal() && r.EqualNow():
			result = "repaired"
		case !r.Equal():
			result = "DIFFERS"
		}
		cpu := "-"
		if r.SourceCPUMicrosPerRow > 0 {
			cpu = fmt.Sprintf("%.2f µs", r.SourceCPUMicrosPerRow)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.0f\t%s\n", r.Iceberg, result, r.Rows, r.Ranges+r.Drilled,
			r.MissingCount, r.ExtraCount, r.DifferCount+r.DuplicateCount, r.Unchecked, r.Duration.Round(time.Millisecond), r.RowsPerSecond, cpu)
	}
	tw.Flush()
	for _, r := range reps {
		if r.Error != "" {
			fmt.Fprintf(w, "\n%s: not compared: %s\n", r.Iceberg, r.Error)
			continue
		}
		if d := r.Differences(); len(d) > 0 {
			fmt.Fprintf(w, "\n%s (source %s):\n", r.Iceberg, r.Table)
			for _, line := range d {
				fmt.Fprintf(w, "  %s\n", line)
			}
			if more := r.MissingCount + r.ExtraCount + r.DifferCount + r.DuplicateCount - len(d); more > 0 {
				fmt.Fprintf(w, "  … and %d more\n", more)
			}
		}
		if rp := r.Repaired; rp != nil {
			writeRepair(w, r.Iceberg, rp)
		}
		for _, s := range r.Skipped {
			fmt.Fprintf(w, "%s: column %s not compared: %s\n", r.Iceberg, s.Column, s.Why)
		}
	}
}

// writeRepair says what a repair did and found after.
func writeRepair(w io.Writer, name string, rp *Repaired) {
	how := fmt.Sprintf("cdcd snapshot --where on the %d keys found", rp.Keys)
	if rp.Replace {
		how = "cdcd snapshot --replace of the whole table (" + rp.Why + ")"
	}
	switch a := rp.After; {
	case rp.Error != "":
		fmt.Fprintf(w, "%s: repair by %s failed: %s\n", name, how, rp.Error)
	case a.Equal():
		fmt.Fprintf(w, "%s: repaired by %s; compared again: equal (%d rows)\n", name, how, a.Rows)
	default:
		fmt.Fprintf(w, "%s: repaired by %s; compared again, it still differs:\n", name, how)
		for _, line := range a.Differences() {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
}

// WriteJSON writes reports as a JSON document.
func WriteJSON(w io.Writer, reps []*TableReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	equal := true
	for _, r := range reps {
		equal = equal && r.Equal()
	}
	return enc.Encode(struct {
		Equal  bool           `json:"equal"`
		Tables []*TableReport `json:"tables"`
	}{equal, reps})
}
