package faultsuite

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestReplacedLogNeverReadAsTheTables (issue 24 item 1): with the catalog
// and warehouse outside data_dir, data_dir is removed (as the slot_missing
// message advises) and the pipeline starts over with a new log, whose
// offsets pass the table's old ones. The table must never take the new
// log's offsets for its own: until the new log's initial load has written
// its reset markers it is paused, naming the replaced log and the
// re-snapshot (with the alert), and has taken none of the new log's
// records; at the markers it resumes, is truncated and rebuilt, and the
// mirror ends equal. Never a quiet difference.
func TestReplacedLogNeverReadAsTheTables(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
			INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 300) g;`,
		Tables:         []string{"public.a"},
		CatalogOutside: true,
	})
	p.start()
	p.waitCaughtUp()
	p.requireMirror()
	p.stop()

	// The slot is gone, data_dir removed; meanwhile rows changed, and the
	// new log's initial load holds more records than the table has read.
	p.exec(`SELECT pg_drop_replication_slot($1)`, p.Names.Slot)
	if err := os.RemoveAll(p.DataDir); err != nil {
		t.Fatal(err)
	}
	p.exec(`DELETE FROM a WHERE id % 3 = 0`)
	p.exec(`UPDATE a SET v = 'changed' WHERE id % 5 = 0`)
	p.exec(`INSERT INTO a SELECT g, 'new' || g FROM generate_series(301, 700) g`)
	p.start()
	lsn := p.markLSN()
	st := p.waitFor("the table paused or rebuilt", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Paused {
				return true
			}
		}
		return st.CaughtUp(lsn)
	})
	if len(st.Tables) == 1 && st.Tables[0].Paused {
		ts := p.waitPaused("cdc.a", "belong to log topic", "the log was replaced", "cdcd snapshot -c FILE --replace cdc.a")
		if !strings.Contains(ts.PausedFix, "--replace cdc.a") {
			t.Errorf("the fix /status shows does not name the re-snapshot: %q", ts.PausedFix)
		}
		// Paused means untouched: the table still holds what the old log
		// gave it, none of the new log's records (the daemon may resume it
		// any moment now, at the load's reset markers: a table rebuilt
		// meanwhile holds them all).
		if d := p.diff("public.a"); len(d.Missing) != 400 && !d.Equal() {
			t.Errorf("the paused table took some records of the new log: %s", d)
		}
		t.Log("the table paused until the new log's reset markers")
		p.waitResumed("cdc.a")
	}
	p.waitCaughtUp()
	p.requireMirror()
	if !p.logContains("resuming at the reset markers") {
		t.Error("the table caught up without resuming at the new log's reset markers")
	}
}

// TestDamagedSegmentRepairedByResnapshot (issue 24 item 2, the fix): a
// segment damaged in records the table has not committed makes the table
// pause, naming the lost offsets, without passing them; `cdcd snapshot
// --replace` writes reset markers after the loss, where the table resumes,
// and the mirror ends equal.
func TestDamagedSegmentRepairedByResnapshot(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:        `CREATE TABLE a (id int PRIMARY KEY, v text)`,
		Tables:     []string{"public.a"},
		Partitions: 1,
	})
	p.setCommitInterval("2m") // the log holds what the table has not committed
	p.start()
	p.waitFor("streaming", 3*time.Minute, func(st daemon.Status) bool { return st.State == daemon.StateStreaming })
	for i := 0; i < 40; i++ {
		p.exec(fmt.Sprintf(`INSERT INTO a SELECT g, repeat('y', 100) FROM generate_series(%d, %d) g`, i*50+1, i*50+50))
	}
	st := p.waitFor("2000 changes in the log", 3*time.Minute, func(st daemon.Status) bool {
		return len(st.Tables) == 1 && st.Tables[0].EventsIn >= 2000
	})
	topic := st.Tables[0].Topic
	p.kill() // before the table commits them
	damageMiddle(t, p.segmentOf(topic, 0))

	p.writeConfig() // the harness's short commit interval again
	p.start()
	ts := p.waitPaused("cdc.a", "lost offsets [", "partition 0", "cdcd snapshot -c FILE --replace cdc.a")
	t.Logf("paused: %s", ts.PausedReason)
	p.exec(`UPDATE a SET v = 'after the damage' WHERE id % 7 = 0`)
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", "public.a")
	if code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s%s", code, out, errOut)
	}
	p.snapshotsDone(1, 3*time.Minute)
	p.waitResumed("cdc.a")
	p.waitCaughtUp()
	p.requireMirror()
	if !p.logContains("skipping to the reset marker after them") {
		t.Error("the daemon's log does not say the table skipped the lost offsets to the reset marker")
	}
}

