package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/reconcile"
)

// exitDiffers: cdcd reconcile found a difference (that --repair did not
// remove).
const exitDiffers = 4

const reconcileUsage = `usage: cdcd reconcile -c FILE [--json] [--repair] [--max-rows-per-second N] [TABLE...]

Compares every row of each table's Iceberg mirror with the source, while
the pipeline runs (or with the daemon stopped): hashes of key ranges on
both sides, then the keys of the ranges that differ. Rows changed while
they were compared are left out and compared again (a difference reported
is real, never a race). TABLE is schema.table (a bare name is in public) or
the Iceberg table's name; all tables when none is named.

--repair re-reads the keys found different from the source through the
running daemon's incremental snapshot (cdcd snapshot --where), then
compares them again.

Exit status: 0 every table equal; 4 a difference found (and, with
--repair, not repaired); 1 a table could not be compared or the run
failed; 2 bad usage or config.`

// reconcileCommand is `cdcd reconcile`.
func reconcileCommand(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("c", "", "config file")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	rate := fs.Int("max-rows-per-second", 0, "throttle the source reads (default: reconcile.max_rows_per_second)")
	chunk := fs.Int("chunk-rows", 0, "rows per source read (default: reconcile.chunk_rows)")
	tables, err := parseInterleaved(fs, args)
	if err != nil || *cfgPath == "" {
		fmt.Fprintln(stderr, reconcileUsage)
		return exitUsage
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	reps, err := daemon.Reconcile(ctx, cfg, daemon.ReconcileOptions{Tables: tables,
		Config: reconcile.Config{MaxRowsPerSecond: *rate, ChunkRows: *chunk}}, logger)
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
		case !r.Equal():
			code = exitDiffers
		}
	}
	return code
}
