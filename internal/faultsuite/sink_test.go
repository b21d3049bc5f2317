package faultsuite

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestReplacedLogNeverReadAsTheTables (issue 24 item 1): with the catalog
// and warehouse outside data_dir, data_dir is removed (as the slot_missing
// message advises) and the pipeline starts over with a new log, whose
// offsets pass the table's old ones. The table must never take the new
// log's offsets for its own: it ends either paused, naming the replaced
// log and the re-snapshot that rebuilds it, or — once the new log's load
// begins with reset markers — rebuilt from the new log into an equal
// mirror. Never a quiet difference.
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
	if len(st.Tables) != 1 || !st.Tables[0].Paused {
		// Rebuilt from the new log's reset markers.
		p.requireMirror()
		return
	}
	ts := p.waitPaused("cdc.a", "belong to log topic", "the log was replaced", "cdcd snapshot -c FILE --replace cdc.a")
	if !strings.Contains(ts.PausedFix, "--replace cdc.a") {
		t.Errorf("the fix /status shows does not name the re-snapshot: %q", ts.PausedFix)
	}
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", "belong to log topic", "--replace cdc.a")
	// Paused means untouched: the table still holds what the old log gave
	// it, none of the new log's records.
	d := p.diff("public.a")
	if len(d.Missing) < 400 {
		t.Errorf("the paused table took records of the new log: %s", d)
	}
}
