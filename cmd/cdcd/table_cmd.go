package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/cdcd-dev/cdcd/daemon"
)

const tableUsage = `cdcd table — resolve a table a running daemon has paused

Usage:
  cdcd table skip [-c FILE | --admin HOST:PORT] TABLE

skip resolves what stops TABLE (public.orders, cdc.orders or its topic) when the
source side paused it:
  - a change that could not be read or written (a timestamp past year 294247, a NaN
    in a numeric(p,s), an array of other dimensions than its column declares, invalid
    UTF-8): that change moves to the dead-letter topic _cdcd_dead.<topic> (cdcd log
    consume --topic _cdcd_dead.<topic> --from-beginning shows it) and the table's
    later changes flow again, until another one stops it;
  - a table the source lost track of (dropped from the publication, re-created, a
    publication that stopped publishing an operation): the gap is accepted, recorded
    in the dead-letter topic, and the held changes flow. The mirror may then miss
    changes: cdcd snapshot -c FILE --replace TABLE repairs it instead.
A table paused for a schema the registry refused resumes with cdcd schema accept.

Exit codes: 0 done (resumed, or paused again by the next faulty change: shown),
1 the daemon refused or could not be reached, 2 bad usage.
`

// tableCommand implements `cdcd table ...`; args exclude "table".
func tableCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "skip" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprint(stdout, tableUsage)
			return exitOK
		}
		fmt.Fprint(stderr, tableUsage)
		return exitUsage
	}
	fs := flag.NewFlagSet("cdcd table skip", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file (for admin.listen)")
	admin := fs.String("admin", "", "the daemon's admin address, HOST:PORT")
	if _, code, done := commandFlags(fs, args[1:], tableUsage, stdout, stderr); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprint(stderr, "cdcd table skip: name one TABLE\n\n"+tableUsage)
		return exitUsage
	}
	ac, err := adminURL(*admin, *cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd table skip:", err)
		return exitUsage
	}
	res, err := postSkip(ctx, ac, fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "cdcd table skip:", err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "%s: skipped %s\n  (recorded in %s)\n", res.Table, res.Skipped, res.DeadTopic)
	if res.Resumed {
		fmt.Fprintln(stdout, "resumed: the held changes are in the table's topic again")
		return exitOK
	}
	if p := res.Paused; p != nil {
		fmt.Fprintf(stdout, "paused again (%s): %s\n", p.Kind, p.Reason)
		if p.Column != "" {
			fmt.Fprintf(stdout, "  key %s  column %s  value %s\n", p.Key, p.Column, p.Value)
		}
		fmt.Fprintf(stdout, "what to do: %s\n", p.Resolve)
	}
	return exitOK
}

// postSkip asks the daemon at base to skip what stops table.
func postSkip(ctx context.Context, ac *adminClient, table string) (daemon.SkipResult, error) {
	var res daemon.SkipResult
	base := ac.base
	req, err := ac.newRequest(ctx, http.MethodPost, "/cdcd/tables/"+url.PathEscape(table)+"/skip", nil)
	if err != nil {
		return res, err
	}
	resp, err := ac.do(req)
	if err != nil {
		return res, fmt.Errorf("the daemon at %s does not answer: %w (is cdcd running, and is admin.listen right?)", base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return res, err
	}
	if resp.StatusCode != http.StatusOK {
		return res, fmt.Errorf("%s", strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, &res); err != nil {
		return res, fmt.Errorf("%s answered something other than a skip result: %w", base, err)
	}
	return res, nil
}
