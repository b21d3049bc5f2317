package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

const statusUsage = `cdcd status — what a running daemon is doing

Usage:
  cdcd status [-c FILE | --admin HOST:PORT] [--json]

Reads /status from the daemon's admin listener (--admin, or admin.listen of -c FILE;
default 127.0.0.1:8089) and shows each table's state, initial-load progress, rows,
lag and last commit, the replication slot, and the alerts that are firing.
--json prints the raw /status document. Exit codes: 0 shown, 1 the daemon could not
be reached, 2 bad usage.
`

// statusCommand implements `cdcd status`; args exclude "status".
func statusCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdcd status", flag.ContinueOnError)
	admin := fs.String("admin", "", "admin listener of the daemon, HOST:PORT or URL")
	cfgPath := fs.String("c", "", "config file to read admin.listen from")
	raw := fs.Bool("json", false, "print the /status JSON as it is")
	pos, code, done := commandFlags(fs, args, statusUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, statusUsage, stderr) {
		return exitUsage
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd status:", err)
		return exitUsage
	}
	base := ac.base
	body, err := fetchStatus(ctx, ac)
	if err != nil {
		fmt.Fprintf(stderr, "cdcd status: %v\n", err)
		return exitFailure
	}
	if *raw {
		_, _ = stdout.Write(body)
		return exitOK
	}
	var st daemon.Status
	if err := json.Unmarshal(body, &st); err != nil {
		fmt.Fprintf(stderr, "cdcd status: %s/status did not answer a cdcd status document: %v\n", base, err)
		return exitFailure
	}
	renderStatus(stdout, st, time.Now())
	return exitOK
}

func fetchStatus(ctx context.Context, ac *adminClient) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	base := ac.base
	req, err := ac.newRequest(ctx, http.MethodGet, "/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := ac.do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the daemon at %s: %w (is cdcd running, and is admin.listen %s?)", base, err, strings.TrimPrefix(base, "http://"))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/status answered %s", base, resp.Status)
	}
	return body, nil
}

