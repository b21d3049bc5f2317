// Command cdcd captures PostgreSQL changes into a durable log and Apache
// Iceberg tables.
//
// Exit codes:
//
//	0  success, or a clean stop on SIGINT/SIGTERM
//	1  the pipeline failed at run time (the log says what and what to do)
//	2  bad usage or an invalid config file
//	3  a hard stop: the graceful stop passed shutdown.deadline, or a second
//	   signal came (restarting is safe)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/demo"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

const usage = `cdcd — change data capture from PostgreSQL into Apache Iceberg

Usage:
  cdcd demo [--data-dir DIR] [--keep] [--mysql]  start a throwaway PostgreSQL (or MariaDB), capture a small shop, show the tables
  cdcd run -c FILE                      run the pipeline the config file describes
  cdcd validate -c FILE [-print]        check a config file; print every problem with its line
                                        (-print: the effective config, defaults filled, secrets redacted)
  cdcd log SUBCOMMAND [-c FILE] ...     inspect the embedded log (topics, describe, consume, groups, ...)
  cdcd log migrate -c FILE              move the embedded log to Kafka (FILE names Kafka)
  cdcd schema SUBCOMMAND [-c FILE] ...  inspect the schema registry; resolve refused schemas
  cdcd compact [-c FILE] TABLE          merge every small file of a table now (the daemon compacts in tiers on its own)
  cdcd snapshot [-c FILE] [--replace | --where SQL] TABLE...  re-read tables while they stream (--replace: repair the mirror)
  cdcd snapshot status|stop|pause|resume [-c FILE]  incremental snapshots' progress and control
  cdcd maintenance status [-c FILE]     files, sizes, deleted rows, manifests, last compactions per table
  cdcd maintenance verify -c FILE [TABLE...]  check each key index against its table (daemon stopped)
  cdcd status [-c FILE | --admin ADDR]  a running daemon's tables, snapshot, lag, slot and alerts
  cdcd table skip [-c FILE] TABLE       skip what stops a paused table (the change goes to a dead-letter topic)
  cdcd reconcile -c FILE [--repair] [TABLE...]  compare every row of the mirrors with the source (exit 4: a difference)
  cdcd bench [-rows N] [-scale F] ...   end-to-end benchmark against COPY and a plain decode loop (-h for flags)
  cdcd version                          print the version

Environment: CDCD_LOG_LEVEL=debug|info|warn|error (default info).
`

func main() {
	ctx, _ := signalContexts() // the second signal: a hard stop (signals.go)
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	logger := newLogger(stderr)
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr, logger)
	case "validate":
		return validateCmd(args[1:], stdout, stderr)
	case "demo":
		return demoCmd(ctx, args[1:], stdout, stderr, logger)
	case "log":
		if len(args) > 1 && args[1] == "migrate" {
			return logMigrateCmd(ctx, args[2:], stdout, stderr, logger)
		}
		largs, err := withLogDir(args[1:])
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		return logCommand(ctx, largs, stdin, stdout, stderr)
	case "schema":
		return schemaCommand(ctx, args[1:], stdin, stdout, stderr)
	case "compact":
		return compactCommand(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return snapshotCommand(ctx, args[1:], stdout, stderr)
	case "maintenance":
		return maintenanceCommand(ctx, args[1:], stdout, stderr)
	case "status":
		return statusCommand(ctx, args[1:], stdout, stderr)
	case "table":
		return tableCommand(ctx, args[1:], stdout, stderr)
	case "reconcile":
		return reconcileCommand(ctx, args[1:], stdout, stderr, logger)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr, logger)
	case "version", "--version":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprint(stdout, versionUsage)
			return exitOK
		}
		fmt.Fprintln(stdout, "cdcd", daemon.Version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "cdcd: unknown command %q\n\n%s", args[0], usage)
	return exitUsage
}

// withLogDir replaces -c FILE (or --config FILE) in a `cdcd log` command
// line with --log-dir <data_dir>/log from that config.
func withLogDir(args []string) ([]string, error) {
	out := make([]string, 0, len(args)+1)
	path := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-c" || a == "--config" || a == "-config":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("cdcd log: %s needs a file", a)
			}
			path = args[i+1]
			i++
		case strings.HasPrefix(a, "-c=") || strings.HasPrefix(a, "--config="):
			path = a[strings.IndexByte(a, '=')+1:]
		default:
			out = append(out, a)
		}
	}
	if path == "" {
		return out, nil
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return append(out, "--log-dir="+filepath.Join(cfg.DataDir, "log")), nil
}

