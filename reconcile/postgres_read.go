package reconcile

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Read is the point a source read saw: Low and High are source positions
// (the log's cdcd.pos order) such that every transaction that committed
// before Low (and is not in Gap) is visible to the read and none that
// committed at or after High is; Gap are transactions in progress when the
// read began (PostgreSQL xids), which may have committed before Low
// without being visible yet (reconcile.go says what is done about them).
type Read struct {
	Low, High []byte
	Gap       []uint64
}

// lsnPos is an LSN as a source position prefix (8 bytes big-endian).
func lsnPos(lsn pglogrepl.LSN) []byte { return binary.BigEndian.AppendUint64(nil, uint64(lsn)) }

// posLSN is the LSN a position starts with.
func posLSN(p []byte) pglogrepl.LSN {
	if len(p) < 8 {
		return 0
	}
	return pglogrepl.LSN(binary.BigEndian.Uint64(p))
}

// walLSN is the SQL of the WAL position transactions commit at: the insert
// position on a primary, the replay position on a standby (its snapshots
// see what it has replayed).
const walLSN = `CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END::text`

// runningXids is the SQL of the transactions that hold an xid now, each
// with the xmax of a snapshot taken beside (to widen its 32 bits). A
// transaction takes the lock on its xid when it gets one and releases it
// only after it has left the proc array, so one whose commit record is
// written but which no snapshot sees yet still holds it. On a standby
// there are none: its snapshots see what it has replayed.
const runningXids = `SELECT CASE WHEN pg_is_in_recovery() THEN '{}'::text[] ELSE array(
  SELECT transactionid::text FROM pg_locks WHERE locktype = 'transactionid' AND mode = 'ExclusiveLock' AND granted) END,
  pg_snapshot_xmax(pg_current_snapshot())::text`

// begin opens a read of table (its quoted name): Low is read before the
// transaction's snapshot is taken, High and the snapshot's in-progress
// transactions by the statement that takes it. Gap holds those and every
// transaction that held an xid between the two: a transaction whose xid is
// at or after the snapshot's xmax is not in its in-progress list, yet is
// invisible to it while it has not left the proc array — which it leaves
// after its commit record is written, so its commit can lie before Low.
//
// The table is locked (ACCESS SHARE) before the snapshot is taken: a
// table-rewriting DDL (ALTER TABLE ... TYPE, VACUUM FULL, CLUSTER) that
// committed after the snapshot would leave the table empty to the read (a
// rewrite is not MVCC-safe), and every mirror row of the range would be
// reported extra.
func begin(ctx context.Context, conn *pgx.Conn, table string) (pgx.Tx, *Read, error) {
	var low, high, snap, xmax string
	var running []string
	if err := conn.QueryRow(ctx, "SELECT "+walLSN).Scan(&low); err != nil {
		return nil, nil, fmt.Errorf("reconcile: read the WAL position: %w", err)
	}
	if err := conn.QueryRow(ctx, runningXids).Scan(&running, &xmax); err != nil {
		return nil, nil, fmt.Errorf("reconcile: read the running transactions: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, nil, err
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS SHARE MODE"); err != nil {
		tx.Rollback(ctx)
		return nil, nil, fmt.Errorf("reconcile: lock %s: %w", table, err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text, "+walLSN).Scan(&snap, &high); err != nil {
		tx.Rollback(ctx)
		return nil, nil, fmt.Errorf("reconcile: take a snapshot: %w", err)
	}
	r := &Read{}
	for i, s := range []string{low, high} {
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			tx.Rollback(ctx)
			return nil, nil, err
		}
		if i == 0 {
			r.Low = lsnPos(lsn)
		} else {
			r.High = lsnPos(lsn)
		}
	}
	if r.Gap, err = snapshotXip(snap); err != nil {
		tx.Rollback(ctx)
		return nil, nil, err
	}
	if r.Gap, err = addRunning(r.Gap, running, xmax); err != nil {
		tx.Rollback(ctx)
		return nil, nil, err
	}
	return tx, r, nil
}

// addRunning adds to gap the 32-bit xids of running, widened to 64 bits
// by the snapshot xmax read with them: a running xid lies within 2^31 of
// it.
func addRunning(gap []uint64, running []string, xmax string) ([]uint64, error) {
	if len(running) == 0 {
		return gap, nil
	}
	mx, err := strconv.ParseUint(xmax, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("reconcile: snapshot xmax %q: %w", xmax, err)
	}
	have := map[uint64]bool{}
	for _, x := range gap {
		have[x] = true
	}
	for _, s := range running {
		x32, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("reconcile: running xid %q: %w", s, err)
		}
		x := widenXid(mx, uint32(x32))
		if !have[x] {
			have[x] = true
			gap = append(gap, x)
		}
	}
	return gap, nil
}

