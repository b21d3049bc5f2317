package postgres

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/postgres/spill"
)

// smallDecodingMemory makes the walsender stream any transaction over 64kB
// before it commits (logical_decoding_work_mem is per session).
func smallDecodingMemory(dsn string) string { return dsn + "&logical_decoding_work_mem=64kB" }

// TestStreamedLargeTransactions: transactions larger than the decoding
// memory arrive streamed before they commit; the reader spills them and
// emits them at their commit, whole, in order, positioned by the commit
// LSN; rolled-back savepoints and aborted transactions leave nothing.
func TestStreamedLargeTransactions(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	e.dsn = smallDecodingMemory(e.dsn)
	c := newCollector()
	_, r := e.startReader(t, []string{"big"}, false, c)
	pad := strings.Repeat("x", 100)

	// 1: savepoints, one rolled back, while small transactions commit
	// from another session in the middle.
	tx, err := e.conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(t.Context(), sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec(`INSERT INTO big SELECT g, $1 FROM generate_series(1, 3000) g`, pad)
	mustExec(`SAVEPOINT a`)
	mustExec(`INSERT INTO big SELECT g, 'rolled back' FROM generate_series(100001, 103000) g`)
	mustExec(`SAVEPOINT a2`)
	mustExec(`UPDATE big SET v = 'nested, rolled back' WHERE id <= 10`)
	mustExec(`ROLLBACK TO SAVEPOINT a`)
	mustExec(`SAVEPOINT b`)
	mustExec(`UPDATE big SET v = 'kept' WHERE id <= 1000`)
	mustExec(`RELEASE SAVEPOINT b`)
	other, err := pgx.Connect(t.Context(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.Exec(t.Context(), `INSERT INTO big VALUES (-1, 'small, committed first')`); err != nil {
		t.Fatal(err)
	}
	mustExec(`DELETE FROM big WHERE id > 2900`)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	// 2: a large transaction that aborts.
	tx, err = e.conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mustExec(`INSERT INTO big SELECT g, $1 FROM generate_series(200001, 203000) g`, pad)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `INSERT INTO big VALUES (-2, 'after the abort')`)

	want := 1 + 3000 + 1000 + 100 + 1
	got := c.wait(t, want)
	if len(got) != want {
		t.Fatalf("%d changes, want %d", len(got), want)
	}
	if got[0].After[0] != int64(-1) {
		t.Fatalf("the small transaction committed first must come first: %v", got[0].After)
	}
	big := got[1 : 1+3000+1000+100]
	lsn := big[0].LSN
	var prev uint64
	for i, ch := range big {
		pos, idx, _ := pgpos.Parse(ch.Pos)
		if ch.LSN != lsn || pos != lsn || idx != uint32(i) {
			t.Fatalf("change %d at %X/%d, want %X/%d", i, pos, idx, lsn, i)
		}
		// Each change carries its own WAL position, through the spill file
		// too: increasing, before the commit.
		if ch.EventLSN <= prev || ch.EventLSN >= lsn {
			t.Fatalf("change %d's own LSN %X after %X (commit %X)", i, ch.EventLSN, prev, lsn)
		}
		prev = ch.EventLSN
		var wantOp source.Op
		switch {
		case i < 3000:
			wantOp = source.OpCreate
		case i < 4000:
			wantOp = source.OpUpdate
			if ch.After[1] != "kept" || ch.After[0] != int64(i-3000+1) {
				t.Fatalf("update %d: %v", i, ch.After)
			}
		default:
			wantOp = source.OpDelete
			if ch.Before[0] != int64(2901+i-4000) {
				t.Fatalf("delete %d: %v", i, ch.Before)
			}
		}
		if ch.Op != wantOp {
			t.Fatalf("change %d is %s, want %s", i, ch.Op, wantOp)
		}
	}
	if last := got[len(got)-1]; last.After[0] != int64(-2) || last.LSN <= lsn || last.EventLSN == 0 || last.EventLSN >= last.LSN {
		t.Fatalf("last change %v at %X (own LSN %X)", last.After, last.LSN, last.EventLSN)
	}
	if n := r.Stats().StreamedTxns.Load(); n < 1 {
		t.Fatalf("no transaction arrived streamed (StreamedTxns %d): the test did not exercise streaming", n)
	}
	if b := r.Stats().SpilledBytes.Load(); b != 0 {
		t.Errorf("%d bytes still spilled", b)
	}
	files, _ := os.ReadDir(r.cfg.SpillDir)
	if len(files) != 0 {
		t.Errorf("spill files left: %v", files)
	}
}

// TestReplicaIdentities: what a delete's and an update's before image
// holds under each replica identity, and that the key follows the replica
// identity index where there is one.
func TestReplicaIdentities(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE rdef (id int PRIMARY KEY, a text, b int);
		CREATE TABLE rfull (id int PRIMARY KEY, a text, b int); ALTER TABLE rfull REPLICA IDENTITY FULL;
		CREATE TABLE ridx (code text NOT NULL, a text, b int); CREATE UNIQUE INDEX ridx_code ON ridx (code);
		ALTER TABLE ridx REPLICA IDENTITY USING INDEX ridx_code`)
	c := newCollector()
	e.start(t, []string{"rdef", "rfull", "ridx"}, false, c)
	for _, tbl := range []string{"rdef", "rfull"} {
		e.exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, 'x', 1)`, tbl))
		e.exec(t, fmt.Sprintf(`UPDATE %s SET b = 2`, tbl))
		e.exec(t, fmt.Sprintf(`UPDATE %s SET id = 2`, tbl))
		e.exec(t, fmt.Sprintf(`DELETE FROM %s`, tbl))
	}
	e.exec(t, `INSERT INTO ridx VALUES ('k', 'x', 1)`)
	e.exec(t, `UPDATE ridx SET b = 2`)
	e.exec(t, `UPDATE ridx SET code = 'k2'`)
	e.exec(t, `DELETE FROM ridx`)
	got := c.wait(t, 15)
	wants := []string{
		"c rdef [] [1 x 1]", "u rdef [1 <nil> <nil>] [1 x 2]", "d rdef [1 <nil> <nil>] []", "c rdef [] [2 x 2]", "d rdef [2 <nil> <nil>] []",
		"c rfull [] [1 x 1]", "u rfull [1 x 1] [1 x 2]", "d rfull [1 x 2] []", "c rfull [] [2 x 2]", "d rfull [2 x 2] []",
		"c ridx [] [k x 1]", "u ridx [k <nil> <nil>] [k x 2]", "d ridx [k <nil> <nil>] []", "c ridx [] [k2 x 2]", "d ridx [k2 <nil> <nil>] []",
	}
	for i, w := range wants {
		g := got[i]
		s := fmt.Sprintf("%s %s %v %v", g.Op, g.Table.Name, fmtRow(g.Before), fmtRow(g.After))
		if s != w {
			t.Errorf("change %d: %s, want %s", i, s, w)
		}
	}
	if k := got[10].Table.KeyColumns(); len(k) != 1 || k[0].Name != "code" {
		t.Errorf("ridx key %v, want the replica identity index's code", k)
	}
}