func newLogger(w io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if v := os.Getenv("CDCD_LOG_LEVEL"); v != "" {
		_ = level.UnmarshalText([]byte(strings.ToUpper(v)))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

const runUsage = `usage: cdcd run -c FILE

Runs the pipeline the config file describes until SIGINT or SIGTERM (a graceful
stop; a second signal stops at once). Exit codes: 0 a clean stop, 1 the pipeline
failed (the log says what to do), 2 bad usage or an invalid config, 3 a hard stop.
`

const validateUsage = `usage: cdcd validate -c FILE [-print]

Checks a config file and prints every problem with its key path, line and column
(exit 2), or "FILE: ok". -print prints the effective config instead: every default
filled in, secrets redacted.
`

const demoUsage = `usage: cdcd demo [--data-dir DIR] [--keep] [--mysql]

Starts a throwaway PostgreSQL (--mysql: MariaDB) from the local binaries, creates a small shop, mirrors
it into Iceberg (initial load, then streaming under a short workload), and prints
what landed. Its admin listener stays on while it runs (the URL and the token for
writes are printed), so cdcd status, /metrics and the registry can be tried on it.
--keep keeps it capturing until Ctrl-C.
`

const versionUsage = `usage: cdcd version

Prints cdcd's version.
`

func validateCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cdcd validate", flag.ContinueOnError)
	path := fs.String("c", "", "config file (YAML)")
	print := fs.Bool("print", false, "print the effective config: every default filled in, secrets redacted")
	pos, code, done := commandFlags(fs, args, validateUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, validateUsage, stderr) {
		return exitUsage
	}
	if *path == "" {
		fmt.Fprintln(stderr, "cdcd validate: -c FILE is required")
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if *print {
		fmt.Fprint(stdout, cfg.String())
		return exitOK
	}
	fmt.Fprintf(stdout, "%s: ok\n", *path)
	return exitOK
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd run", flag.ContinueOnError)
	path := fs.String("c", "", "config file (YAML)")
	pos, code, done := commandFlags(fs, args, runUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, runUsage, stderr) {
		return exitUsage
	}
	if *path == "" {
		fmt.Fprint(stderr, "cdcd run: -c FILE is required\n\n"+runUsage)
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	term := newTermLine(stderr)
	if term != nil {
		logger = newLogger(term) // the log above the progress line
	}
	applyMemoryLimit()
	stopProfiles := startProfiles(logger)
	defer stopProfiles()
	d, err := daemon.New(ctx, cfg, logger)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return exitFailure
	}
	stopProgress := term.follow(ctx, d.Status, time.Second)
	err = d.Run(ctx, daemon.WithHardStop(hardStopOf(ctx)))
	stopProgress()
	if errors.Is(err, daemon.ErrHardStop) {
		// Components may still be running: exit without waiting for them.
		logger.Error("hard stop", "err", err, "what_to_do", "nothing: restarting is safe")
		return exitHardStop
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("pipeline failed", "err", err)
		return exitFailure
	}
	return exitOK
}

func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd demo", flag.ContinueOnError)
	dir := fs.String("data-dir", "./cdcd-demo", "where the demo keeps the log, catalog and warehouse (emptied first)")
	keep := fs.Bool("keep", false, "keep capturing after the summary until Ctrl-C")
	my := fs.Bool("mysql", false, "the shop in a throwaway MariaDB (from the local binaries) instead of PostgreSQL")
	pos, code, done := commandFlags(fs, args, demoUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, demoUsage, stderr) {
		return exitUsage
	}
	opts := demo.Options{DataDir: *dir, Keep: *keep, MySQL: *my, Out: stdout}
	if term := newTermLine(stdout); term != nil {
		opts.Out = term // the narrative above the progress line
		opts.Progress = func(status func() daemon.Status) func() { return term.follow(ctx, status, time.Second) }
	}
	err := demo.Run(ctx, opts, logger)
	if err != nil && !errors.Is(err, context.Canceled) {
		logger.Error("demo failed", "err", err)
		return exitFailure
	}
	return exitOK
}
