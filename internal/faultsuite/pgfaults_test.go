package faultsuite

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/mirror"
	"github.com/cdcd-dev/cdcd/internal/pgserver"
	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// The source side of issue 24: one table's problem stops that table
// alone, loudly, with a fix that works.

// requireSkip runs `cdcd table skip` for table and requires it to succeed.
func (p *pipeline) requireSkip(table string, words ...string) string {
	p.t.Helper()
	out, errOut, code := p.cdcd("table", "skip", "-c", p.CfgPath, table)
	if code != 0 {
		p.t.Fatalf("cdcd table skip %s: exit %d: %s%s", table, code, out, errOut)
	}
	for _, w := range words {
		if !strings.Contains(out, w) {
			p.t.Errorf("cdcd table skip %s does not say %q:\n%s", table, w, out)
		}
	}
	return out
}

// requireDeadLetter requires the dead-letter topic of table's topic to
// show every one of words through cdcd log consume.
func (p *pipeline) requireDeadLetter(topic string, words ...string) {
	p.t.Helper()
	out, errOut, code := p.cdcd("log", "consume", "-c", p.CfgPath, "--topic", "_cdcd_dead."+topic, "--from-beginning")
	if code != 0 {
		p.t.Fatalf("cdcd log consume of the dead-letter topic: exit %d: %s", code, errOut)
	}
	for _, w := range words {
		if !strings.Contains(out, w) {
			p.t.Errorf("the dead-letter topic of %s does not show %q:\n%s", topic, w, out)
		}
	}
}

// requirePausedEntry requires /status to list table among the paused ones
// with key, column and value.
func (p *pipeline) requirePausedEntry(table, key, column, value string) daemon.PausedTable {
	p.t.Helper()
	for _, pt := range p.status().Paused {
		if pt.Table == table {
			if pt.Key != key || pt.Column != column || pt.Value != value {
				p.t.Errorf("paused %s: key %s column %s value %s, want %s %s %s", table, pt.Key, pt.Column, pt.Value, key, column, value)
			}
			return pt
		}
	}
	p.t.Fatalf("/status does not list %s among the paused tables", table)
	return daemon.PausedTable{}
}