func fmtRow(r []any) string {
	if r == nil {
		return "[]"
	}
	return fmt.Sprint(r)
}

// TestTruncateSeveralTables: one TRUNCATE of several tables becomes one
// truncate per captured table, in the statement's order, consecutive in
// the transaction; tables not captured are skipped but counted, so
// positions don't depend on the table list.
func TestTruncateSeveralTables(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE ta (id int PRIMARY KEY); CREATE TABLE tb (id int PRIMARY KEY); CREATE TABLE tc (id int PRIMARY KEY)`)
	c := newCollector()
	e.start(t, []string{"ta", "tb"}, false, c)
	e.exec(t, `INSERT INTO ta VALUES (1); INSERT INTO tb VALUES (1)`)
	e.exec(t, `BEGIN; INSERT INTO ta VALUES (2); TRUNCATE tb, ta; INSERT INTO tb VALUES (3); COMMIT`)
	got := c.wait(t, 6)
	var ops []string
	for _, ch := range got[2:] {
		_, idx, _ := pgpos.Parse(ch.Pos)
		ops = append(ops, fmt.Sprintf("%s %s %d", ch.Op, ch.Table.Name, idx))
	}
	if strings.Join(ops, ", ") != "c ta 0, t tb 1, t ta 2, c tb 3" {
		t.Fatalf("got %s", strings.Join(ops, ", "))
	}
}

// TestDDLMidStream: a column added, dropped or retyped inside and between
// transactions gives a new table version from its exact point on.
func TestDDLMidStream(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE d (id int PRIMARY KEY, a int)`)
	c := newCollector()
	e.start(t, []string{"d"}, false, c)
	e.exec(t, `INSERT INTO d VALUES (1, 1)`)
	e.exec(t, `BEGIN; INSERT INTO d VALUES (2, 2); ALTER TABLE d ADD COLUMN b text; INSERT INTO d VALUES (3, 3, 'x'); COMMIT`)
	e.exec(t, `ALTER TABLE d ALTER COLUMN a TYPE bigint`)
	e.exec(t, `INSERT INTO d VALUES (4, 4000000000, 'y')`)
	e.exec(t, `ALTER TABLE d DROP COLUMN b`)
	e.exec(t, `UPDATE d SET a = 5 WHERE id = 4`)
	got := c.wait(t, 5)
	wants := []struct {
		shape string
		after string
	}{
		{"public.d(id int32 key, a int32 null)", "[1 1]"},
		{"public.d(id int32 key, a int32 null)", "[2 2]"},
		{"public.d(id int32 key, a int32 null, b string null)", "[3 3 x]"},
		{"public.d(id int32 key, a int64 null, b string null)", "[4 4000000000 y]"},
		{"public.d(id int32 key, a int64 null)", "[4 5]"},
	}
	for i, w := range wants {
		if got[i].Table.String() != w.shape || fmt.Sprint(got[i].After) != w.after {
			t.Errorf("change %d: %s %v, want %s %s", i, got[i].Table, got[i].After, w.shape, w.after)
		}
	}
	if got[0].Table != got[1].Table {
		t.Error("changes of one shape do not share the table version")
	}
}

