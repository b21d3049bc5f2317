package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/source"
)

// waitTableFault waits for a fault of the whole table (no row) whose
// reason holds every one of words, and returns it.
func waitTableFault(t *testing.T, c *collector, table string, words ...string) *source.Fault {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		for _, ch := range c.changes {
			f := ch.Fault
			if f == nil || ch.After != nil || ch.Before != nil || ch.Table.QualifiedName() != table {
				continue
			}
			ok := true
			for _, w := range words {
				ok = ok && strings.Contains(f.Reason, w)
			}
			if ok {
				c.mu.Unlock()
				return f
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no fault of %s saying %q; changes:%s", table, words, describeFaults(c))
		}
	}
}

func describeFaults(c *collector) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, ch := range c.changes {
		if ch.Fault != nil {
			b.WriteString("\n  " + ch.Table.QualifiedName() + ": " + ch.Fault.Reason)
		}
	}
	return b.String()
}

// countInserts counts the plain inserts of table.
func countInserts(c *collector, table string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ch := range c.changes {
		if ch.Fault == nil && ch.Op == source.OpCreate && ch.Table.QualifiedName() == table {
			n++
		}
	}
	return n
}

// countTableFaults counts the faults of the whole table emitted for table.
func countTableFaults(c *collector, table string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ch := range c.changes {
		if ch.Fault != nil && ch.After == nil && ch.Before == nil && ch.Table.QualifiedName() == table {
			n++
		}
	}
	return n
}

func fastChecks(c *Config) { c.PublicationCheckInterval = 100 * time.Millisecond }

// TestPublicationChangedWhileStreaming (issue 24 item 3): a captured table
// dropped from the publication, added back, and the publication told to
// publish inserts only each stop the tables concerned, with the statement
// to run and the re-snapshot; the other table keeps streaming.
func TestPublicationChangedWhileStreaming(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE pa (id int PRIMARY KEY); CREATE TABLE pb (id int PRIMARY KEY)`)
	logs := &syncBuffer{}
	e.logs = logs
	c := newCollector()
	e.startReader(t, []string{"pa", "pb"}, false, c, fastChecks)
	pub := e.names.Publication

	e.exec(t, `ALTER PUBLICATION `+pub+` DROP TABLE pa`)
	f := waitTableFault(t, c, "public.pa", "no longer in publication "+pub)
	for _, want := range []string{`ALTER PUBLICATION "` + pub + `" ADD TABLE "public"."pa"`, "cdcd snapshot -c FILE --replace public.pa"} {
		if !strings.Contains(f.Fix, want) {
			t.Errorf("fix %q does not say %q", f.Fix, want)
		}
	}
	e.exec(t, `INSERT INTO pb VALUES (1)`)
	// Each check while pa is out of the publication emits its fault again,
	// so the changes are counted by table, not in all.
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.pb") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("pb stopped streaming while pa was out of the publication")
		}
	}
	if n := countInserts(c, "public.pb"); n != 1 {
		t.Errorf("pb: %d inserts, want 1", n)
	}
	// The standing fault is emitted by every check but logged once.
	for deadline := time.Now().Add(30 * time.Second); countTableFaults(c, "public.pa") < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the checks did not emit pa's fault again")
		}
	}
	errors := 0
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "stopped receiving all of its changes") && strings.Contains(line, "table=public.pa ") {
			errors++
		}
	}
	if errors != 1 {
		t.Errorf("pa's standing fault logged at ERROR %d times over %d checks, want once", errors, countTableFaults(c, "public.pa"))
	}

	e.exec(t, `ALTER PUBLICATION `+pub+` ADD TABLE pa`)
	f = waitTableFault(t, c, "public.pa", "removed from publication", "added again")
	if !strings.Contains(f.Fix, "cdcd snapshot -c FILE --replace public.pa") {
		t.Errorf("fix %q does not name the re-snapshot", f.Fix)
	}

	e.exec(t, `ALTER PUBLICATION `+pub+` SET (publish = 'insert')`)
	for _, tbl := range []string{"public.pa", "public.pb"} {
		f = waitTableFault(t, c, tbl, "does not publish update, delete, truncate")
		if !strings.Contains(f.Fix, `ALTER PUBLICATION "`+pub+`" SET (publish = 'insert, update, delete, truncate')`) {
			t.Errorf("fix %q", f.Fix)
		}
	}
}

// TestPublicationFilterStopsTable: a row filter or a column list put on a
// captured table's publication while streaming (PostgreSQL 15: pgoutput
// then leaves out the rows the filter rejects, and the columns not listed,
// which would read as dropped) stops that table, naming the filter and the
// fix; a table published whole streams on.
func TestPublicationFilterStopsTable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE fa (id int PRIMARY KEY, v int); CREATE TABLE fb (id int PRIMARY KEY, v int); CREATE TABLE fc (id int PRIMARY KEY)`)
	c := newCollector()
	e.startReader(t, []string{"fa", "fb", "fc"}, false, c, fastChecks)
	pub := e.names.Publication
	e.exec(t, `ALTER PUBLICATION `+pub+` SET TABLE fa WHERE (v > 10), fb (id), fc`)
	f := waitTableFault(t, c, "public.fa", "with the row filter WHERE (v > 10)")
	if !strings.Contains(f.Fix, `ALTER PUBLICATION "`+pub+`" DROP TABLE "public"."fa"; ALTER PUBLICATION "`+pub+`" ADD TABLE "public"."fa"`) ||
		!strings.Contains(f.Fix, "cdcd snapshot -c FILE --replace public.fa") {
		t.Errorf("fix %q", f.Fix)
	}
	waitTableFault(t, c, "public.fb", "with the column list (id)")
	e.exec(t, `INSERT INTO fc VALUES (1)`)
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.fc") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("fc stopped streaming while fa and fb were filtered")
		}
	}
}

