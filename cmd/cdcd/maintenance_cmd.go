package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
)

const compactUsage = `usage: cdcd compact [-c FILE | --admin HOST:PORT] TABLE

Asks the running daemon to merge every small file of TABLE (namespace.table, table
or topic) now; the daemon also compacts in tiers on its own.
`

// compactCommand is `cdcd compact [-c FILE | --admin ADDR] TABLE`: ask the
// running daemon to compact a table now.
func compactCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdcd compact", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file (for admin.listen)")
	admin := fs.String("admin", "", "the daemon's admin address, HOST:PORT")
	if _, code, done := commandFlags(fs, args, compactUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "cdcd compact: name one TABLE\n\n"+compactUsage)
		return exitUsage
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd compact:", err)
		return exitUsage
	}
	req, err := ac.newRequest(ctx, http.MethodPost, "/cdcd/compact/"+url.PathEscape(fs.Arg(0)), nil)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd compact:", err)
		return exitUsage
	}
	resp, err := ac.do(req)
	if err != nil {
		fmt.Fprintf(stderr, "cdcd compact: the daemon at %s does not answer: %v\n", ac.base, err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		fmt.Fprintf(stderr, "cdcd compact: %s", body)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: %s", fs.Arg(0), body)
	return exitOK
}

const maintenanceUsage = `usage: cdcd maintenance status [-c FILE | --admin HOST:PORT] [--json]
       cdcd maintenance verify -c FILE [TABLE...]`

// maintenanceCommand is `cdcd maintenance status|verify`.
func maintenanceCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "verify" {
		return verifyCommand(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, maintenanceUsage)
		return exitOK
	}
	if len(args) == 0 || args[0] != "status" {
		fmt.Fprintln(stderr, maintenanceUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("cdcd maintenance status", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file (for admin.listen)")
	admin := fs.String("admin", "", "the daemon's admin address, HOST:PORT")
	asJSON := fs.Bool("json", false, "print the JSON the daemon serves")
	pos, code, done := commandFlags(fs, args[1:], maintenanceUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, maintenanceUsage, stderr) {
		return exitUsage
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd maintenance:", err)
		return exitUsage
	}
	req, err := ac.newRequest(ctx, http.MethodGet, "/cdcd/maintenance", nil)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd maintenance:", err)
		return exitUsage
	}
	resp, err := ac.do(req)
	if err != nil {
		fmt.Fprintf(stderr, "cdcd maintenance: the daemon at %s does not answer: %v\n", ac.base, err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "cdcd maintenance: %s answered %s: %s", ac.base, resp.Status, body)
		return exitFailure
	}
	if *asJSON {
		stdout.Write(body)
		return exitOK
	}
	var tables []daemon.TableMaintenance
	if err := json.Unmarshal(body, &tables); err != nil {
		fmt.Fprintf(stderr, "cdcd maintenance: unexpected answer: %v\n", err)
		return exitFailure
	}
	printMaintenance(stdout, tables)
	return exitOK
}

func printMaintenance(w io.Writer, tables []daemon.TableMaintenance) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tFILES\tSIZE p10/p50/p90\tSMALL\tROWS\tDELETED\tMANIFESTS d/del\tSNAPSHOTS\tCOMPACTIONS\tLAST")
	for _, t := range tables {
		f := t.Files
		if f == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", t.Table)
			continue
		}
		last := "never"
		if f.LastCompaction != "" {
			if ts, err := time.Parse(time.RFC3339, f.LastCompaction); err == nil {
				last = time.Since(ts).Round(time.Second).String() + " ago"
			}
		}
		if f.LastError != "" {
			last += " (error: " + errors.New(f.LastError).Error() + ")"
		}
		fmt.Fprintf(tw, "%s\t%d in %d partitions\t%s/%s/%s\t%.0f%%\t%d\t%.1f%%\t%d/%d\t%d\t%d\t%s\n",
			t.Table, f.DataFiles, f.Partitions, size(f.SizeP10), size(f.SizeP50), size(f.SizeP90), 100*f.SmallShare,
			f.Rows, 100*f.DeletedRatio, f.DataManifests, f.DelManifests, f.Snapshots, f.CompactionRuns, last)
	}
	tw.Flush()
}

func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1fG", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1fM", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0fK", float64(b)/(1<<10))
	}
	return strings.TrimSpace(fmt.Sprintf("%dB", b))
}

// verifyCommand is `cdcd maintenance verify -c FILE [TABLE...]`: check the
// key index of each upsert table against the table, with the daemon
// stopped. Exit 0 when every index is right, 1 when one is not.
func verifyCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdcd maintenance verify", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file")
	if _, code, done := commandFlags(fs, args, maintenanceUsage, stdout, stderr); done {
		return code
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, maintenanceUsage)
		return exitUsage
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	checks, err := daemon.VerifyIndexes(ctx, cfg, fs.Args())
	for _, c := range checks {
		if len(c.Problems) == 0 {
			fmt.Fprintf(stdout, "%s: ok, %d keys, each at its row (snapshot %d)\n", c.Table, c.IndexKeys, c.TableSnapshot)
			continue
		}
		fmt.Fprintf(stdout, "%s: WRONG (%d live rows, %d keys; index at snapshot %d, table at %d)\n", c.Table, c.LiveRows, c.IndexKeys, c.IndexSnapshot, c.TableSnapshot)
		for _, p := range c.Problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
		fmt.Fprintf(stdout, "  to rebuild it: stop cdcd, remove %s, start cdcd\n", filepath.Join(cfg.DataDir, "index", c.Table))
	}
	if err != nil {
		fmt.Fprintf(stderr, "cdcd maintenance verify: %v\n", err)
		if strings.Contains(err.Error(), "lock") {
			fmt.Fprintln(stderr, "(is cdcd running? it holds the indexes open: stop it first)")
		}
		return exitFailure
	}
	for _, c := range checks {
		if len(c.Problems) > 0 {
			return exitFailure
		}
	}
	return exitOK
}