// widenXid is the 64-bit xid whose low 32 bits are x32 nearest to ref.
func widenXid(ref uint64, x32 uint32) uint64 {
	x := ref&^0xffffffff | uint64(x32)
	switch {
	case x > ref+1<<31 && x >= 1<<32:
		x -= 1 << 32
	case x+1<<31 < ref:
		x += 1 << 32
	}
	return x
}

// snapshotXip parses pg_snapshot's text (xmin:xmax:xip,...) for its xips.
func snapshotXip(s string) ([]uint64, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return nil, fmt.Errorf("reconcile: snapshot %q", s)
	}
	if parts[2] == "" {
		return nil, nil
	}
	var out []uint64
	for _, x := range strings.Split(parts[2], ",") {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("reconcile: snapshot %q: %w", s, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// keyPredicate is the SQL of "the key is after lo and at most hi" (nil:
// open), with its arguments appended to args.
func keyPredicate(t *Table, lo, hi Key, args []any) (string, []any) {
	var conds []string
	cols := make([]string, len(t.Key))
	for i, ci := range t.Key {
		cols[i] = pgQuote(t.Columns[ci].Name)
	}
	tuple := "(" + strings.Join(cols, ",") + ")"
	bound := func(k Key) string {
		ph := make([]string, len(k))
		for i, ci := range t.Key {
			args = append(args, k[i])
			ph[i] = "$" + strconv.Itoa(len(args)) + "::" + t.Columns[ci].Type
		}
		return "(" + strings.Join(ph, ",") + ")"
	}
	if lo != nil {
		conds = append(conds, tuple+" > "+bound(lo))
	}
	if hi != nil {
		conds = append(conds, tuple+" <= "+bound(hi))
	}
	if len(conds) == 0 {
		return "true", args
	}
	return strings.Join(conds, " AND "), args
}

func keyOrder(t *Table) string {
	cols := make([]string, len(t.Key))
	for i, ci := range t.Key {
		cols[i] = pgQuote(t.Columns[ci].Name)
	}
	return strings.Join(cols, ",")
}

// keySelect lists each key column's literal text, then its canonical text.
func keySelect(t *Table) string {
	var s []string
	for _, ci := range t.Key {
		s = append(s, t.Columns[ci].Lit)
	}
	for _, ci := range t.Key {
		s = append(s, t.Columns[ci].SQL)
	}
	return strings.Join(s, ", ")
}

// Block is a range of keys summed: (the previous block's Last, Last].
type Block struct {
	// Last is the greatest key of the range (canonical texts; nil: no
	// upper bound), LastLit the same key as literals.
	Last, LastLit Key
	Rows          int64
	Sum           uint64
}

// Sums reads up to rows rows after key after and at most upto (nil: from
// the first, to the last), in key order, summed per block of blockRows
// rows, in one snapshot. The last block of a read that reached upto or
// the end has no upper bound. Each lane has a connection of its own: the
// lanes' reads run beside each other and the other methods.
func (p *Postgres) Sums(ctx context.Context, lane int, t *Table, after, upto Key, rows, blockRows int) ([]Block, *Read, error) {
	conn, err := p.lane(ctx, lane)
	if err != nil {
		return nil, nil, err
	}
	tx, r, err := begin(ctx, conn, t.SQL)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(ctx)
	where, args := keyPredicate(t, after, upto, nil)
	args = append(args, rows, blockRows)
	n := len(args)
	// One pass, no window and no grouping: the chunk's rows in key
	// order, each hashed, gathered into an array of hashes and one of
	// each key column's values; the texts of the keys that end a block
	// (each blockRows-th row and the chunk's last) are rendered from
	// those arrays, and cdcd sums the blocks. Numbering the rows with
	// row_number() and grouping them into blocks cost the server about
	// as much again as hashing them (the window spools each row, the
	// aggregate hashes it): BENCHMARKS.md, session 8.
	nk := len(t.Key)
	cols := make([]string, nk)
	aggs := []string{"array_agg(_cdcd_h) AS _cdcd_hs"}
	ends := make([]string, 2*nk)
	at := fmt.Sprintf("(SELECT least(i, cardinality(a._cdcd_hs)) AS p FROM generate_series($%[1]d, cardinality(a._cdcd_hs) + $%[1]d - 1, $%[1]d) i) g", n)
	for j, ci := range t.Key {
		c := t.Columns[ci]
		cols[j] = pgQuote(c.Name)
		if c.Canon == cList { // an array of arrays has no element to pick: every row's texts
			aggs = append(aggs, fmt.Sprintf("array_agg(%s::text) AS _cdcd_l%d, array_agg(%s) AS _cdcd_c%d", cols[j], j, c.SQL, j))
			ends[j] = fmt.Sprintf("ARRAY(SELECT a._cdcd_l%d[g.p] FROM %s ORDER BY g.p)", j, at)
			ends[nk+j] = fmt.Sprintf("ARRAY(SELECT a._cdcd_c%d[g.p] FROM %s ORDER BY g.p)", j, at)
			continue
		}
		aggs = append(aggs, fmt.Sprintf("array_agg(%s) AS _cdcd_k%d", cols[j], j))
		e := fmt.Sprintf("a._cdcd_k%d[g.p]", j)
		ends[j] = "ARRAY(SELECT (" + e + ")::text FROM " + at + " ORDER BY g.p)"
		ends[nk+j] = "ARRAY(SELECT " + c.canonAt(e) + " FROM " + at + " ORDER BY g.p)"
	}
	order := strings.Join(cols, ", ")
	q := fmt.Sprintf(`SELECT a._cdcd_hs, %[1]s FROM (
		SELECT %[2]s FROM (SELECT %[3]s AS _cdcd_h, %[4]s FROM %[5]s WHERE %[6]s ORDER BY %[4]s LIMIT $%[7]d) s) a`,
		strings.Join(ends, ", "), strings.Join(aggs, ", "), pgRowHash(t), order, t.from(), where, n-1)
	var hs []int64
	texts := make([][]string, 2*nk)
	dest := []any{&hs}
	for j := range texts {
		dest = append(dest, &texts[j])
	}
	if err := tx.QueryRow(ctx, q, args...).Scan(dest...); err != nil {
		return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
	}
	blocks, err := chunkBlocks(t, hs, texts, blockRows)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
	}
	total := int64(len(hs))
	if err := tx.Commit(ctx); err != nil {
		return nil, nil, err
	}
	if total < int64(rows) { // the end of the range: open above
		if len(blocks) == 0 {
			blocks = append(blocks, Block{})
		}
		blocks[len(blocks)-1].Last, blocks[len(blocks)-1].LastLit = nil, nil
	}
	return blocks, r, nil
}

// chunkBlocks cuts a chunk's row hashes (in key order) into blocks of
// blockRows rows; texts are the literal texts of each block's last key
// (one array a key column), then its canonical texts. The last keys must
// ascend: a block is the range of keys up to its last, and a mirror row
// is placed by its key, so a chunk out of order would leave keys in no
// range instead of failing loudly.
func chunkBlocks(t *Table, hs []int64, texts [][]string, blockRows int) ([]Block, error) {
	nb := (len(hs) + blockRows - 1) / blockRows
	nk := len(t.Key)
	for _, tx := range texts {
		if len(tx) != nb {
			return nil, fmt.Errorf("%d rows in %d blocks, but %d last keys", len(hs), nb, len(tx))
		}
	}
	blocks := make([]Block, nb)
	for b := range blocks {
		lo, hi := b*blockRows, min((b+1)*blockRows, len(hs))
		var sum uint64
		for _, h := range hs[lo:hi] {
			sum += uint64(h)
		}
		blk := Block{Rows: int64(hi - lo), Sum: sum, LastLit: make(Key, nk), Last: make(Key, nk)}
		for j := range nk {
			blk.LastLit[j], blk.Last[j] = texts[j][b], texts[nk+j][b]
		}
		if b > 0 && t.Ordered && t.compareKeys(blocks[b-1].Last, blk.Last) >= 0 {
			return nil, fmt.Errorf("the chunk's rows came out of key order (%v, then %v)", blocks[b-1].LastLit, blk.LastLit)
		}
		blocks[b] = blk
	}
	return blocks, nil
}

// Sample reads the keys of rows sampled from about pages of t's pages
// (TABLESAMPLE SYSTEM: whole pages chosen at random, every page when the
// table has fewer), in key order, and how many of the table's rows each
// stands for.
func (p *Postgres) Sample(ctx context.Context, t *Table, pages int) ([]Split, float64, error) {
	var size int64
	// pg_partition_tree lists a partitioned table's partitions, nothing
	// for a plain table.
	if err := p.read.QueryRow(ctx, `SELECT (greatest(pg_relation_size($1::regclass),
		(SELECT coalesce(sum(pg_relation_size(relid)), 0) FROM pg_partition_tree($1::regclass))) / current_setting('block_size')::int)::bigint`,
		t.SQL).Scan(&size); err != nil {
		return nil, 0, fmt.Errorf("reconcile: the size of %s: %w", t.Name, err)
	}
	pct := 100.0
	if size > int64(pages) {
		pct = 100 * float64(pages) / float64(size)
	}
	// Ordered by the table's columns: an output column of the same name
	// (a key's literal text) would order by text.
	order := make([]string, len(t.Key))
	for i, ci := range t.Key {
		order[i] = "_cdcd_s." + pgQuote(t.Columns[ci].Name)
	}
	q := fmt.Sprintf("SELECT %s FROM %s AS _cdcd_s TABLESAMPLE SYSTEM ($1) ORDER BY %s", keySelect(t), t.from(), strings.Join(order, ","))
	res, err := p.read.Query(ctx, q, pct)
	if err != nil {
		return nil, 0, fmt.Errorf("reconcile: sample %s: %w", t.Name, err)
	}
	defer res.Close()
	nk := len(t.Key)
	var out []Split
	for res.Next() {
		vals, err := res.Values()
		if err != nil {
			return nil, 0, err
		}
		out = append(out, Split{Lit: textsOf(vals[:nk]), Key: textsOf(vals[nk:])})
	}
	if err := res.Err(); err != nil {
		return nil, 0, fmt.Errorf("reconcile: sample %s: %w", t.Name, err)
	}
	return out, 100 / pct, nil
}

func textsOf(vals []any) Key {
	k := make(Key, len(vals))
	for i, v := range vals {
		s, _ := v.(string)
		k[i] = s
	}
	return k
}

var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

// sumMod64 reads a sum of bigints (numeric text) modulo 2^64.
func sumMod64(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return 0, fmt.Errorf("reconcile: a sum %q", s)
	}
	return n.Mod(n, two64).Uint64(), nil
}

