package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/cdcd-dev/cdcd/internal/bench"
)

const benchUsage = `usage: cdcd bench [flags]

The end-to-end benchmark: an initial load, a streaming workload and a latency phase
through a real daemon, each against the raw limit measured in the same run (COPY
binary, a plain decode loop). See BENCHMARKS.md.
`

// benchCmd is `cdcd bench`: the end-to-end benchmark against the raw
// limits (internal/bench). The daemon runs as a child: this binary with
// `run -c FILE`.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd bench", flag.ContinueOnError)
	var o bench.Options
	fs.StringVar(&o.Source, "source", "postgres", "postgres, or mariadb: a throwaway MariaDB, the load against SELECT * and streaming against a plain BinlogSyncer loop")
	fs.StringVar(&o.DSN, "dsn", "", "database to use (wal_level=logical); default: start a throwaway PostgreSQL 15")
	fs.IntVar(&o.Rows, "rows", 5_000_000, "rows of the initial load")
	fs.Float64Var(&o.Scale, "scale", 1, "size of the streaming workload: 1 is 2M inserts, 500k updates, 200k deletes")
	fs.IntVar(&o.TxRows, "tx-rows", 1000, "rows per streaming transaction")
	fs.IntVar(&o.LatencyRate, "latency-rate", 10_000, "events/s of the latency phase")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", time.Minute, "how long the latency phase writes")
	fs.DurationVar(&o.CommitInterval, "commit-interval", 10*time.Second, "the sink's commit_interval")
	fs.IntVar(&o.CopyRuns, "copy-runs", 3, "how often COPY binary (MariaDB: SELECT * and the binlog decode loop) is measured (the median counts)")
	fs.StringVar(&o.Dir, "dir", "", "where the daemon keeps its data (default: a temporary directory, removed after)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary directory")
	fs.BoolVar(&o.NoScan, "no-scan", false, "skip the final iceberg-go scan (the snapshot summary is still checked)")
	fs.StringVar(&o.ProfileDir, "profile", "", "write CPU and heap profiles of each daemon phase into this directory")
	md := fs.Bool("markdown", false, "print the result table again as Markdown")
	var env multiFlag
	fs.Var(&env, "child-env", "NAME=VALUE for the daemon's environment, e.g. GOMEMLIMIT=250MiB (repeatable)")
	pos, code, done := commandFlags(fs, args, benchUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, benchUsage, stderr) {
		return exitUsage
	}
	switch o.Source {
	case "postgres":
		o.Source = ""
	case bench.SourceMariaDB:
	default:
		fmt.Fprintf(stderr, "cdcd bench: -source must be postgres or mariadb, got %q\n", o.Source)
		return exitUsage
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "cdcd bench:", err)
		return exitFailure
	}
	o.ChildEnv = env
	o.Command = func(cfg string) *exec.Cmd { return exec.Command(self, "run", "-c", cfg) }
	o.Out, o.Logger = stdout, logger
	res, err := bench.Run(ctx, o)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return exitFailure
		}
		logger.Error("bench failed", "err", err)
		return exitFailure
	}
	if *md {
		res.Print(stdout, true)
	}
	return exitOK
}

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return fmt.Sprint([]string(*m)) }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
