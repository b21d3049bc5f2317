package main

import (
	"context"
	"fmt"
	"io"
)

// logCommand is replaced by the log CLI when it lands.
func logCommand(_ context.Context, _ []string, _ io.Reader, _ io.Writer, stderr io.Writer) int {
	fmt.Fprintln(stderr, "cdcd log: not available in this build")
	return exitUsage
}