// TestBadRowPausesOneTable (issue 24 item 4): a NaN in a numeric(10,2), a
// timestamptz past year 294247 and a 2-D value in a 1-D array column each
// pause their own table, naming key, column and value, while the other
// table flows; the alert fires with the fix. Skipping moves the change to
// the dead-letter topic and the table resumes with its held changes;
// removing a table from the config ends its pause. Every mirror that
// flows ends equal to its source.
func TestBadRowPausesOneTable(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE money (id int PRIMARY KEY, amount numeric(10,2));
			CREATE TABLE events (id int PRIMARY KEY, at timestamptz, tags int[]);
			CREATE TABLE other (id int PRIMARY KEY, v text);
			INSERT INTO money VALUES (1, 1.50); INSERT INTO events VALUES (1, now(), '{1}'); INSERT INTO other VALUES (1, 'a');`,
		Tables: []string{"public.money", "public.events", "public.other"},
	})
	p.start()
	p.waitCaughtUp()

	p.exec(`INSERT INTO money VALUES (2, 'NaN')`)
	p.exec(`INSERT INTO events VALUES (2, '294248-01-01 00:00:00+00', '{2}')`)
	p.exec(`INSERT INTO other VALUES (2, 'b')`)
	p.waitPaused("cdc.money", "NaN", "amount")
	p.waitPaused("cdc.events", "294248-01-01 00:00:00+00", `"at"`)
	p.requirePausedEntry("cdc.money", `{"id":2}`, "amount", "NaN")
	p.requireAlert(daemon.AlertTablePaused, "cdc.money", "NaN", "cdcd table skip -c FILE public.money", "cdcd snapshot -c FILE --replace public.money")
	// Held while paused, in order; the other table flows.
	p.exec(`UPDATE money SET amount = 2.25 WHERE id = 1`)
	p.exec(`INSERT INTO money VALUES (3, 3.00)`)
	p.exec(`INSERT INTO events VALUES (3, now(), '{{1,2},{3,4}}')`)
	p.exec(`UPDATE other SET v = 'c' WHERE id = 1`)
	p.waitOthersCaughtUp("cdc.money", "cdc.events")
	p.requireMirror("public.other")

	// The way out for money: skip the NaN, delete it at the source.
	p.requireSkip("public.money", "resumed", "_cdcd_dead.fault.public.money")
	p.requireDeadLetter("fault.public.money", `"amount":"NaN"`, `"column":"amount"`)
	p.exec(`DELETE FROM money WHERE id = 2`)
	p.waitOthersCaughtUp("cdc.events")
	p.requireMirror("public.money")

	// events: the skip resumes it as far as the next faulty change (the
	// 2-D array), which pauses it again, naming that one.
	out := p.requireSkip("public.events", "paused again", "tags", "{{1,2},{3,4}}")
	if strings.Contains(out, "resumed") {
		t.Errorf("skip said resumed while another faulty change waits:\n%s", out)
	}
	p.requirePausedEntry("cdc.events", `{"id":3}`, "tags", "{{1,2},{3,4}}")

	// The third way out: remove the table from the config.
	p.stop()
	p.reconfigure(func(o *pipelineOptions) { o.Tables = []string{"public.money", "public.other"} })
	p.start()
	p.exec(`INSERT INTO other VALUES (3, 'd')`)
	st := p.waitCaughtUp()
	if len(st.Paused) != 0 {
		t.Errorf("paused after removing the table: %+v", st.Paused)
	}
	if !p.logContains("a paused table is no longer configured") {
		t.Error("the dropped pause was not logged")
	}
	p.requireMirror()
}

// TestBadRowInInitialLoad (issue 24 item 4): a NaN in a numeric(10,2)
// already in the table when the pipeline starts pauses that table during
// the initial load — the load does not crash, the other table loads and
// streams — and a skip resumes it.
func TestBadRowInInitialLoad(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE money (id int PRIMARY KEY, amount numeric(10,2));
			CREATE TABLE other (id int PRIMARY KEY, v text);
			INSERT INTO money SELECT g, CASE WHEN g = 500 THEN 'NaN'::numeric ELSE g END FROM generate_series(1, 1000) g;
			INSERT INTO other SELECT g, 'v' FROM generate_series(1, 1000) g;`,
		Tables: []string{"public.money", "public.other"},
	})
	p.start()
	p.waitPaused("cdc.money", "NaN")
	p.requirePausedEntry("cdc.money", `{"id":500}`, "amount", "NaN")
	p.exec(`UPDATE other SET v = 'w' WHERE id < 10`)
	p.waitOthersCaughtUp("cdc.money")
	p.requireMirror("public.other")
	p.requireSkip("public.money", "resumed")
	p.exec(`UPDATE money SET amount = 0 WHERE id = 500`) // the row's current value flows
	p.waitCaughtUp()
	p.requireMirror()
}

// waitReason waits until table is paused with a reason holding every one
// of words (the reason may change as the source finds more).
func (p *pipeline) waitReason(table string, words ...string) daemon.TableStatus {
	p.t.Helper()
	var ts daemon.TableStatus
	p.waitFor("table "+table+" paused saying "+strings.Join(words, ", "), 2*time.Minute, func(st daemon.Status) bool {
		for _, tb := range st.Tables {
			if tb.Table != table || !tb.Paused {
				continue
			}
			ts = tb
			for _, w := range words {
				if !strings.Contains(tb.PausedReason, w) {
					return false
				}
			}
			return true
		}
		return false
	})
	return ts
}

