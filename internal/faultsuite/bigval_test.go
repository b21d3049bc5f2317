package faultsuite

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
)

// Issue 24 item 5: large values. A value lands in the mirror, readable by
// iceberg-go's scan, when its change fits a record of cdcd's log (64 MiB);
// a larger one pauses its table alone, naming the key, the column, the
// sizes and the fix.

// bigText is n bytes of text that PostgreSQL and snappy hardly compress.
func bigText(n int, seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ."
	for i := 0; i < n; i += 8 {
		u := rng.Uint64()
		for j := i; j < min(i+8, n); j++ {
			b[j] = letters[u&63]
			u >>= 8
		}
	}
	return string(b)
}

// peakRSS is the daemon's peak resident memory so far, in MiB (VmHWM).
func (p *pipeline) peakRSS() int64 {
	p.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.child.Cmd.Process.Pid))
	if err != nil {
		p.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	p.t.Fatal("no VmHWM")
	return 0
}

const bigDDL = `CREATE TABLE big (id int PRIMARY KEY, doc text, raw bytea, n int);
	CREATE TABLE other (id int PRIMARY KEY, v text);
	INSERT INTO other VALUES (1, 'a');`

// The tests of this file do not run in parallel: the WAL of large values
// slows the decoding of every slot on the server.

// TestBigValuesMirror: text and bytea values of 1.2 MB, 5 MB and 51 MB —
// in the initial load, inserted, updated with the large value unchanged
// (TOASTed, taken from the table), replaced, deleted, several in one
// transaction — end in mirrors equal to the source.
func TestBigValuesMirror(t *testing.T) {
	p := newPipeline(t, pipelineOptions{DDL: bigDDL, Tables: []string{"public.big", "public.other"}})
	p.exec(`INSERT INTO big VALUES (1, $1, $2, 1)`, bigText(1_200_000, 1), []byte(bigText(1_200_000, 2)))
	p.start()
	p.waitCaughtUp()
	p.requireMirror()

	p.exec(`INSERT INTO big VALUES (2, $1, NULL, 2)`, bigText(5<<20, 3))
	p.exec(`INSERT INTO big VALUES (3, $1, $2, 3)`, bigText(51<<20, 4), []byte(bigText(5<<20, 5)))
	p.exec(`UPDATE big SET n = 30 WHERE id = 3`) // doc and raw arrive unchanged
	p.exec(`UPDATE big SET doc = $1 WHERE id = 1`, bigText(1_200_000, 6))
	tx, err := p.Conn.Begin(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := 4; id <= 7; id++ {
		if _, err := tx.Exec(p.ctx, `INSERT INTO big VALUES ($1, $2, NULL, $1)`, id, bigText(20<<20, uint64(id))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(p.ctx, `UPDATE big SET doc = 'small' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(p.ctx); err != nil {
		t.Fatal(err)
	}
	p.exec(`DELETE FROM big WHERE id = 4`)
	p.exec(`INSERT INTO other VALUES (2, 'b')`)
	p.waitCaughtUp()
	p.requireMirror()
	t.Logf("daemon peak RSS: %d MiB", p.peakRSS())
}

// TestValueTooLargePausesTable: a change larger than a log record (a
// 70 MB value; CDCD_BIGVAL_MB sets another size, up to PostgreSQL's 1 GB)
// pauses its table alone with the key, column, sizes and fix; the other
// table flows. Skipping the change (the way out when the value is fixed
// at the source) resumes the table with the changes held after it, and
// the mirror equals the source.
func TestValueTooLargePausesTable(t *testing.T) {
	mb := 70
	if s := os.Getenv("CDCD_BIGVAL_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	p := newPipeline(t, pipelineOptions{DDL: bigDDL + `INSERT INTO big VALUES (1, 'one', NULL, 1);`, Tables: []string{"public.big", "public.other"}})
	p.start()
	p.waitCaughtUp()

	p.exec(`INSERT INTO big VALUES (2, $1, NULL, 2)`, bigText(mb<<20, 9))
	ts := p.waitPaused("cdc.big", "more than a change can be in cdcd's log", `"doc"`, fmt.Sprintf("%d bytes", mb<<20))
	t.Logf("paused: %s", ts.PausedReason)
	p.requirePausedEntry("cdc.big", `{"id":2}`, "doc", fmt.Sprintf("(%d bytes, left out)", mb<<20))
	p.requireAlert(daemon.AlertTablePaused, "cdc.big", "cdcd table skip -c FILE public.big", "cdcd snapshot -c FILE --replace public.big", "masking")
	// Held while paused; the other table flows.
	p.exec(`UPDATE big SET n = 10 WHERE id = 1`)
	p.exec(`INSERT INTO other VALUES (2, 'b')`)
	p.waitOthersCaughtUp("cdc.big")
	p.requireMirror("public.other")
	t.Logf("daemon peak RSS with a %d MB value: %d MiB", mb, p.peakRSS())

	// The value is made smaller at the source; the oversized change is
	// skipped (to the dead-letter topic, without its value) and the table
	// resumes with what was held after it.
	p.exec(`UPDATE big SET doc = 'smaller' WHERE id = 2`)
	p.requireSkip("public.big", "resumed")
	p.requireDeadLetter("fault.public.big", `"doc":null`, `"column":"doc"`)
	p.waitCaughtUp()
	p.requireMirror()
}
