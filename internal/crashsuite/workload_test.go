package crashsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// schemaDDL creates the captured tables. note is TOASTed out of line
// (STORAGE EXTERNAL) so updates that leave it alone send it "unchanged";
// legacy is dropped and item.qty widened mid-run; evt is the table of the
// long transactions (no DDL or TRUNCATE touches it, so they never wait on
// its locks).
const schemaDDL = `
CREATE TABLE acct (
  id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), active boolean, at timestamptz,
  score float8, doc jsonb, blob bytea, uid uuid, note text, legacy integer);
ALTER TABLE acct ALTER COLUMN note SET STORAGE EXTERNAL;
CREATE TABLE item (id integer PRIMARY KEY, qty integer, name text, price numeric(12,2), at timestamptz);
CREATE TABLE bulk (id bigint PRIMARY KEY, grp integer NOT NULL, pad text);
CREATE TABLE evt (id bigint PRIMARY KEY, body text, n integer);
`

// tables are the captured tables, in the order the suite checks them.
var tables = []string{"acct", "item", "bulk", "evt"}

// workloadConfig sizes a workload.
type workloadConfig struct {
	Seed uint64
	// BigTx is the row count of a large transaction (streamed by
	// PostgreSQL before its commit once it exceeds logical_decoding_work_mem).
	BigTx int
	// Preload is the number of rows per table inserted before the daemon's
	// first start (read by the initial load).
	Preload int
	// RekeyUnchangedToast makes primary-key updates leave the TOASTed note
	// alone, so the insert of the new key arrives with note "unchanged"
	// and the sink must take it from the old key's row. The upsert sink
	// cannot yet (key-change resolution is in progress on sink/iceberg):
	// off by default, CDCD_CRASH_REKEY_UNCHANGED_TOAST=1 turns it on.
	RekeyUnchangedToast bool
}

// workload is a seeded sequence of transactions: the same seed issues the
// same statements in the same order (kills never change the source), so a
// failure replays with its seed. Keys live in Go so no statement depends
// on what a query returns.
type workload struct {
	cfg  workloadConfig
	rng  *rand.Rand
	conn *pgx.Conn
	// long is the open long transaction on its own connection, kept open
	// across kills; longSteps counts the steps until it ends.
	longConn  *pgx.Conn
	long      pgx.Tx
	longSteps int
	longIDs   []int64 // evt rows the long transaction inserted
	keys      map[string][]int64
	next      map[string]int64
	steps     int
	// schema stage: 1 memo added, 2 item.qty bigint, 3 legacy dropped.
	stage int
	ops   map[string]int
}

func newWorkload(cfg workloadConfig, conn, longConn *pgx.Conn) *workload {
	return &workload{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), conn: conn, longConn: longConn,
		keys: map[string][]int64{}, next: map[string]int64{"acct": 1, "item": 1, "bulk": 1, "evt": 1}, ops: map[string]int{},
	}
}

// words make compressible and incompressible text.
var words = []string{"alpha", "beta", "gamma", "delta", "ÿüñî", "zeta", "eta", "θήτα", "iota", "kappa", "lambda", "'quote'", "back\\slash", "tab\there"}

func (w *workload) text(n int) string {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[w.rng.IntN(len(words))])
		b.WriteByte(' ')
		if w.rng.IntN(8) == 0 {
			fmt.Fprintf(&b, "%x", w.rng.Uint64())
		}
	}
	return b.String()
}

// toast is a value stored out of line: over 2 KB, partly random so
// compression does not bring it under the threshold.
func (w *workload) toast() string {
	var b strings.Builder
	for b.Len() < 2500+w.rng.IntN(6000) {
		fmt.Fprintf(&b, "%016x", w.rng.Uint64())
	}
	return b.String()
}

func (w *workload) pick(table string) (int64, bool) {
	k := w.keys[table]
	if len(k) == 0 {
		return 0, false
	}
	return k[w.rng.IntN(len(k))], true
}

