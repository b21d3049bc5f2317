package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/cdcd-dev/cdcd/daemon"
)

// renderOutbox writes the outbox relay's lines of cdcd status (nothing
// without a relay).
func renderOutbox(w io.Writer, o *daemon.OutboxStatus) {
	if o == nil {
		return
	}
	from := o.Table
	if o.MessagePrefix != "" {
		if from != "" {
			from += " and "
		}
		from += "messages " + o.MessagePrefix
	}
	fmt.Fprintf(w, "outbox %s: %s events relayed, lag %s", from, thousands(o.Events), secondsText(o.LagSeconds))
	if o.TableBytes >= 0 {
		fmt.Fprintf(w, ", table %s (about %s rows)", bytesText(o.TableBytes), thousands(o.TableRows))
	}
	if o.Malformed > 0 {
		fmt.Fprintf(w, ", %s unroutable (in %s)", thousands(o.Malformed), daemon.TopicOutboxDead)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tDELIVERED\tQUEUED\tFAILED ATTEMPTS\tDEAD-LETTERED\tSTATE")
	for _, t := range o.Targets {
		state := "ok"
		if t.FailingSeconds > 0 {
			state = fmt.Sprintf("failing for %s: %s", secondsText(t.FailingSeconds), t.LastError)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, thousands(t.Delivered), thousands(t.Queued), thousands(t.Failures),
			thousands(t.DeadLettered), state)
	}
	tw.Flush()
	fmt.Fprintln(w)
}