// damageMiddle overwrites 16 bytes in the middle of a segment file.
func damageMiddle(t *testing.T, seg string) {
	t.Helper()
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", 16)), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
}

// TestCatalogFileDeletedUnderDaemon (issue 24 item 6): the SQLite catalog
// file removed under a running daemon stops its tables loudly — paused,
// naming the file and the fix — instead of committing into a file no
// reader sees; putting the file back (a backup taken earlier) and starting
// again ends in an equal mirror.
func TestCatalogFileDeletedUnderDaemon(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text);
			INSERT INTO a SELECT g, 'v' || g FROM generate_series(1, 200) g;`,
		Tables:         []string{"public.a"},
		CatalogOutside: true,
	})
	p.start()
	p.waitCaughtUp()
	p.stop()
	backup := p.Catalog + ".backup"
	copyFile(t, p.Catalog, backup)
	p.start()
	p.exec(`UPDATE a SET v = 'before' WHERE id <= 50`)
	p.waitCaughtUp()

	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(p.Catalog + suffix); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	p.exec(`UPDATE a SET v = 'after' WHERE id > 150`)
	ts := p.waitPaused("cdc.a", "catalog file", p.Catalog, "deleted")
	if !strings.Contains(ts.PausedFix, "put the catalog file back") {
		t.Errorf("the fix /status shows: %q", ts.PausedFix)
	}
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", "catalog file")

	// The fix: stop, put the file back, start.
	p.kill()
	for _, suffix := range []string{"-wal", "-shm"} {
		_ = os.Remove(p.Catalog + suffix)
	}
	copyFile(t, backup, p.Catalog)
	p.start()
	p.waitCaughtUp()
	p.requireMirror()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWarehouseFileDeleted (issue 24 item 6): a data file deleted from the
// warehouse stops the compaction that cannot read it (no "rewrite failed;
// will plan again" loop) and pauses the table, naming the file and the
// re-snapshot, with an alert; `cdcd snapshot --replace` rebuilds the table
// and the mirror ends equal.
func TestWarehouseFileDeleted(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text)`,
		Tables: []string{"public.a"},
	})
	p.start()
	for i := 0; i < 6; i++ { // several commits, several data files
		p.exec(fmt.Sprintf(`INSERT INTO a SELECT g, 'v' FROM generate_series(%d, %d) g`, i*100+1, i*100+100))
		p.waitCaughtUp()
	}
	var victim string
	err := filepath.WalkDir(p.Warehouse, func(path string, d os.DirEntry, err error) error {
		if err == nil && victim == "" && strings.HasSuffix(path, ".parquet") && strings.Contains(path, string(filepath.Separator)+"data"+string(filepath.Separator)) {
			victim = path
		}
		return err
	})
	if err != nil || victim == "" {
		t.Fatalf("no data file to delete: %v", err)
	}
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := p.cdcd("compact", "-c", p.CfgPath, "cdc.a"); code != 0 {
		t.Fatalf("cdcd compact: exit %d: %s%s", code, out, errOut)
	}
	ts := p.waitPaused("cdc.a", victim, "missing from the warehouse", "cdcd snapshot -c FILE --replace cdc.a")
	t.Logf("paused: %s", ts.PausedReason)
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", "missing from the warehouse")
	if p.logContains("rewrite failed; will plan again") {
		t.Error("the compactor planned the rewrite of a missing file again")
	}
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", "public.a")
	if code != 0 {
		t.Fatalf("cdcd snapshot --replace: exit %d: %s%s", code, out, errOut)
	}
	p.snapshotsDone(1, 3*time.Minute)
	p.waitResumed("cdc.a")
	p.waitCaughtUp()
	p.requireMirror()
}

// waitResumed waits until table is no longer paused (a paused table is
// looked at again every 30 s).
func (p *pipeline) waitResumed(table string) {
	p.t.Helper()
	p.waitFor("table "+table+" resumed", 3*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if (tb.Table == table || tb.Source == table) && tb.Paused {
				return false
			}
		}
		return true
	})
}