// TestPublicationChangedByHand (issue 24 item 3): a captured table dropped
// from the publication while the daemon runs stops that table loudly —
// the alert, /status and cdcd status name the ALTER PUBLICATION to run and
// the re-snapshot — while the other table flows; added back, the reason
// says changes were missed in between; the publication set to publish
// inserts only stops every table. Never "all is well" while changes
// vanish.
func TestPublicationChangedByHand(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text);
			INSERT INTO a VALUES (1, 'x'); INSERT INTO b VALUES (1, 'x');`,
		Tables: []string{"public.a", "public.b"},
	})
	p.start()
	p.waitCaughtUp()
	pub := p.Names.Publication

	p.exec(`ALTER PUBLICATION ` + pub + ` DROP TABLE a`)
	p.exec(`INSERT INTO a VALUES (2, 'missed')`)
	p.exec(`INSERT INTO b VALUES (2, 'y')`)
	p.waitReason("cdc.a", "no longer in publication "+pub)
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", `ALTER PUBLICATION "`+pub+`" ADD TABLE "public"."a"`,
		"cdcd snapshot -c FILE --replace public.a")
	out, _, _ := p.cdcd("status", "-c", p.CfgPath)
	if !strings.Contains(out, "PAUSED") || !strings.Contains(out, "no longer in publication") {
		t.Errorf("cdcd status does not show the paused table:\n%s", out)
	}
	p.waitOthersCaughtUp("cdc.a")
	p.requireMirror("public.b")

	p.exec(`ALTER PUBLICATION ` + pub + ` ADD TABLE a`)
	p.waitReason("cdc.a", "removed from publication", "added again")
	p.exec(`UPDATE a SET v = 'held' WHERE id = 1`) // held: the table stays paused until repaired

	p.exec(`ALTER PUBLICATION ` + pub + ` SET (publish = 'insert')`)
	p.waitReason("cdc.b", "does not publish update, delete, truncate")
	p.requireAlert(daemon.AlertTablePaused, "cdc.b", "SET (publish = 'insert, update, delete, truncate')")
	p.exec(`ALTER PUBLICATION ` + pub + ` SET (publish = 'insert, update, delete, truncate')`)

	// Accepting the gap by hand resumes the tables; what was missed stays
	// missed (the re-snapshot repairs it).
	p.requireSkip("public.b", "resumed")
	p.requireSkip("public.a", "resumed")
	p.waitCaughtUp()
	p.requireMirror("public.b")
	if d := p.diff("public.a"); d.Equal() || len(d.Missing) != 1 || d.Missing[0] != "2" {
		t.Errorf("after accepting the gap, want only the missed row 2 missing from the mirror; got %s", d)
	}
}

// TestTableDroppedAndRecreatedE2E (issue 24 items 3 and 4): a captured
// table dropped while the daemon runs stops that table, and a restart
// still runs the others; created again under its name, it is a new table
// and stays stopped with the re-snapshot as its fix.
func TestTableDroppedAndRecreatedE2E(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY); INSERT INTO a VALUES (1); INSERT INTO b VALUES (1);`,
		Tables: []string{"public.a", "public.b"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`INSERT INTO a VALUES (2); DROP TABLE a`)
	p.waitReason("cdc.a", "was dropped")
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", "remove it from source.postgres.tables")
	p.stop()
	p.exec(`INSERT INTO b VALUES (2)`)
	p.start()
	p.waitOthersCaughtUp("cdc.a")
	p.requireMirror("public.b")
	p.exec(`CREATE TABLE a (id int PRIMARY KEY); ALTER PUBLICATION ` + p.Names.Publication + ` ADD TABLE a; INSERT INTO a VALUES (7)`)
	p.waitReason("cdc.a", "dropped and created again")
	p.requireAlert(daemon.AlertTablePaused, "cdc.a", "cdcd snapshot -c FILE --replace public.a")
}