// TestUnchangedToastUnderEveryIdentity: an unchanged TOASTed value is
// Unchanged (never NULL) in an update's after image; when the key changes
// under REPLICA IDENTITY FULL the old row supplies it to the insert,
// otherwise the insert carries the old key as its before image.
func TestUnchangedToastUnderEveryIdentity(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE td (id int PRIMARY KEY, body text, n int); ALTER TABLE td ALTER COLUMN body SET STORAGE EXTERNAL;
		CREATE TABLE tf (id int PRIMARY KEY, body text, n int); ALTER TABLE tf ALTER COLUMN body SET STORAGE EXTERNAL;
		ALTER TABLE tf REPLICA IDENTITY FULL`)
	c := newCollector()
	e.start(t, []string{"td", "tf"}, false, c)
	big := strings.Repeat("0123456789", 1000)
	for _, tbl := range []string{"td", "tf"} {
		e.exec(t, fmt.Sprintf(`INSERT INTO %s VALUES (1, $1, 1)`, tbl), big)
		e.exec(t, fmt.Sprintf(`UPDATE %s SET n = 2`, tbl))
		e.exec(t, fmt.Sprintf(`UPDATE %s SET id = 2`, tbl))
	}
	got := c.wait(t, 8)
	// td: insert, update (unchanged), delete+insert (unchanged: the sink resolves it).
	if !schema.IsUnchanged(got[1].After[1]) || got[1].After[2] != int64(2) {
		t.Errorf("td update after = %v", got[1].After)
	}
	if got[3].Op != source.OpCreate || !schema.IsUnchanged(got[3].After[1]) {
		t.Errorf("td key change insert = %s %v", got[3].Op, got[3].After)
	}
	// ... and names the old key, whose row holds the value; the delete
	// says an insert depends on it.
	if got[3].Before == nil || got[3].Before[0] != int64(1) {
		t.Errorf("td key change insert before = %v, want the old key 1", got[3].Before)
	}
	if got[2].Op != source.OpDelete || !got[2].KeyChange {
		t.Errorf("td key change delete = %s, KeyChange %t", got[2].Op, got[2].KeyChange)
	}
	if got[6].KeyChange {
		t.Errorf("tf key change delete is marked, but its insert needs nothing from it")
	}
	if got[7].Before != nil {
		t.Errorf("tf key change insert has a before image %v; it needs none", got[7].Before)
	}
	// tf: the key change's insert carries the value from the old row.
	if got[7].Op != source.OpCreate || got[7].After[1] != big {
		t.Errorf("tf key change insert lost the TOASTed value: %s %v", got[7].Op, got[7].After[0])
	}
	for _, ch := range got {
		for _, v := range ch.After {
			if v == nil && ch.Op == source.OpCreate {
				t.Errorf("NULL in an insert: %s %v", ch.Op, ch.After)
			}
		}
	}
}

// TestPartitionedTable: a partitioned table is captured by its root (the
// publication publishes through it), in the snapshot and in the stream.
func TestPartitionedTable(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE m (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
		CREATE TABLE m_eu PARTITION OF m FOR VALUES IN ('eu'); CREATE TABLE m_us PARTITION OF m FOR VALUES IN ('us');
		INSERT INTO m VALUES (1, 'eu', 1), (2, 'us', 2)`)
	c := newCollector()
	e.start(t, []string{"m"}, true, c)
	e.exec(t, `INSERT INTO m VALUES (3, 'us', 3)`)
	e.exec(t, `UPDATE m SET region = 'us' WHERE id = 1`) // moves to another partition
	got := c.wait(t, 5)
	var s []string
	for _, ch := range got {
		s = append(s, fmt.Sprintf("%s %s %v %v", ch.Op, ch.Table.Name, fmtRow(ch.Before), fmtRow(ch.After)))
	}
	want := "r m [] [1 eu 1], r m [] [2 us 2], c m [] [3 us 3], d m [1 eu <nil>] [], c m [] [1 us 1]"
	if strings.Join(s, ", ") != want {
		t.Fatalf("got  %s\nwant %s", strings.Join(s, ", "), want)
	}
}

