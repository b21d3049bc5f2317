package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/reconcile"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// exitDiffers: cdcd reconcile found a difference (that --repair did not
// remove).
const exitDiffers = 4

const reconcileUsage = `usage: cdcd reconcile -c FILE [--json] [--repair [--admin HOST:PORT] [--repair-timeout D]] [--max-rows-per-second N] [TABLE...]

Compares every row of each table's Iceberg mirror with the source, while
the pipeline runs (or with the daemon stopped): hashes of key ranges on
both sides, then the keys of the ranges that differ. Rows changed while
they were compared are left out and compared again (a difference reported
is real, never a race). TABLE is schema.table (a bare name is in public) or
the Iceberg table's name; all tables when none is named.

--repair re-reads the rows of the keys found different through the running
daemon's incremental snapshot (cdcd snapshot --where with a condition on
exactly those keys; cdcd snapshot --replace of the whole table when a key
is in Iceberg only or live more than once there, or more than 10000 keys
differ), waits until the snapshot is done, then compares those keys (after
a replace, the table) again. The daemon must be running (its admin API:
--admin, else admin.listen of -c FILE).

Exit status: 0 every table equal (with --repair: equal once repaired); 4 a
difference found (with --repair: one left after the repair, or the repair
failed); 1 a table could not be compared or the run failed; 2 bad usage or
config.`

// reconcileCommand is `cdcd reconcile`.
func reconcileCommand(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd reconcile", flag.ContinueOnError)
	cfgPath := fs.String("c", "", "config file")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rate := fs.Int("max-rows-per-second", 0, "throttle the source reads (default: reconcile.max_rows_per_second)")
	chunk := fs.Int("chunk-rows", 0, "rows per source read (default: reconcile.chunk_rows)")
	parallel := fs.Int("parallel", 0, "key ranges read from the source at once (default: reconcile.parallel)")
	segment := fs.Int("segment-rows", 0, "rows read from the source before they are compared with the mirror; up to twice as many mirror rows' keys and hashes are held in memory (default 4194304)")
	repair := fs.Bool("repair", false, "re-snapshot the keys found different through the running daemon, then compare them again")
	admin := fs.String("admin", "", "--repair: the daemon's admin address, HOST:PORT (default: admin.listen of -c FILE)")
	repairTimeout := fs.Duration("repair-timeout", time.Hour, "--repair: how long to wait for each table's snapshot")
	tables, code, done := commandFlags(fs, args, reconcileUsage, stdout, stderr)
	if done {
		return code
	}
	if *cfgPath == "" {
		fmt.Fprintln(stderr, reconcileUsage)
		return exitUsage
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	defer startProfiles(logger)() // CDCD_CPUPROFILE, CDCD_HEAPPROFILE
	opts := daemon.ReconcileOptions{Tables: tables, RepairTimeout: *repairTimeout,
		Config: reconcile.Config{MaxRowsPerSecond: *rate, ChunkRows: *chunk, SegmentRows: *segment, Parallel: *parallel}}
	ac, acErr := adminURL(*admin, *cfgPath)
	if *repair {
		if acErr != nil {
			fmt.Fprintln(stderr, "cdcd reconcile --repair:", acErr)
			return exitUsage
		}
		opts.Repair = adminSnapshots{ac}
	}
	if acErr == nil {
		opts.Running = daemonRunning(ac, cfg.Pipeline)
	}
	reps, err := daemon.Reconcile(ctx, cfg, opts, logger)
	if err != nil {
		fmt.Fprintln(stderr, "cdcd reconcile:", err)
		return exitFailure
	}
	if *asJSON {
		if err := reconcile.WriteJSON(stdout, reps); err != nil {
			fmt.Fprintln(stderr, "cdcd reconcile:", err)
			return exitFailure
		}
	} else {
		reconcile.WriteText(stdout, reps)
	}
	return reconcileExit(reps)
}

// reconcileExit is the exit status of reports.
func reconcileExit(reps []*reconcile.TableReport) int {
	code := exitOK
	for _, r := range reps {
		switch {
		case r.Error != "":
			return exitFailure
		case !r.EqualNow():
			code = exitDiffers
		}
	}
	return code
}

// daemonRunning says whether the pipeline's daemon answers at its admin
// API: /status names the pipeline, or the API refuses the request (a
// token this command lacks: a daemon answers, though it cannot say
// which). No answer: no daemon runs there.
func daemonRunning(ac *adminClient, pipeline string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		req, err := ac.newRequest(ctx, http.MethodGet, "/status", nil)
		if err != nil {
			return false
		}
		resp, err := ac.do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return true
		case http.StatusOK:
			var st struct {
				Pipeline string `json:"pipeline"`
			}
			return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st) == nil && st.Pipeline == pipeline
		}
		return false
	}
}

// adminSnapshots runs a repair's snapshots through the daemon's admin API.
type adminSnapshots struct{ ac *adminClient }

func (s adminSnapshots) Snapshot(ctx context.Context, req daemon.SnapshotRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = s.call(ctx, http.MethodPost, "/cdcd/snapshot", bytes.NewReader(b), http.StatusAccepted)
	return err
}

func (s adminSnapshots) Progress(ctx context.Context) ([]snapshot.Progress, error) {
	body, err := s.call(ctx, http.MethodGet, "/cdcd/snapshots", nil, http.StatusOK)
	if err != nil {
		return nil, err
	}
	var out []snapshot.Progress
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("the daemon's snapshot progress: %w", err)
	}
	return out, nil
}

func (s adminSnapshots) call(ctx context.Context, method, path string, body io.Reader, want int) ([]byte, error) {
	req, err := s.ac.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.ac.do(req)
	if err != nil {
		return nil, fmt.Errorf("the daemon at %s does not answer: %w (a repair needs cdcd run -c FILE running)", s.ac.base, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(out)))
	}
	return out, nil
}