// TestQuotedTableNames (issue 24 item 9): tables whose names need quotes —
// a space, letters outside ASCII, upper case — are captured: the config
// names them quoted, every statement quotes them, and their topics and
// Iceberg tables follow the documented mapping; the mirrors are equal.
func TestQuotedTableNames(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE "Order Items" (id int PRIMARY KEY, "Unit Price" numeric(10,2), "Größe" text);
			CREATE TABLE "Größe" ("Schlüssel" text PRIMARY KEY, v int);
			CREATE TABLE "MixedCase" (id int PRIMARY KEY);
			INSERT INTO "Order Items" SELECT g, g * 1.5, 'm' FROM generate_series(1, 50) g;
			INSERT INTO "Größe" VALUES ('ä', 1), ('ö', 2);
			INSERT INTO "MixedCase" VALUES (1);`,
		Tables: []string{`public."Order Items"`, `"Größe"`, `public."MixedCase"`},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`UPDATE "Order Items" SET "Unit Price" = 9.99 WHERE id < 5`)
	p.exec(`DELETE FROM "Order Items" WHERE id > 45`)
	p.exec(`INSERT INTO "Größe" VALUES ('ü', 3)`)
	p.exec(`INSERT INTO "MixedCase" VALUES (2)`)
	st := p.waitCaughtUp()
	p.requireMirror()
	want := map[string]string{"cdc.Order_Items": "fault.public.Order_Items", "cdc.Größe": "fault.public.Gr__e", "cdc.MixedCase": "fault.public.MixedCase"}
	for _, tb := range st.Tables {
		if want[tb.Table] != tb.Topic {
			t.Errorf("table %s (source %s) has topic %s; want the mapping %v", tb.Table, tb.Source, tb.Topic, want)
		}
	}
	if len(st.Tables) != 3 {
		t.Errorf("%d tables in /status, want 3", len(st.Tables))
	}
}

// TestLongTransactionAtStart (issue 24 item 7): a pipeline starting while
// a transaction is open waits to create its slot; the log, /status and
// cdcd status say which backend it waits for, with its query, again every
// ~10 s; once the transaction ends the pipeline starts and mirrors.
func TestLongTransactionAtStart(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE busy (id int); INSERT INTO a VALUES (1);`,
		Tables: []string{"public.a"},
	})
	long := p.connect()
	var pid int
	if err := long.QueryRow(p.ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	tx, err := long.Begin(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(p.ctx, `INSERT INTO busy VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	p.start()
	st := p.waitFor("the wait reported", time.Minute, func(st daemon.Status) bool {
		return strings.Contains(st.Source.Waiting, fmt.Sprintf("pid %d", pid))
	})
	if st.State != daemon.StateStarting || !strings.Contains(st.Source.Waiting, "INSERT INTO busy") {
		t.Errorf("state %s, waiting %q", st.State, st.Source.Waiting)
	}
	out, _, _ := p.cdcd("status", "-c", p.CfgPath)
	if !strings.Contains(out, "waiting: creating the replication slot waits") {
		t.Errorf("cdcd status does not say what it waits for:\n%s", out)
	}
	p.child.WaitUntil(t, "the wait reported twice", time.Minute, func() bool {
		return strings.Count(p.logTail(1<<20), "creating the replication slot waits for transactions") >= 2
	})
	if err := tx.Commit(p.ctx); err != nil {
		t.Fatal(err)
	}
	p.exec(`INSERT INTO a VALUES (2)`)
	p.waitCaughtUp()
	p.requireMirror()
}

// TestPreconditionErrors (issue 24 item 10): a server with wal_level =
// replica and a role without REPLICATION each stop cdcd run before it
// creates anything, with the statement that fixes it; a slot another
// process streams from is refused naming that process, never with advice
// to drop it.
func TestPreconditionErrors(t *testing.T) {
	t.Parallel()
	t.Run("wal_level", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, pipelineOptions{Tables: []string{"public.a"}})
		srv := pgtest.NewServer(t, pgserver.Options{Settings: map[string]string{"wal_level": "replica"}})
		p.DSN = pgtest.NewDBOn(t, srv)
		p.Conn = p.connect()
		p.exec(`CREATE TABLE a (id int PRIMARY KEY)`)
		p.writeConfig()
		p.requireRefused("wal_level = replica", "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")
	})
	t.Run("no replication", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, pipelineOptions{DDL: `CREATE TABLE a (id int PRIMARY KEY)`, Tables: []string{"public.a"}})
		role := pgtest.UniqueName(t, "role")
		p.exec(`CREATE ROLE ` + role + ` LOGIN; GRANT SELECT ON a TO ` + role)
		t.Cleanup(func() {
			_, _ = p.Conn.Exec(context.Background(), `DROP OWNED BY `+role+` CASCADE; DROP ROLE `+role)
		})
		u, err := url.Parse(p.DSN)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(role)
		p.DSN = u.String()
		p.writeConfig()
		p.requireRefused("lacks the REPLICATION attribute", `ALTER ROLE "`+role+`" WITH REPLICATION;`)
	})
	t.Run("slot in use", func(t *testing.T) {
		t.Parallel()
		p := newPipeline(t, pipelineOptions{DDL: `CREATE TABLE a (id int PRIMARY KEY); CREATE PUBLICATION other_pub FOR TABLE a`,
			Tables: []string{"public.a"}})
		p.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, p.Names.Slot)
		other, err := pgconn.Connect(p.ctx, p.DSN+"&replication=database&application_name=other_daemon")
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(context.Background())
		if err := pglogrepl.StartReplication(p.ctx, other, p.Names.Slot, 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'other_pub'"}}); err != nil {
			t.Fatal(err)
		}
		log := p.requireRefused("slot_foreign", "in use right now by pid", `application_name "other_daemon"`, "do not drop it")
		if strings.Contains(log, "pg_drop_replication_slot") {
			t.Errorf("advises dropping a slot in use:\n%s", log)
		}
	})
}

// requireRefused starts the daemon, requires it to exit with 1 and its
// log to say every one of words, and no publication to be left behind
// unless the test made one; it returns the log.
func (p *pipeline) requireRefused(words ...string) string {
	p.t.Helper()
	var pubsBefore int
	if err := p.Conn.QueryRow(p.ctx, `SELECT count(*) FROM pg_publication`).Scan(&pubsBefore); err != nil {
		p.t.Fatal(err)
	}
	p.start()
	if code := p.exited(2 * time.Minute); code != 1 {
		p.t.Fatalf("cdcd run exited with %d, want 1", code)
	}
	log := strings.ReplaceAll(p.logTail(1<<20), `\"`, `"`) // as written, not as the log quotes it
	for _, w := range words {
		if !strings.Contains(log, w) {
			p.t.Errorf("the log does not say %q:\n%s", w, log)
		}
	}
	var pubs int
	if err := p.Conn.QueryRow(p.ctx, `SELECT count(*) FROM pg_publication`).Scan(&pubs); err != nil {
		p.t.Fatal(err)
	}
	if pubs != pubsBefore {
		p.t.Errorf("a refused start left a publication behind")
	}
	return log
}

// TestInfinityMapped (issue 24 item 4, docs/types.md): ±infinity in
// timestamp, timestamptz and date columns is mapped, not refused: the
// table flows and its mirror equals the source.
func TestInfinityMapped(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE inf (id int PRIMARY KEY, ts timestamp, tz timestamptz, d date);
			INSERT INTO inf VALUES (1, 'infinity', '-infinity', 'infinity'), (2, '-infinity', 'infinity', '-infinity'), (3, now(), now(), now());`,
		Tables: []string{"public.inf"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`INSERT INTO inf VALUES (4, 'infinity', 'infinity', 'infinity')`)
	p.exec(`UPDATE inf SET tz = 'infinity' WHERE id = 3`)
	p.waitCaughtUp()
	// The mirror's SQL rendering cannot take infinity (extract(epoch) of it
	// overflows numeric(30,0)), so the values are checked here: the
	// extreme 64-bit microseconds and 32-bit days, as docs/types.md says.
	cat := p.openCatalog()
	defer closeCatalog(cat)
	rows, _, dups, n, err := mirror.IcebergRows(p.ctx, p.icebergTable(cat, "public.inf"), []string{"id"})
	if err != nil || n != 4 || len(dups) != 0 {
		t.Fatalf("%d rows, duplicates %v: %v", n, dups, err)
	}
	const maxTS, minTS, maxD, minD = "9223372036854775807", "-9223372036854775808", "2147483647", "-2147483648"
	want := map[string][3]string{"1": {maxTS, minTS, maxD}, "2": {minTS, maxTS, minD}, "4": {maxTS, maxTS, maxD}}
	for id, w := range want {
		r := rows[id]
		if r["ts"] != w[0] || r["tz"] != w[1] || r["d"] != w[2] {
			t.Errorf("row %s: ts %s tz %s d %s, want %v", id, r["ts"], r["tz"], r["d"], w)
		}
	}
	if rows["3"]["tz"] != maxTS {
		t.Errorf("row 3 after the update: tz %s", rows["3"]["tz"])
	}
}

// resnapshot runs cdcd snapshot --replace for table and waits until every
// snapshot the daemon knows has finished.
func (p *pipeline) resnapshot(table string, done int) {
	p.t.Helper()
	out, errOut, code := p.cdcd("snapshot", "-c", p.CfgPath, "--replace", table)
	if code != 0 {
		p.t.Fatalf("cdcd snapshot --replace %s: exit %d: %s%s", table, code, out, errOut)
	}
	p.snapshotsDone(done, 3*time.Minute)
}

// TestBadRowFixedByResnapshot (issue 24 item 4, fix a): a table paused for
// a NaN in a numeric(10,2) resumes once the row is fixed at the source and
// the table re-snapshotted: the reset marker ends the pause, the held
// changes are superseded, and the mirror equals the source.
func TestBadRowFixedByResnapshot(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE money (id int PRIMARY KEY, amount numeric(10,2));
			INSERT INTO money SELECT g, g FROM generate_series(1, 300) g;`,
		Tables: []string{"public.money"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`UPDATE money SET amount = 'NaN' WHERE id = 7`)
	p.exec(`UPDATE money SET amount = 1000 WHERE id = 8`) // held behind it
	p.waitPaused("cdc.money", "NaN")
	p.exec(`UPDATE money SET amount = 0 WHERE id = 7`) // the fix at the source; held too
	p.resnapshot("public.money", 1)
	p.waitCaughtUp()
	p.requireMirror()
	if len(p.status().Paused) != 0 {
		t.Error("still paused after the re-snapshot")
	}
}

// TestPublicationRepairedByResnapshot (issue 24 item 3): a table dropped
// from the publication misses changes; once the publication is right
// again and the table re-snapshotted, as the pause says, its mirror equals
// the source.
func TestPublicationRepairedByResnapshot(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text);
			INSERT INTO a SELECT g, 'x' FROM generate_series(1, 200) g; INSERT INTO b VALUES (1, 'x');`,
		Tables: []string{"public.a", "public.b"},
	})
	p.start()
	p.waitCaughtUp()
	pub := p.Names.Publication
	p.exec(`ALTER PUBLICATION ` + pub + ` DROP TABLE a`)
	p.exec(`INSERT INTO a VALUES (1000, 'missed'); UPDATE a SET v = 'missed' WHERE id < 20; DELETE FROM a WHERE id > 190`)
	p.waitReason("cdc.a", "no longer in publication")
	p.exec(`ALTER PUBLICATION ` + pub + ` ADD TABLE a`)
	p.waitReason("cdc.a", "added again")
	if d := p.diff("public.a"); d.Equal() {
		t.Fatal("the mirror equals the source although changes were missed: the test missed nothing")
	}
	p.exec(`UPDATE a SET v = 'after' WHERE id = 100`)
	p.resnapshot("public.a", 1)
	p.exec(`INSERT INTO b VALUES (2, 'y')`)
	p.waitCaughtUp()
	p.requireMirror()
}

// TestRecreatedTableRepairedByResnapshot (issue 24 item 3): a captured
// table dropped and created again with other rows is a new table; the
// re-snapshot its pause names makes the mirror equal to the new table.
func TestRecreatedTableRepairedByResnapshot(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT g, 'old' FROM generate_series(1, 100) g;`,
		Tables: []string{"public.a"},
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`DROP TABLE a; CREATE TABLE a (id int PRIMARY KEY, v text); ALTER PUBLICATION ` + p.Names.Publication + ` ADD TABLE a;
		INSERT INTO a SELECT g, 'new' FROM generate_series(50, 120) g`)
	p.waitReason("cdc.a", "dropped and created again")
	p.resnapshot("public.a", 1)
	p.waitCaughtUp()
	p.requireMirror()
}