// Range is a key range (Lo, Hi] (nil: open), or the one key Eq, in
// literals; LoC, HiC and EqC are the same keys' canonical texts.
type Range struct{ Lo, Hi, Eq, LoC, HiC, EqC Key }

// KeyRow is one row read key by key: its key and each compared column's
// hash.
type KeyRow struct {
	Key  Key
	Lit  Key
	Cols []uint64
}

// Rows reads every row of the ranges with its columns' hashes, in one
// snapshot.
func (p *Postgres) Rows(ctx context.Context, t *Table, ranges []Range) ([]KeyRow, *Read, error) {
	tx, r, err := begin(ctx, p.read, t.SQL)
	if err != nil {
		return nil, nil, err
	}
	defer tx.Rollback(ctx)
	hashes := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		hashes[i] = "hashtextextended(coalesce(" + c.SQL + ",'" + nullText + "') COLLATE \"C\", 0)"
	}
	nk := len(t.Key)
	var out []KeyRow
	for _, q := range rangeQueries(t, ranges, pgKeyConds) {
		where, args := q.where, q.args
		q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s ORDER BY %s", keySelect(t), strings.Join(hashes, ", "), t.from(), where, keyOrder(t))
		res, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
		}
		for res.Next() {
			vals, err := res.Values()
			if err != nil {
				res.Close()
				return nil, nil, err
			}
			kr := KeyRow{Lit: textsOf(vals[:nk]), Key: textsOf(vals[nk : 2*nk]), Cols: make([]uint64, len(t.Columns))}
			for i, v := range vals[2*nk:] {
				kr.Cols[i] = uint64(v.(int64))
			}
			out = append(out, kr)
		}
		if err := res.Err(); err != nil {
			return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
		}
	}
	return out, r, tx.Commit(ctx)
}