func (w *workload) forget(table string, id int64) {
	k := w.keys[table]
	if i := slices.Index(k, id); i >= 0 {
		k[i] = k[len(k)-1]
		w.keys[table] = k[:len(k)-1]
	}
}

func (w *workload) newID(table string) int64 {
	id := w.next[table]
	w.next[table]++
	if !frozen(table, id) {
		w.keys[table] = append(w.keys[table], id)
	}
	return id
}

// frozen says an acct row is never changed after its insert (one in
// five): a value lost on its way to the mirror — by the load, or by the
// insert's commit — stays lost until the round's check, where later
// updates of a row would have hidden it (a column added just before the
// load's snapshot was once left out that way; the rows were rewritten by
// the round's end).
func frozen(table string, id int64) bool { return table == "acct" && id%5 == 2 }

func (w *workload) maybeNull(v any) any {
	if w.rng.IntN(10) == 0 {
		return nil
	}
	return v
}

// acctValues are the values of an acct row (without id).
func (w *workload) acctValues() []any {
	at := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(w.rng.Int64N(5*365*24*3600)) * time.Second).
		Add(time.Duration(w.rng.IntN(1_000_000)) * time.Microsecond)
	var uid [16]byte
	for i := range uid {
		uid[i] = byte(w.rng.IntN(256))
	}
	blob := make([]byte, w.rng.IntN(40))
	for i := range blob {
		blob[i] = byte(w.rng.IntN(256))
	}
	doc := fmt.Sprintf(`{"k": %d, "tags": ["%s", "x"], "nested": {"ok": %t, "f": %g}}`, w.rng.IntN(1000), words[w.rng.IntN(4)], w.rng.IntN(2) == 0, w.rng.Float64())
	note := any(w.text(20))
	if w.rng.IntN(3) == 0 {
		note = w.toast()
	}
	return []any{
		w.text(8), w.maybeNull(fmt.Sprintf("%d.%02d", w.rng.IntN(2_000_000_000)-1_000_000_000, w.rng.IntN(100))),
		w.maybeNull(w.rng.IntN(2) == 0), w.maybeNull(at), w.maybeNull(w.rng.NormFloat64() * 1e6), w.maybeNull(doc),
		w.maybeNull(blob), w.maybeNull(fmt.Sprintf("%x-%x-%x-%x-%x", uid[0:4], uid[4:6], uid[6:8], uid[8:10], uid[10:16])), w.maybeNull(note),
	}
}

func (w *workload) acctInsert(ctx context.Context, tx pgx.Tx) error {
	id := w.newID("acct")
	args := append([]any{id}, w.acctValues()...)
	cols := "id, owner, balance, active, at, score, doc, blob, uid, note"
	ph := "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10"
	if w.stage >= 1 {
		cols += ", memo"
		ph += ", $11"
		args = append(args, w.maybeNull(w.text(12)))
	}
	if w.stage < 3 {
		cols += ", legacy"
		args = append(args, w.maybeNull(w.rng.Int32()))
		ph += fmt.Sprintf(", $%d", len(args))
	}
	_, err := tx.Exec(ctx, "INSERT INTO acct ("+cols+") VALUES ("+ph+")", args...)
	return err
}