// TestTableDroppedAndRecreated (issue 24 items 3 and 4): a captured table
// dropped while streaming stops that table (its last changes still in the
// WAL do not stop the reader); a restart goes on without it; created
// again under its name it is a new table, and stops it again.
func TestTableDroppedAndRecreated(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE da (id int PRIMARY KEY); CREATE TABLE db (id int PRIMARY KEY)`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"da", "db"}, false, c, func(c *Config) { c.PublicationCheckInterval = time.Hour })
	e.exec(t, `INSERT INTO da VALUES (1)`)
	c.wait(t, 1)
	stop() // the drop happens while nothing reads, then streams past it
	e.exec(t, `INSERT INTO da VALUES (2); DROP TABLE da; INSERT INTO db VALUES (1)`)

	c = newCollector()
	e.startReader(t, []string{"da", "db"}, false, c, fastChecks)
	f := waitTableFault(t, c, "public.da", "was dropped")
	if !strings.Contains(f.Fix, "remove it from source.postgres.tables") {
		t.Errorf("fix %q", f.Fix)
	}
	for deadline := time.Now().Add(90 * time.Second); countInserts(c, "public.db") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("db stopped streaming after da was dropped")
		}
	}

	e.exec(t, `CREATE TABLE da (id int PRIMARY KEY); ALTER PUBLICATION `+e.names.Publication+` ADD TABLE da`)
	waitTableFault(t, c, "public.da", "dropped and created again")
}

// TestPublicationChangedWhileStopped: a table removed from the
// publication and added back while the pipeline was stopped is found at
// the next start (its membership is a new row), and stops.
func TestPublicationChangedWhileStopped(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE sa (id int PRIMARY KEY)`)
	if _, err := runOnce(t, e, []string{"sa"}, false); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `ALTER PUBLICATION `+e.names.Publication+` DROP TABLE sa`)
	e.exec(t, `INSERT INTO sa VALUES (1)`) // missed
	e.exec(t, `ALTER PUBLICATION `+e.names.Publication+` ADD TABLE sa`)
	c := newCollector()
	e.startReader(t, []string{"sa"}, false, c)
	waitTableFault(t, c, "public.sa", "removed from publication", "added again")
}