// Values reads the source's text of columns cols of the rows with keys
// lits (literals), as the server prints them (for the report): by key id.
func (p *Postgres) Values(ctx context.Context, t *Table, lits []Key, cols []string) (map[string][]string, error) {
	if len(lits) == 0 || len(cols) == 0 {
		return nil, nil
	}
	var conds []string
	var args []any
	for _, k := range lits {
		c, a := keyPredicateEq(t, k, args)
		conds, args = append(conds, c), a
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = "CASE WHEN " + pgQuote(c) + " IS NULL THEN 'NULL' ELSE concat(" + pgQuote(c) + ") END"
	}
	var canon []string
	for _, ci := range t.Key {
		canon = append(canon, t.Columns[ci].SQL)
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s", strings.Join(canon, ", "), strings.Join(sel, ", "), t.from(), strings.Join(conds, " OR "))
	res, err := p.read.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	out := map[string][]string{}
	nk := len(t.Key)
	for res.Next() {
		vals, err := res.Values()
		if err != nil {
			return nil, err
		}
		out[textsOf(vals[:nk]).id()] = textsOf(vals[nk:])
	}
	return out, res.Err()
}

type rangeQuery struct {
	where string
	args  []any
}

// keyConds are a dialect's key conditions: a range (lo, hi] and one key,
// each appending its arguments to args.
type keyConds struct {
	rng func(t *Table, lo, hi Key, args []any) (string, []any)
	eq  func(t *Table, k Key, args []any) (string, []any)
}

var pgKeyConds = keyConds{rng: keyPredicate, eq: keyPredicateEq}

// rangeQueries turns ranges into conditions: one per key range, and the
// single keys in conditions of up to 500 keys.
func rangeQueries(t *Table, ranges []Range, kc keyConds) []rangeQuery {
	var out []rangeQuery
	var eq []string
	var eqArgs []any
	flush := func() {
		if len(eq) > 0 {
			out = append(out, rangeQuery{strings.Join(eq, " OR "), eqArgs})
			eq, eqArgs = nil, nil
		}
	}
	for _, rg := range ranges {
		if rg.Eq == nil {
			w, a := kc.rng(t, rg.Lo, rg.Hi, nil)
			out = append(out, rangeQuery{w, a})
			continue
		}
		var c string
		c, eqArgs = kc.eq(t, rg.Eq, eqArgs)
		if eq = append(eq, c); len(eq) == 500 {
			flush()
		}
	}
	flush()
	return out
}

func keyPredicateEq(t *Table, k Key, args []any) (string, []any) {
	var conds []string
	for i, ci := range t.Key {
		args = append(args, k[i])
		conds = append(conds, pgQuote(t.Columns[ci].Name)+" = $"+strconv.Itoa(len(args))+"::"+t.Columns[ci].Type)
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

// SlotState is how far the pipeline's slot has confirmed.
type SlotState struct {
	Confirmed []byte // a position prefix: every change before it is in the log
	Active    bool   // a daemon streams from it
}

// Slot reads the pipeline's slot.
func (p *Postgres) Slot(ctx context.Context) (SlotState, error) {
	var lsn *string
	var st SlotState
	err := p.primary.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active FROM pg_replication_slots WHERE slot_name = $1", p.cfg.Slot).Scan(&lsn, &st.Active)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("reconcile: the replication slot %s does not exist: the pipeline's position cannot be known", p.cfg.Slot)
	}
	if err != nil {
		return st, err
	}
	if lsn != nil {
		l, err := pglogrepl.ParseLSN(*lsn)
		if err != nil {
			return st, err
		}
		st.Confirmed = lsnPos(l)
	}
	return st, nil
}

// Committed returns the transactions of xids that have committed.
func (p *Postgres) Committed(ctx context.Context, xids []uint64) (map[uint64]bool, error) {
	out := map[uint64]bool{}
	if len(xids) == 0 {
		return out, nil
	}
	strs := make([]string, len(xids))
	for i, x := range xids {
		strs[i] = strconv.FormatUint(x, 10)
	}
	rows, err := p.read.Query(ctx, "SELECT x::text, pg_xact_status(x::xid8) FROM unnest($1::text[]) x", strs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var x string
		var st *string
		if err := rows.Scan(&x, &st); err != nil {
			return nil, err
		}
		if st != nil && *st == "committed" {
			v, _ := strconv.ParseUint(x, 10, 64)
			out[v] = true
		}
	}
	return out, rows.Err()
}

// KeyCondition is `(k1, k2) IN ((v1, v2), ...)` with each value a typed
// literal (escape string constants, read alike whatever
// standard_conforming_strings is).
func (p *Postgres) KeyCondition(t *Table, lits []Key) string {
	cols := make([]string, len(t.Key))
	for i, ci := range t.Key {
		cols[i] = pgQuote(t.Columns[ci].Name)
	}
	var b strings.Builder
	b.WriteString("(" + strings.Join(cols, ", ") + ") IN (")
	for j, k := range lits {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(")
		for i, ci := range t.Key {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(pgLiteral(k[i]) + "::" + t.Columns[ci].Type)
		}
		b.WriteString(")")
	}
	b.WriteString(")")
	return b.String()
}

// pgLiteral quotes s as an escape string constant.
func pgLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}
