package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
)

const migrateUsage = `usage: cdcd log migrate -c FILE [--log-dir DIR]

Copies the embedded log into Kafka and moves the tables' offsets there, so the
pipeline goes on on Kafka without a re-snapshot (README: "Moving to Kafka").
FILE is the pipeline's config already naming Kafka (log.backend: kafka, log.kafka,
schema_registry); the embedded log is read from <data_dir>/log, or DIR.
The pipeline must be stopped; the Kafka topics must be new or empty.
`

// logMigrateCmd runs `cdcd log migrate`.
func logMigrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	fs := flag.NewFlagSet("cdcd log migrate", flag.ContinueOnError)
	path := fs.String("c", "", "config file naming the Kafka backend")
	logDir := fs.String("log-dir", "", "the embedded log directory (default <data_dir>/log)")
	pos, code, done := commandFlags(fs, args, migrateUsage, stdout, stderr)
	if done {
		return code
	}
	if !noArgs(fs, pos, migrateUsage, stderr) {
		return exitUsage
	}
	if *path == "" {
		fmt.Fprint(stderr, migrateUsage)
		return exitUsage
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitUsage
	}
	rep, err := daemon.MigrateLog(ctx, cfg, *logDir, stdout, logger)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFailure
	}
	fmt.Fprintf(stdout, "moved: %d topics, %d tables, %d schema versions; start the pipeline with this config\n",
		len(rep.Topics), len(rep.Tables), rep.Schemas)
	return exitOK
}