// TestRecreatedTableFoundByRelation: with the periodic check far off, the
// first change of a table re-created under a captured name (a Relation
// message with a new OID) stops it before that change is emitted plainly.
func TestRecreatedTableFoundByRelation(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ra (id int PRIMARY KEY)`)
	c := newCollector()
	e.startReader(t, []string{"ra"}, false, c, func(c *Config) { c.PublicationCheckInterval = time.Hour })
	e.exec(t, `INSERT INTO ra VALUES (1)`)
	c.wait(t, 1)
	e.exec(t, `DROP TABLE ra; CREATE TABLE ra (id int PRIMARY KEY); ALTER PUBLICATION `+e.names.Publication+` ADD TABLE ra`)
	e.exec(t, `INSERT INTO ra VALUES (2)`)
	waitTableFault(t, c, "public.ra", "dropped and created again")
	got := c.wait(t, 3)
	if got[1].Fault == nil || got[2].Fault != nil || got[2].After[0] != int64(2) {
		t.Fatalf("want the fault before the new table's insert:%s", describe(got))
	}
}

// TestPublicationDroppedWhileStreaming: a publication dropped while
// changes are written stops the reader with a *PublicationError that says
// how to create it again and what to do if the slot cannot get past.
func TestPublicationDroppedWhileStreaming(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE pd (id int PRIMARY KEY)`)
	r := New(e.config(t, []string{"pd"}, false), e.state, discard)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, newCollector()) }()
	for !r.Stats().Streaming.Load() {
		time.Sleep(20 * time.Millisecond)
	}
	e.exec(t, `DROP PUBLICATION `+e.names.Publication)
	e.exec(t, `INSERT INTO pd VALUES (1)`)
	err := <-done
	var pe *PublicationError
	if !errorsAs(err, &pe) {
		t.Fatalf("error %v, want a *PublicationError", err)
	}
	for _, want := range []string{`CREATE PUBLICATION "` + e.names.Publication + `" FOR TABLE "public"."pd"`, "cdcd snapshot -c FILE --replace", "start the pipeline over"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestCapturedTableRenamed: a captured table renamed, or moved to another
// schema, stops with its new name and both fixes, at its first change
// under the new name (the periodic check is off) and at a start that finds
// it renamed; the other table keeps streaming.
func TestCapturedTableRenamed(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ra (id int PRIMARY KEY); CREATE TABLE rb (id int PRIMARY KEY); CREATE SCHEMA other`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"ra", "rb"}, false, c, func(c *Config) { c.PublicationCheckInterval = time.Hour })
	e.exec(t, `INSERT INTO ra VALUES (1)`)
	c.wait(t, 1)
	e.exec(t, `ALTER TABLE ra RENAME TO ra2; INSERT INTO ra2 VALUES (2); INSERT INTO rb VALUES (1)`)
	f := waitTableFault(t, c, "public.ra", "was renamed to public.ra2")
	for _, want := range []string{"rename it back", "--replace public.ra", "replace public.ra with public.ra2 in source.postgres.tables"} {
		if !strings.Contains(f.Fix, want) {
			t.Errorf("fix %q lacks %q", f.Fix, want)
		}
	}
	if n := countInserts(c, "public.ra"); n != 1 {
		t.Errorf("%d inserts of public.ra, want the one before the rename", n)
	}
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.rb") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rb stopped streaming after ra was renamed")
		}
	}
	stop()

	e.exec(t, `ALTER TABLE ra2 SET SCHEMA other`)
	c = newCollector()
	e.startReader(t, []string{"ra", "rb"}, false, c, fastChecks)
	waitTableFault(t, c, "public.ra", "was renamed to other.ra2")
}

// TestPartitionAttachedAndDetached: pgoutput sends nothing when a table
// with rows is attached to a captured partitioned table, nor when a
// partition is detached or dropped. The attached partition's rows are read
// by an incremental snapshot of its partition constraint (the mirror ends
// equal to the source, under writes to the new partition); a detached one
// stops the table naming the partition and both fixes.
func TestPartitionAttachedAndDetached(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE pm (id int PRIMARY KEY, v text, big text) PARTITION BY RANGE (id);
		CREATE TABLE pm_a PARTITION OF pm FOR VALUES FROM (0) TO (1000);
		INSERT INTO pm SELECT g, 'a' || g, NULL FROM generate_series(1, 100) g`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"pm"}, true, m, fastChecks, func(c *Config) { c.Incremental.ChunkRows = 50 })
	e.exec(t, "INSERT INTO pm VALUES (101, 'streamed', NULL)")
	waitKey(t, m, "public.pm", 101)
	// Wait for a check that records the partitions.
	time.Sleep(300 * time.Millisecond)

	e.exec(t, `CREATE TABLE pm_b (id int PRIMARY KEY, v text, big text); INSERT INTO pm_b SELECT g, 'b' || g, NULL FROM generate_series(1000, 1299) g;
		ALTER TABLE pm ATTACH PARTITION pm_b FOR VALUES FROM (1000) TO (2000);
		UPDATE pm SET v = 'updated' WHERE id IN (1001, 1200); DELETE FROM pm WHERE id = 1002; INSERT INTO pm VALUES (1500, 'new', NULL)`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p := r.Snapshots().Progress()
		if len(p) == 1 && !p[0].Finished.IsZero() {
			if p[0].Origin != "partition-attached" || !strings.Contains(p[0].Where, "1000") || p[0].Replace {
				t.Errorf("snapshot %+v, want one of the attached partition's rows, by its constraint", p[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot of the attached partition finished: %+v", p)
		}
	}
	e.exec(t, "INSERT INTO pm VALUES (999, 'end', NULL)")
	waitSettled(t, r, m, "public.pm", 999)
	compareMirror(t, m, e.conn, "pm")
	if len(m.faults["public.pm"]) != 0 {
		t.Errorf("faults after an attach: %q", m.faults["public.pm"])
	}
	// A TRUNCATE through the root reaches the mirror (README says to
	// truncate partitions that way).
	e.exec(t, "TRUNCATE pm; INSERT INTO pm VALUES (998, 'after the truncate', NULL)")
	waitKey(t, m, "public.pm", 998)
	compareMirror(t, m, e.conn, "pm")

	e.exec(t, `ALTER TABLE pm DETACH PARTITION pm_a`)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		m.mu.Lock()
		fs := append([]string(nil), m.faults["public.pm"]...)
		m.mu.Unlock()
		if len(fs) > 0 {
			if !strings.Contains(fs[0], "partition public.pm_a of public.pm was detached or dropped") {
				t.Errorf("fault %q", fs[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no fault after a partition was detached")
		}
	}
}

// TestUnloggedTableStops: a captured table made UNLOGGED (allowed under a
// publication FOR ALL TABLES, which then leaves it out) writes no WAL, so
// its changes cannot be captured: it stops, saying so and naming SET
// LOGGED; the other table streams on.
func TestUnloggedTableStops(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ul (id int PRIMARY KEY); CREATE TABLE ok (id int PRIMARY KEY)`)
	e.exec(t, "CREATE PUBLICATION "+e.names.Publication+" FOR ALL TABLES WITH (publish_via_partition_root = true)")
	c := newCollector()
	e.startReader(t, []string{"ul", "ok"}, false, c, fastChecks)
	e.exec(t, `INSERT INTO ul VALUES (1)`)
	c.wait(t, 1)
	e.exec(t, `ALTER TABLE ul SET UNLOGGED; INSERT INTO ul VALUES (2); INSERT INTO ok VALUES (1)`)
	f := waitTableFault(t, c, "public.ul", "is UNLOGGED")
	if !strings.Contains(f.Fix, "SET LOGGED") || !strings.Contains(f.Fix, "--replace public.ul") {
		t.Errorf("fix %q", f.Fix)
	}
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.ok") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ok stopped streaming after ul was made unlogged")
		}
	}
}

// TestTableVersionCdcdCannotRead: a captured table that loses its primary
// key, or gains a column of a type cdcd cannot capture, while streaming
// stops alone (it stopped the whole reader), naming table, column and type
// and the fix; the other table streams on, and the table's changes flow
// again once it has a version cdcd can read.
func TestTableVersionCdcdCannotRead(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nk (id int PRIMARY KEY); CREATE TABLE nt (id int PRIMARY KEY); CREATE TABLE ok (id int PRIMARY KEY)`)
	c := newCollector()
	e.startReader(t, []string{"nk", "nt", "ok"}, false, c, fastChecks)
	e.exec(t, `INSERT INTO nk VALUES (1); INSERT INTO nt VALUES (1)`)
	c.wait(t, 2)
	e.exec(t, `ALTER TABLE nk DROP CONSTRAINT nk_pkey; INSERT INTO nk VALUES (2)`)
	e.exec(t, `ALTER TABLE nt ADD COLUMN q tsquery; INSERT INTO nt VALUES (2, 'a & b')`)
	e.exec(t, `INSERT INTO ok VALUES (1)`)
	f := waitTableFault(t, c, "public.nk", "has no primary key")
	if !strings.Contains(f.Fix, "ADD PRIMARY KEY") || !strings.Contains(f.Fix, "--replace public.nk") {
		t.Errorf("nk's fix %q", f.Fix)
	}
	f = waitTableFault(t, c, "public.nt", `column "q"`, "tsquery")
	if !strings.Contains(f.Fix, "change the column's type") || !strings.Contains(f.Fix, "--replace public.nt") {
		t.Errorf("nt's fix %q", f.Fix)
	}
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.ok") < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ok stopped streaming")
		}
	}
	// The insert right after the key's drop is passed over, or, when
	// PostgreSQL sends no new shape for it, carried with the old one (the
	// publication check stops the table then).
	before := countInserts(c, "public.nk")
	e.exec(t, `ALTER TABLE nk ADD PRIMARY KEY (id); INSERT INTO nk VALUES (3)`)
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.nk") <= before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.mu.Lock()
			for _, ch := range c.changes {
				t.Logf("%s %s %v fault=%v", ch.Op, ch.Table.QualifiedName(), fmtRow(ch.After), ch.Fault != nil)
			}
			c.mu.Unlock()
			t.Fatal("nk's changes did not flow again once it had a key")
		}
	}
}