// TestPublicationChecks: an existing publication that would miss changes
// is refused with a *PublicationError naming the fix.
func TestPublicationChecks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, ddl string
		want      string
	}{
		{"no truncate", `CREATE TABLE p (id int PRIMARY KEY); CREATE PUBLICATION %s FOR TABLE p WITH (publish = 'insert, update, delete')`,
			"truncate false"},
		{"partitions by leaf", `CREATE TABLE p (id int PRIMARY KEY) PARTITION BY RANGE (id); CREATE TABLE p1 PARTITION OF p FOR VALUES FROM (0) TO (10);
			CREATE PUBLICATION %s FOR TABLE p`, "publish_via_partition_root = true"},
		{"row filter", `CREATE TABLE p (id int PRIMARY KEY, v int); CREATE PUBLICATION %s FOR TABLE p WHERE (v > 0)
			WITH (publish_via_partition_root = true)`, "the row filter WHERE (v > 0)"},
		{"column list", `CREATE TABLE p (id int PRIMARY KEY, v int, w int); CREATE PUBLICATION %s FOR TABLE p (id, v)
			WITH (publish_via_partition_root = true)`, "the column list (id, v)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, "SELECT 1")
			e.exec(t, fmt.Sprintf(tc.ddl, e.names.Publication))
			r := New(e.config(t, []string{"p"}, false), e.state, discard)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := r.Run(ctx, newCollector())
			var pe *PublicationError
			if !errorsAs(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want a *PublicationError with %q", err, tc.want)
			}
		})
	}
}

// TestSpillGapReconnects: a streamed transaction this session saw only in
// part makes the reader reconnect, so the server streams it again whole.
func TestSpillGapReconnects(t *testing.T) {
	if !retryable(&connError{spill.ErrGap}) {
		t.Fatal("a gap must make the reader reconnect")
	}
}

// TestInheritedTables: a captured table that others inherit from
// (INHERITS) is mirrored with its own rows only, by the initial load and
// by an incremental one, as its changes are: pgoutput sends the children's
// changes under their names, so loading their rows with the parent's left
// rows in its mirror whose changes never came. A child captured as a
// table of its own is mirrored whole.
func TestInheritedTables(t *testing.T) {
	t.Parallel()
	for _, incremental := range []bool{false, true} {
		t.Run(fmt.Sprintf("incremental=%t", incremental), func(t *testing.T) {
			t.Parallel()
			e := setup(t, `CREATE TABLE par (id int PRIMARY KEY, v text, big text);
				CREATE TABLE kid (PRIMARY KEY (id)) INHERITS (par);
				INSERT INTO par VALUES (1, 'par', NULL); INSERT INTO kid VALUES (2, 'kid', NULL), (5, 'kid', NULL)`)
			m := newMirror(4)
			_, r := e.startReader(t, []string{"par", "kid"}, true, m, func(c *Config) { c.Incremental.Load = incremental })
			e.exec(t, `INSERT INTO kid VALUES (3, 'kid streamed', NULL); UPDATE par SET v = 'updated' WHERE id = 2;
				DELETE FROM par WHERE id = 5; INSERT INTO par VALUES (4, 'par streamed', NULL)`)
			waitSettled(t, r, m, "public.par", 4)
			waitKey(t, m, "public.kid", 3)
			if got := len(m.state("public.par")); got != 2 {
				t.Errorf("par's mirror has %d rows, want its own 2", got)
			}
			compareMirror(t, m, e.conn, "ONLY par")
			compareMirror(t, m, e.conn, "kid")
		})
	}
}

// TestBatchDelayEndsTheReceive: with statuses, heartbeats and publication
// checks a minute apart, a lone change waits about BatchDelay for company,
// not until the next status: the receive's deadline follows the batch's.
// (The loop sets the connection's deadline only when it moves; one left
// at the next status held every lone change until then.)
func TestBatchDelayEndsTheReceive(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE lone (id int PRIMARY KEY)`)
	c := newCollector()
	_, r := e.startReader(t, []string{"lone"}, false, c, func(c *Config) {
		c.StatusInterval, c.HeartbeatInterval, c.PublicationCheckInterval = time.Minute, -1, time.Minute
		c.BatchDelay = 50 * time.Millisecond
	})
	for deadline := time.Now().Add(30 * time.Second); !r.Stats().Streaming.Load(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the reader is not streaming after 30 s")
		}
	}
	for i := 1; i <= 3; i++ {
		e.exec(t, fmt.Sprintf(`INSERT INTO lone VALUES (%d)`, i))
		start := time.Now()
		c.wait(t, i)
		if el := time.Since(start); el > 10*time.Second {
			t.Fatalf("insert %d reached the Emitter %v after its commit; BatchDelay is 50ms", i, el.Round(time.Millisecond))
		}
	}
}