func (w *workload) acctUpdate(ctx context.Context, tx pgx.Tx) error {
	id, ok := w.pick("acct")
	if !ok {
		return w.acctInsert(ctx, tx)
	}
	var err error
	switch w.rng.IntN(5) {
	case 0: // the TOASTed note untouched: it arrives "unchanged"
		_, err = tx.Exec(ctx, "UPDATE acct SET balance = $2, active = NOT coalesce(active, false) WHERE id = $1", id, fmt.Sprintf("%d.%02d", w.rng.IntN(1000), w.rng.IntN(100)))
	case 1:
		_, err = tx.Exec(ctx, "UPDATE acct SET note = $2 WHERE id = $1", id, w.maybeNull(w.toast()))
	case 2:
		v := w.acctValues()
		_, err = tx.Exec(ctx, "UPDATE acct SET owner = $2, balance = $3, active = $4, at = $5, score = $6, doc = $7, blob = $8, uid = $9 WHERE id = $1",
			append([]any{id}, v[:8]...)...)
	case 3:
		if w.stage >= 1 {
			_, err = tx.Exec(ctx, "UPDATE acct SET memo = $2 WHERE id = $1", id, w.text(30))
		} else {
			_, err = tx.Exec(ctx, "UPDATE acct SET doc = jsonb_set(coalesce(doc, '{}'), '{k}', to_jsonb($2::int)) WHERE id = $1", id, w.rng.IntN(99))
		}
	default: // several rows at once
		_, err = tx.Exec(ctx, "UPDATE acct SET score = coalesce(score, 0) + 1 WHERE id % 17 = $1 AND id % 5 <> 2", w.rng.IntN(17))
	}
	return err
}

// acctRekey changes a primary key; the TOASTed note is not touched.
func (w *workload) acctRekey(ctx context.Context, tx pgx.Tx) error {
	id, ok := w.pick("acct")
	if !ok {
		return nil
	}
	w.forget("acct", id)
	nid := w.newID("acct")
	sql := "UPDATE acct SET id = $2, owner = owner || '*' WHERE id = $1"
	if !w.cfg.RekeyUnchangedToast {
		// A new value, so the source sends it whole (see RekeyUnchangedToast).
		sql = "UPDATE acct SET id = $2, owner = owner || '*', note = note || '' WHERE id = $1"
	}
	_, err := tx.Exec(ctx, sql, id, nid)
	return err
}

func (w *workload) del(ctx context.Context, tx pgx.Tx, table string) error {
	id, ok := w.pick(table)
	if !ok {
		return nil
	}
	w.forget(table, id)
	_, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE id = $1", id)
	return err
}

func (w *workload) item(ctx context.Context, tx pgx.Tx) error {
	qty := any(w.rng.Int32N(1000))
	if w.stage >= 2 && w.rng.IntN(2) == 0 {
		qty = int64(1)<<40 + w.rng.Int64N(1<<40) // only fits once widened
	}
	switch r := w.rng.IntN(10); {
	case r < 4:
		id := w.newID("item")
		_, err := tx.Exec(ctx, "INSERT INTO item VALUES ($1, $2::bigint, $3, $4, now())", id, qty, w.maybeNull(w.text(10)), fmt.Sprintf("%d.%02d", w.rng.IntN(99999), w.rng.IntN(100)))
		return err
	case r < 7:
		id, ok := w.pick("item")
		if !ok {
			return nil
		}
		_, err := tx.Exec(ctx, "UPDATE item SET qty = $2::bigint, price = price * 2 WHERE id = $1", id, qty)
		return err
	case r < 8:
		id, ok := w.pick("item")
		if !ok {
			return nil
		}
		w.forget("item", id)
		nid := w.newID("item")
		_, err := tx.Exec(ctx, "UPDATE item SET id = $2 WHERE id = $1", id, nid)
		return err
	default:
		return w.del(ctx, tx, "item")
	}
}

// bulkInsert inserts n rows in one statement.
func (w *workload) bulkInsert(ctx context.Context, tx pgx.Tx, n int) error {
	first := w.next["bulk"]
	for range n {
		w.newID("bulk")
	}
	_, err := tx.Exec(ctx, "INSERT INTO bulk SELECT g, (g % 10)::int, repeat(md5(g::text), $3) FROM generate_series($1::bigint, $2::bigint) g",
		first, first+int64(n)-1, 1+w.rng.IntN(3))
	return err
}

