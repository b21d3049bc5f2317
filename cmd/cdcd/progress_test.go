package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// TestTermLine: what is written goes above the status line, which is
// drawn again below it; set replaces the line, cut to the terminal's
// width, and "" clears it.
func TestTermLine(t *testing.T) {
	var b bytes.Buffer
	tl := &termLine{w: &b, width: 20}
	step := func(want string, do func()) {
		t.Helper()
		b.Reset()
		do()
		if b.String() != want {
			t.Errorf("wrote %q, want %q", b.String(), want)
		}
	}
	step("log 1\n", func() { tl.Write([]byte("log 1\n")) })
	step("\r\x1b[Kloading 10%", func() { tl.set("loading 10%") })
	step("", func() { tl.set("loading 10%") }) // unchanged: not drawn again
	step("\r\x1b[Klog 2\nloading 10%", func() { tl.Write([]byte("log 2\n")) })
	step("\r\x1b[Ksnapshot public.lo…", func() { tl.set("snapshot public.long_table 10%") })
	step("\r\x1b[K", func() { tl.set("") })
	step("log 3\n", func() { tl.Write([]byte("log 3\n")) })
}

// TestTermLineOnlyOnTerminals: a file or a buffer gets no status line.
func TestTermLineOnlyOnTerminals(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if newTermLine(f) != nil || newTermLine(&bytes.Buffer{}) != nil {
		t.Error("a status line on a file or a buffer")
	}
	var none *termLine
	none.follow(t.Context(), func() daemon.Status { return daemon.Status{} }, time.Millisecond)() // a no-op, no panic
}

// TestProgressText: the initial load and each unfinished incremental
// snapshot, with rows, per cent, rate and time left where known.
func TestProgressText(t *testing.T) {
	st := daemon.Status{State: daemon.StateLoading,
		Source: daemon.SourceStatus{SnapshotRows: 123456, LoadRowsPerSecond: 4000, LoadETASeconds: 95},
		Snapshots: []snapshot.Progress{
			{Table: "public.a", State: "running", Rows: 500, Percent: 25.9, RowsPerSecond: 100, ETA: 15 * time.Second},
			{Table: "public.b", State: "queued", Percent: -1},
			{Table: "public.c", State: "done", Rows: 9, Percent: 100, Finished: time.Now()},
		},
		Tables: []daemon.TableStatus{
			{Table: "cdc.a", Snapshot: daemon.SnapshotStatus{Rows: 500, Committed: 120, CommittedPercent: 6.2, CommitRowsPerSecond: 40, CommitETASeconds: 47}},
			{Table: "cdc.c", Snapshot: daemon.SnapshotStatus{Rows: 9, Committed: 9, CommittedPercent: 100, AllCommitted: true}},
			{Table: "cdc.idle", Snapshot: daemon.SnapshotStatus{AllCommitted: false}},
		}}
	want := "initial load: 123,456 rows, 4,000 rows/s, about 1m35s left | snapshot public.a running: 500 rows (25%), 100 rows/s, about 15s left | snapshot public.b queued: 0 rows" +
		" | cdc.a into iceberg: 120 rows (6%), 40 rows/s, about 47s left"
	if got := progressText(st); got != want {
		t.Errorf("progressText:\n got %q\nwant %q", got, want)
	}
	if got := progressText(daemon.Status{State: daemon.StateStreaming}); got != "" {
		t.Errorf("nothing running: %q, want no line", got)
	}
}

// TestProgressBar: cdcd status's SNAPSHOT column shows the load as far as
// Iceberg — the share committed, and while it reads how much it read —
// with the commit rate and time left (the read's before a commit landed);
// a table whose read is over but whose rows are not all committed is not
// at 100%.
func TestProgressBar(t *testing.T) {
	for _, c := range []struct {
		s    daemon.SnapshotStatus
		want string
	}{
		{daemon.SnapshotStatus{Rows: 500, Estimated: 2000, Percent: 25, Incremental: "running", RowsPerSecond: 100, ETASeconds: 15, CommittedPercent: 0},
			"snapshot running [....................]   0% in iceberg, read 25%, 100 rows/s, about 15s left"},
		{daemon.SnapshotStatus{Rows: 500, Estimated: 2000, Percent: 25, Incremental: "running", RowsPerSecond: 100, ETASeconds: 15,
			Committed: 400, CommittedPercent: 20, CommitRowsPerSecond: 80, CommitETASeconds: 20},
			"snapshot running [####................]  20% in iceberg, read 25%, 80 rows/s, about 20s left"},
		{daemon.SnapshotStatus{Rows: 1000, Percent: 100, Done: true, Committed: 130, CommittedPercent: 13, CommitRowsPerSecond: 50, CommitETASeconds: 17.4},
			"[##..................]  13% in iceberg, 50 rows/s, about 17s left"},
		{daemon.SnapshotStatus{Rows: 7, Percent: 100, Done: true, Committed: 7, CommittedPercent: 100, AllCommitted: true}, "[####################] 100%"},
	} {
		if got := progressBar(c.s); got != c.want {
			t.Errorf("progressBar(%+v)\n got %q\nwant %q", c.s, got, c.want)
		}
	}
}
