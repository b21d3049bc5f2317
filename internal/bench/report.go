package bench

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Goals of the end-to-end benchmark (issue 9).
const (
	GoalLoadRatio    = 0.50        // initial load / COPY binary
	GoalStreamRatio  = 0.60        // streaming / plain decode loop
	GoalPeakRSS      = 300 << 20   // bytes, every phase
	GoalLatencySlack = time.Second // p99 <= commit_interval + this
)

// Print writes the result table; markdown writes it as a Markdown table.
func (r *Result) Print(w io.Writer, markdown bool) {
	if r.Options.Source == SourceMariaDB {
		r.printMariaDB(w, markdown)
		return
	}
	o := r.Options
	cp := r.CopyMedian()
	fmt.Fprintf(w, "\ncdcd bench: load %d rows; streaming %d events (scale %g, %d-row transactions); latency at %d events/s for %v; commit_interval %v\n",
		o.Rows, r.Stream.Items, o.Scale, o.TxRows, o.LatencyRate, o.LatencyDuration, o.CommitInterval)
	fmt.Fprintf(w, "machine: %d cores (GOMAXPROCS), load average %s at the start, %s at the end\n\n", runtime.NumCPU(), r.LoadAvgStart, r.LoadAvgEnd)

	head := []string{"phase", "rows", "seconds", "rows/s", "ratio to raw", "cdcd CPU-µs/row", "PG CPU-µs/row", "cdcd peak RSS", "p50", "p99"}
	var rows [][]string
	rateCells := func(m Measure, raw *Measure) []string {
		ratio := ""
		if raw != nil {
			ratio = fmt.Sprintf("%.2f", m.Rate()/raw.Rate())
		}
		cpu := fmt.Sprintf("%.2f", m.CPUPerItem())
		if m.PeakRSS == 0 {
			cpu = fmt.Sprintf("(%.2f bench)", m.CPUPerItem())
		}
		pg := "?"
		if v := m.PGCPUPerItem(); v >= 0 {
			pg = fmt.Sprintf("%.2f", v)
		}
		rss := ""
		if m.PeakRSS > 0 {
			rss = fmt.Sprintf("%d MB", m.PeakRSS>>20)
		}
		return []string{m.Name, fmt.Sprint(m.Items), fmt.Sprintf("%.1f", m.Wall.Seconds()), fmt.Sprintf("%.0f", m.Rate()), ratio, cpu, pg, rss, "", ""}
	}
	copyRow := rateCells(cp, nil)
	if len(r.Copy) > 1 {
		lo, hi := r.Copy[0].Rate(), r.Copy[0].Rate()
		for _, m := range r.Copy {
			lo, hi = min(lo, m.Rate()), max(hi, m.Rate())
		}
		copyRow[0] = fmt.Sprintf("COPY binary (raw; median of %d: %.0f-%.0f)", len(r.Copy), lo, hi)
	}
	rows = append(rows, copyRow, rateCells(r.Load, &cp), rateCells(r.Decode, nil), rateCells(r.Stream, &r.Decode))
	lat := rateCells(r.Latency.Measure, nil)
	lat[2] = fmt.Sprintf("%.1f", r.Latency.Wall.Seconds())
	lat[8], lat[9] = fmtDur(r.Latency.P50), fmtDur(r.Latency.P99)
	rows = append(rows, lat)
	writeTable(w, head, rows, markdown)

	fmt.Fprintf(w, "\nlatency: %d transactions of %d; p50 %s, p90 %s, p99 %s, max %s (from COMMIT returning to the first catalog poll showing a snapshot that holds it; polled every %v)\n",
		r.Latency.Transactions, latencyTxRows, fmtDur(r.Latency.P50), fmtDur(r.Latency.P90), fmtDur(r.Latency.P99), fmtDur(r.Latency.Max), latencyPoll)
	scan := "not scanned"
	if r.ScanRows >= 0 {
		scan = fmt.Sprintf("%d by iceberg-go scan", r.ScanRows)
	}
	fmt.Fprintf(w, "verified: PostgreSQL %d rows; Iceberg %d by snapshot summary, %s\n", r.PGRows, r.SummaryRows, scan)
	fmt.Fprintln(w, "goals:")
	peak := max(r.Load.PeakRSS, r.Stream.PeakRSS, r.Latency.PeakRSS)
	for _, g := range []struct {
		what string
		ok   bool
		got  string
	}{
		{fmt.Sprintf("initial load >= %.2f of COPY binary", GoalLoadRatio), r.Load.Rate()/cp.Rate() >= GoalLoadRatio, fmt.Sprintf("%.2f", r.Load.Rate()/cp.Rate())},
		{fmt.Sprintf("streaming >= %.2f of the decode loop", GoalStreamRatio), r.Stream.Rate()/r.Decode.Rate() >= GoalStreamRatio, fmt.Sprintf("%.2f", r.Stream.Rate()/r.Decode.Rate())},
		{fmt.Sprintf("peak RSS <= %d MB", GoalPeakRSS>>20), peak <= GoalPeakRSS, fmt.Sprintf("%d MB", peak>>20)},
		{fmt.Sprintf("p99 latency <= commit_interval + %v = %v", GoalLatencySlack, o.CommitInterval+GoalLatencySlack),
			r.Latency.P99 <= o.CommitInterval+GoalLatencySlack, fmtDur(r.Latency.P99)},
	} {
		mark := "met"
		if !g.ok {
			mark = "MISSED"
		}
		fmt.Fprintf(w, "  %-50s %-7s (%s)\n", g.what, mark, g.got)
	}
}

func fmtDur(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

func writeTable(w io.Writer, head []string, rows [][]string, markdown bool) {
	if markdown {
		fmt.Fprintf(w, "| %s |\n", strings.Join(head, " | "))
		fmt.Fprintf(w, "|%s\n", strings.Repeat("---|", len(head)))
		for _, r := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		return
	}
	width := make([]int, len(head))
	for i, h := range head {
		width[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var sb strings.Builder
		for i, c := range cells {
			pad := width[i] - len([]rune(c))
			if i == 0 {
				sb.WriteString(c + strings.Repeat(" ", pad))
			} else {
				sb.WriteString("  " + strings.Repeat(" ", pad) + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(sb.String(), " "))
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
}