func (w *workload) bulkChange(ctx context.Context, tx pgx.Tx) error {
	if w.rng.IntN(3) == 0 && len(w.keys["bulk"]) > 0 {
		// Delete a range of keys.
		lo, _ := w.pick("bulk")
		hi := lo + int64(w.rng.IntN(200))
		w.keys["bulk"] = slices.DeleteFunc(w.keys["bulk"], func(id int64) bool { return id >= lo && id <= hi })
		_, err := tx.Exec(ctx, "DELETE FROM bulk WHERE id BETWEEN $1 AND $2", lo, hi)
		return err
	}
	_, err := tx.Exec(ctx, "UPDATE bulk SET grp = grp + 1 WHERE id % 50 = $1", w.rng.IntN(50))
	return err
}

// inTx runs fn in one transaction on the main connection.
func (w *workload) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := w.conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (w *workload) exec(ctx context.Context, sql string) error {
	_, err := w.conn.Exec(ctx, sql)
	return err
}

// ddl runs the schema changes at fixed steps.
func (w *workload) ddl(ctx context.Context) (bool, error) {
	var sql string
	switch {
	case w.stage == 0 && w.steps >= 150:
		sql = "ALTER TABLE acct ADD COLUMN memo text"
	case w.stage == 1 && w.steps >= 400:
		sql = "ALTER TABLE item ALTER COLUMN qty TYPE bigint"
	case w.stage == 2 && w.steps >= 700:
		sql = "ALTER TABLE acct DROP COLUMN legacy"
	default:
		return false, nil
	}
	w.stage++
	w.ops["ddl"]++
	return true, w.exec(ctx, sql)
}

// longStep opens, extends or ends the long transaction on evt.
func (w *workload) longStep(ctx context.Context) error {
	if w.long == nil {
		tx, err := w.longConn.Begin(ctx)
		if err != nil {
			return err
		}
		w.long, w.longSteps, w.longIDs = tx, 200+w.rng.IntN(1500), nil
		w.ops["long-begin"]++
	}
	switch r := w.rng.IntN(10); {
	case r < 6:
		for range 1 + w.rng.IntN(20) {
			id := w.next["evt"]
			w.next["evt"]++
			w.longIDs = append(w.longIDs, id)
			if _, err := w.long.Exec(ctx, "INSERT INTO evt VALUES ($1, $2, 0)", id, w.text(40)); err != nil {
				return err
			}
		}
	case r < 8 && len(w.longIDs) > 0:
		id := w.longIDs[w.rng.IntN(len(w.longIDs))]
		if _, err := w.long.Exec(ctx, "UPDATE evt SET n = n + 1, body = $2 WHERE id = $1", id, w.text(60)); err != nil {
			return err
		}
	default:
		// A subtransaction rolled back: its changes must not appear.
		if _, err := w.long.Exec(ctx, "SAVEPOINT s"); err != nil {
			return err
		}
		if _, err := w.long.Exec(ctx, "INSERT INTO evt SELECT g, 'rolled back', -1 FROM generate_series($1::bigint, $1::bigint + 50) g", w.next["evt"]+1_000_000_000); err != nil {
			return err
		}
		if _, err := w.long.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
			return err
		}
	}
	return nil
}

// endLong commits (or, one time in five, rolls back) the long transaction.
func (w *workload) endLong(ctx context.Context, commit bool) error {
	if w.long == nil {
		return nil
	}
	tx := w.long
	w.long = nil
	if !commit {
		w.ops["long-rollback"]++
		return tx.Rollback(ctx)
	}
	w.ops["long-commit"]++
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	w.keys["evt"] = append(w.keys["evt"], w.longIDs...)
	return nil
}