// TestRestartWithATableCdcdCannotRead: a captured table that lost its key,
// or gained a column of a type cdcd cannot capture, while the pipeline was
// stopped stops alone at the next start (the whole reader refused to
// start); the other table streams on.
func TestRestartWithATableCdcdCannotRead(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE nk (id int PRIMARY KEY); CREATE TABLE nt (id int PRIMARY KEY); CREATE TABLE ok (id int PRIMARY KEY)`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"nk", "nt", "ok"}, false, c)
	e.exec(t, `INSERT INTO nk VALUES (1); INSERT INTO nt VALUES (1)`)
	c.wait(t, 2)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `ALTER TABLE nk DROP CONSTRAINT nk_pkey; ALTER TABLE nt ADD COLUMN q tsquery; INSERT INTO ok VALUES (1)`)
	c = newCollector()
	e.startReader(t, []string{"nk", "nt", "ok"}, false, c, fastChecks)
	waitTableFault(t, c, "public.nk", "has no primary key")
	waitTableFault(t, c, "public.nt", `column "q"`, "tsquery")
	e.exec(t, `INSERT INTO ok VALUES (2)`)
	for deadline := time.Now().Add(30 * time.Second); countInserts(c, "public.ok") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ok did not stream")
		}
	}
}

// TestEnumLabelRenamed: ALTER TYPE ... RENAME VALUE changes the rows that
// hold the label without a change pgoutput sends; those rows (and no
// others) are read again, so the mirror ends equal to the source.
func TestEnumLabelRenamed(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TYPE mood AS ENUM ('sad', 'ok');
		CREATE TABLE em (id int PRIMARY KEY, v mood, big text);
		INSERT INTO em SELECT g, CASE WHEN g % 3 = 0 THEN 'sad' ELSE 'ok' END::mood, NULL FROM generate_series(1, 300) g`)
	m := newMirror(4)
	_, r := e.startReader(t, []string{"em"}, true, m, fastChecks)
	e.exec(t, "INSERT INTO em VALUES (1000, 'sad', NULL)")
	waitKey(t, m, "public.em", 1000)
	time.Sleep(300 * time.Millisecond) // a check records the labels

	e.exec(t, "ALTER TYPE mood RENAME VALUE 'sad' TO 'unhappy'")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		p := r.Snapshots().Progress()
		if len(p) == 1 && !p[0].Finished.IsZero() {
			if p[0].Origin != "enum-renamed" || !strings.Contains(p[0].Where, "'unhappy'") {
				t.Errorf("snapshot %+v, want one of the rows holding the renamed label", p[0])
			}
			if p[0].Rows != 101 {
				t.Errorf("the snapshot read %d rows, want the 101 holding the label", p[0].Rows)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot after the rename: %+v", p)
		}
	}
	e.exec(t, "INSERT INTO em VALUES (1001, 'ok', NULL)")
	waitSettled(t, r, m, "public.em", 1001)
	compareMirror(t, m, e.conn, "em")
}