// renderStatus writes st for a terminal.
func renderStatus(w io.Writer, st daemon.Status, now time.Time) {
	ready := "not ready"
	if st.Ready {
		ready = "ready"
	}
	fmt.Fprintf(w, "cdcd %s  pipeline %s  %s (%s)  up %s\n\n", st.Version, st.Pipeline, st.State, ready, st.Uptime)

	s := st.Slot
	switch b := st.Source.Binlog; {
	case b != nil:
		fmt.Fprintf(w, "binlog %s:%d  gtid %s  lag %s (%s)", b.File, b.Pos, b.GTID, bytesText(b.LagBytes), secondsText(b.LagSeconds))
		if b.RetentionSeconds > 0 {
			fmt.Fprintf(w, "  binlogs kept %s", secondsText(b.RetentionSeconds))
		}
		fmt.Fprintln(w)
	case !s.Up && s.Error == "":
		fmt.Fprintf(w, "slot %s: not polled yet\n", s.Name)
	case !s.Up:
		fmt.Fprintf(w, "slot %s: state unknown (%s)\n", s.Name, s.Error)
	case !s.Exists:
		fmt.Fprintf(w, "slot %s: does not exist\n", s.Name)
	default:
		active := "inactive"
		if s.Active {
			active = "active"
		}
		fmt.Fprintf(w, "slot %s  %s  wal_status %s  lag %s (%s)  confirmed_flush_lsn %s", s.Name, active, s.WALStatus,
			bytesText(s.LagBytes), secondsText(s.LagSeconds), s.ConfirmedFlushLSN)
		if s.SafeWALSize != nil && s.MaxWALKeep > 0 {
			fmt.Fprintf(w, "  safe_wal_size %s of %s", bytesText(*s.SafeWALSize), bytesText(s.MaxWALKeep))
		}
		fmt.Fprintln(w)
	}
	if st.Source.Waiting != "" {
		fmt.Fprintf(w, "waiting: %s\n", st.Source.Waiting)
	}
	if src := st.Source; src.LoadRowsPerSecond > 0 {
		eta := "unknown"
		if src.LoadETASeconds > 0 {
			eta = secondsText(src.LoadETASeconds)
		}
		fmt.Fprintf(w, "initial load: %s rows read, %s rows/s, about %s left\n", thousands(src.SnapshotRows), thousands(int64(src.LoadRowsPerSecond)), eta)
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSTATE\tSNAPSHOT\tROWS\tEVENTS IN\tLAG\tLAST COMMIT")
	for _, t := range st.Tables {
		lag := "?"
		if t.Lag >= 0 {
			lag = fmt.Sprintf("%s (%s)", thousands(t.Lag), secondsText(t.LagSeconds))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Table, t.State, progressBar(t.Snapshot), thousands(t.Rows),
			thousands(t.EventsIn), lag, ago(t.LastCommit, now))
	}
	tw.Flush()
	fmt.Fprintln(w)
	renderOutbox(w, st.Outbox)
	trouble := renderTrouble(w, st, now)

	if len(st.Alerts) == 0 {
		if trouble {
			// Never "no alerts" while something is wrong: the alert fires
			// at the monitor's next check.
			fmt.Fprintln(w, "ALERTS: none firing yet (the monitor checks every alerts.interval); the tables above need attention")
			return
		}
		fmt.Fprintln(w, "no alerts firing")
		return
	}
	fmt.Fprintf(w, "ALERTS (%d firing)\n", len(st.Alerts))
	for _, a := range st.Alerts {
		fmt.Fprintf(w, "  %-8s  %s  %s  since %s\n", strings.ToUpper(a.Severity), a.Name, a.Subject, ago(a.Since.Format(time.RFC3339Nano), now))
		fmt.Fprintf(w, "            %s\n            what to do: %s\n", a.Summary, a.Action)
	}
}

// renderTrouble writes the paused tables (why, what is held, how to
// resolve it) and the tables whose commits do not land; it reports whether
// there were any.
func renderTrouble(w io.Writer, st daemon.Status, now time.Time) bool {
	trouble := false
	if len(st.Paused) > 0 {
		trouble = true
		fmt.Fprintf(w, "PAUSED (%d)\n", len(st.Paused))
		for _, p := range st.Paused {
			fmt.Fprintf(w, "  %s  %s pause  since %s  %s held", p.Table, p.Kind, ago(p.Since.Format(time.RFC3339Nano), now), thousands(p.Held))
			if p.Dead > 0 {
				fmt.Fprintf(w, ", %s skipped to the dead-letter topic", thousands(p.Dead))
			}
			fmt.Fprintf(w, "\n            %s\n", p.Reason)
			if p.Column != "" {
				fmt.Fprintf(w, "            key %s  column %s  value %s\n", p.Key, p.Column, p.Value)
			}
			fmt.Fprintf(w, "            what to do: %s\n", p.Resolve)
		}
		fmt.Fprintln(w)
	}
	for _, t := range st.Tables {
		switch {
		case t.Paused:
		case t.CommitError != "":
			trouble = true
			fmt.Fprintf(w, "COMMITS FAILING  %s: %s (retried; %s changes wait)\n", t.Table, t.CommitError, thousands(max(t.Lag, 0)))
		case t.CommitsStalled:
			trouble = true
			fmt.Fprintf(w, "COMMITS NOT LANDING  %s: %s changes have waited %s without a successful commit; read the daemon's log for its commit errors\n",
				t.Table, thousands(max(t.Lag, 0)), secondsText(t.CommitStallSeconds))
		}
	}
	if trouble {
		fmt.Fprintln(w)
	}
	return trouble
}

// progressBar draws a table's load — the initial load's or an incremental
// snapshot's — as far as Iceberg: the share of its rows committed to the
// table, while it reads how much it has read, and the commit rate and
// time left (the read's while no commit has landed yet).
func progressBar(s daemon.SnapshotStatus) string {
	if s.AllCommitted && s.Incremental == "" {
		return drawBar(100)
	}
	bar := thousands(s.Committed) + " rows in iceberg"
	if s.CommittedPercent >= 0 {
		bar = drawBar(s.CommittedPercent) + " in iceberg"
	}
	if s.Incremental != "" {
		bar = "snapshot " + s.Incremental + " " + bar
	}
	if s.Incremental != "" || !s.Done {
		if s.Percent >= 0 {
			bar += fmt.Sprintf(", read %.0f%%", math.Floor(s.Percent))
		} else {
			bar += ", read " + thousands(s.Rows) + " rows"
		}
	}
	if s.CommitRowsPerSecond > 0 {
		return bar + rateText(s.CommitRowsPerSecond, s.CommitETASeconds)
	}
	return bar + rateText(s.RowsPerSecond, s.ETASeconds)
}

// drawBar is "[#####...............]  25%" (99.9% is not done).
func drawBar(percent float64) string {
	const width = 20
	pct := math.Floor(percent)
	filled := int(pct / 100 * width)
	return fmt.Sprintf("[%s%s] %3.0f%%", strings.Repeat("#", filled), strings.Repeat(".", width-filled), pct)
}

// ago renders an RFC 3339 time as "3s ago"; "never" when empty.
func ago(ts string, now time.Time) string {
	if ts == "" {
		return "never"
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return secondsText(now.Sub(t).Seconds()) + " ago"
}

func secondsText(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Minute).String()
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/unit, 0
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	for ; f >= unit && i < len(units)-1; i++ {
		f /= unit
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// thousands writes n with , between groups of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