// step runs one transaction (or one step of the long one). It returns how
// long to pause before the next: now and then a second of quiet, so the
// source sends heartbeats.
func (w *workload) step(ctx context.Context) (time.Duration, error) {
	w.steps++
	if did, err := w.ddl(ctx); did || err != nil {
		return 0, err
	}
	if w.long != nil {
		if w.longSteps--; w.longSteps <= 0 {
			if err := w.endLong(ctx, w.rng.IntN(5) != 0); err != nil {
				return 0, err
			}
		}
	}
	var err error
	op := ""
	switch r := w.rng.IntN(1000); {
	case r < 220:
		op = "acct-insert"
		err = w.inTx(ctx, func(tx pgx.Tx) error {
			for range 1 + w.rng.IntN(4) {
				if err := w.acctInsert(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		})
	case r < 420:
		op = "acct-update"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.acctUpdate(ctx, tx) })
	case r < 470:
		op = "acct-rekey"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.acctRekey(ctx, tx) })
	case r < 540:
		op = "acct-delete"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.del(ctx, tx, "acct") })
	case r < 680:
		op = "item"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.item(ctx, tx) })
	case r < 730:
		op = "mixed"
		err = w.inTx(ctx, func(tx pgx.Tx) error {
			if err := w.acctUpdate(ctx, tx); err != nil {
				return err
			}
			if err := w.item(ctx, tx); err != nil {
				return err
			}
			if err := w.bulkInsert(ctx, tx, 1+w.rng.IntN(30)); err != nil {
				return err
			}
			return w.acctRekey(ctx, tx)
		})
	case r < 790:
		op = "bulk-change"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.bulkChange(ctx, tx) })
	case r < 830:
		op = "bulk-insert"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.bulkInsert(ctx, tx, 10+w.rng.IntN(300)) })
	case r < 834 && w.rng.IntN(max(w.cfg.BigTx, 6000)) >= 6000:
		// Larger transactions come rarer: as many rows per step whatever
		// their size.
		op = "bulk-insert"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.bulkInsert(ctx, tx, 10+w.rng.IntN(300)) })
	case r < 834:
		op = "big-tx"
		err = w.inTx(ctx, func(tx pgx.Tx) error {
			if err := w.bulkInsert(ctx, tx, w.cfg.BigTx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE bulk SET grp = grp + 100 WHERE id > $1", w.next["bulk"]-int64(w.cfg.BigTx/2))
			return err
		})
	case r < 837:
		op = "truncate"
		w.keys["bulk"] = nil
		err = w.exec(ctx, "TRUNCATE bulk")
	case r < 838:
		op = "truncate-item"
		w.keys["item"] = nil
		err = w.exec(ctx, "TRUNCATE item")
	case r < 920 && (w.long != nil || w.steps > 300): // not before the first slot is likely made
		op = "long"
		err = w.longStep(ctx)
	case r < 960:
		op = "evt"
		err = w.inTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO evt VALUES ($1, $2, 1)", w.newID("evt"), w.text(30))
			return err
		})
	case r < 963:
		op = "quiet"
		w.ops[op]++
		return time.Second, nil
	default:
		op = "acct-insert"
		err = w.inTx(ctx, func(tx pgx.Tx) error { return w.acctInsert(ctx, tx) })
	}
	w.ops[op]++
	return 2 * time.Millisecond, err
}

// preload fills the tables before the daemon first starts.
func (w *workload) preload(ctx context.Context) error {
	return w.inTx(ctx, func(tx pgx.Tx) error {
		for range w.cfg.Preload / 10 {
			if err := w.acctInsert(ctx, tx); err != nil {
				return err
			}
		}
		for range w.cfg.Preload / 10 {
			if err := w.item(ctx, tx); err != nil {
				return err
			}
		}
		return w.bulkInsert(ctx, tx, w.cfg.Preload)
	})
}

// mark commits a transaction and returns an LSN inside it: once the
// daemon has made that LSN durable and every table committed its topic,
// everything before is in Iceberg (DESIGN.md: take the LSN inside the
// last transaction).
func (w *workload) mark(ctx context.Context) (uint64, error) {
	var lsn uint64
	err := w.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO evt VALUES ($1, 'mark', 2)", w.newID("evt")); err != nil {
			return err
		}
		var s string
		if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			return err
		}
		var hi, lo uint32
		if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
			return err
		}
		lsn = uint64(hi)<<32 | uint64(lo)
		return nil
	})
	return lsn, err
}
