package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

const snapshotUsage = `usage: cdcd snapshot [-c FILE | --admin HOST:PORT] [--where SQL | --replace] TABLE...
       cdcd snapshot status [-c FILE | --admin HOST:PORT] [--json]
       cdcd snapshot stop [-c FILE | --admin HOST:PORT] [TABLE...]
       cdcd snapshot pause|resume [-c FILE | --admin HOST:PORT]

Asks the running daemon to re-read tables by key chunks while their changes
stream (an incremental snapshot). --replace repairs a table whose mirror
cannot be trusted: the sink empties it at a reset marker and the snapshot
fills it again (it also lifts a pause of the table). --where reads only the
rows matching an SQL condition. TABLE is schema.table (a bare name is in
public) or the Iceberg table's name.`

// snapshotCommand is `cdcd snapshot ...`.
func snapshotCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	verb := ""
	if len(args) > 0 {
		switch args[0] {
		case "status", "stop", "pause", "resume":
			verb, args = args[0], args[1:]
		case "-h", "-help", "--help", "help":
			fmt.Fprintln(stdout, snapshotUsage)
			return exitOK
		}
	}
	fs := flag.NewFlagSet("cdcd snapshot", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file (for admin.listen)")
	admin := fs.String("admin", "", "the daemon's admin address, HOST:PORT")
	where := fs.String("where", "", "read only the rows matching this SQL condition")
	replace := fs.Bool("replace", false, "replace the table's contents (a reset marker first): the repair of an untrusted mirror")
	asJSON := fs.Bool("json", false, "status: print the JSON the daemon serves")
	tables, code, done := commandFlags(fs, args, snapshotUsage, stdout, stderr)
	if done {
		return code
	}
	if verb == "status" || verb == "pause" || verb == "resume" {
		if !noArgs(fs, tables, snapshotUsage, stderr) {
			return exitUsage
		}
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd snapshot:", err)
		return exitUsage
	}
	c := &snapshotClient{ctx: ctx, ac: ac, stderr: stderr}
	switch verb {
	case "status":
		return c.snapshotStatus(stdout, *asJSON)
	case "stop":
		return c.post(stdout, "/cdcd/snapshot/stop", daemon.SnapshotRequest{Tables: tables}, http.StatusOK)
	case "pause", "resume":
		return c.post(stdout, "/cdcd/snapshot/"+verb, nil, http.StatusOK)
	}
	if len(tables) == 0 {
		fmt.Fprintln(stderr, snapshotUsage)
		return exitUsage
	}
	if *replace && *where != "" {
		fmt.Fprintln(stderr, "cdcd snapshot: --where reads part of a table and --replace replaces all of it: use one")
		return exitUsage
	}
	return c.post(stdout, "/cdcd/snapshot", daemon.SnapshotRequest{Tables: tables, Where: *where, Replace: *replace}, http.StatusAccepted)
}

// snapshotClient calls the daemon's snapshot endpoints.
type snapshotClient struct {
	ctx    context.Context
	ac     *adminClient
	stderr io.Writer
}

// post sends body as JSON and prints the answer.
func (c *snapshotClient) post(stdout io.Writer, path string, body any, want int) int {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			fmt.Fprintln(c.stderr, "cdcd snapshot:", err)
			return exitFailure
		}
		rd = bytes.NewReader(b)
	}
	req, err := c.ac.newRequest(c.ctx, http.MethodPost, path, rd)
	if err != nil {
		fmt.Fprintln(c.stderr, "cdcd snapshot:", err)
		return exitUsage
	}
	req.Header.Set("Content-Type", "application/json")
	out, code := c.do(req, want)
	if code == exitOK {
		fmt.Fprint(stdout, string(out))
	}
	return code
}

func (c *snapshotClient) do(req *http.Request, want int) ([]byte, int) {
	resp, err := c.ac.do(req)
	if err != nil {
		fmt.Fprintf(c.stderr, "cdcd snapshot: the daemon at %s does not answer: %v (is cdcd run -c FILE running?)\n", c.ac.base, err)
		return nil, exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		fmt.Fprintf(c.stderr, "cdcd snapshot: %s", body)
		if resp.StatusCode == http.StatusBadRequest {
			return nil, exitUsage
		}
		return nil, exitFailure
	}
	return body, exitOK
}

// snapshotStatus prints the snapshots' progress.
func (c *snapshotClient) snapshotStatus(stdout io.Writer, asJSON bool) int {
	req, err := c.ac.newRequest(c.ctx, http.MethodGet, "/cdcd/snapshots", nil)
	if err != nil {
		fmt.Fprintln(c.stderr, "cdcd snapshot status:", err)
		return exitUsage
	}
	body, code := c.do(req, http.StatusOK)
	if code != exitOK {
		return code
	}
	if asJSON {
		fmt.Fprint(stdout, string(body))
		return exitOK
	}
	var ps []snapshot.Progress
	if err := json.Unmarshal(body, &ps); err != nil {
		fmt.Fprintln(c.stderr, "cdcd snapshot status:", errors.Join(errors.New("unexpected answer"), err))
		return exitFailure
	}
	if len(ps) == 0 {
		fmt.Fprintln(stdout, "no snapshots since the daemon started")
		return exitOK
	}
	fmt.Fprint(stdout, renderSnapshots(ps))
	return exitOK
}

// renderSnapshots is the status table.
func renderSnapshots(ps []snapshot.Progress) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tSTATE\tKIND\tROWS\tPROGRESS\tRATE\tETA\tSTARTED")
	for _, p := range ps {
		kind := "re-read"
		switch {
		case p.Replace:
			kind = "replace"
		case p.Where != "":
			kind = "where " + p.Where
		}
		if p.Origin != "" {
			kind += " (" + p.Origin + ")"
		}
		pct := "?"
		if p.Percent >= 0 {
			pct = fmt.Sprintf("%.0f%%", p.Percent)
		}
		eta := "-"
		if p.ETA > 0 {
			eta = p.ETA.Round(time.Second).String()
		}
		state := p.State
		if p.Error != "" {
			state += ": " + p.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%.0f/s\t%s\t%s\n", p.Table, state, kind, p.Rows, pct, p.RowsPerSecond, eta,
			p.Started.Local().Format(time.DateTime))
	}
	tw.Flush()
	return b.String()
}
