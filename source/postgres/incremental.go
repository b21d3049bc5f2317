package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Incremental snapshots (package source/snapshot) on PostgreSQL.
//
// Watermarks are logical decoding messages, transactional
// (pg_logical_emit_message(true, 'cdcd.watermark', '<slot> <id>')): each is
// a transaction of its own whose commit is flushed at once, so the stream
// delivers it without waiting for the WAL writer (a non-transactional
// message in PostgreSQL 15 waits for the next flush, up to
// wal_writer_delay), and its position is its commit's, which orders it
// with every other transaction. Messages of other slots are ignored.
//
// A chunk is read in one REPEATABLE READ transaction, begun in the query
// that writes its low watermark (incremental_chunktx.go): the table's
// shape (described again when its catalog rows changed, so a chunk read
// after DDL has the new columns), the snapshot's in-progress transactions
// (pg_current_snapshot), then a COPY (binary) of
// up to ChunkRows rows after the last key, in the key's order, with the
// key's text appended (not for integer and uuid keys, whose text cdcd
// writes as the server does). The snapshot's in-progress list is what the
// chunk's consistency check compares with the transactions the stream
// delivered before the low watermark (see xidRing).

const watermarkPrefix = "cdcd.watermark"

// pgDatabase is the engine's view of the source database (snapshot.Database).
type pgDatabase struct {
	r     *Reader
	conn  *pgx.Conn
	types *typeResolver
	ring  *xidRing // the stream's
	// descs are the tables' descriptions for chunks on conn, by name,
	// reused while their catalog version holds (incremental_chunktx.go).
	descs map[string]*chunkDesc
	// versionReady: versionStmt is prepared on conn.
	versionReady bool
	// conn2 reads the second half of a range chunk; nil until needed.
	conn2 *pgx.Conn
	// orders compare keys in the database for tables whose key order Go
	// does not know; closed with the session.
	orders []*dbOrder
	// reuse: range chunks decode into reusable slabs lent with their
	// slices (the stream's Emitter keeps no value after Submit: not a
	// source.Holder, as for the initial load's batches).
	reuse bool
}

// close releases what the database's tables hold.
func (d *pgDatabase) close() {
	d.dropSecond(context.Background())
	for _, o := range d.orders {
		o.close()
	}
}

var _ snapshot.Database = (*pgDatabase)(nil)

// describeByName looks a configured table up.
func describeByName(ctx context.Context, q querier, name string) (*catalogTable, error) {
	s, t := splitTable(name)
	ct, err := describeNamed(ctx, q, s, t)
	if errors.Is(err, errNoTable) {
		return nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	return ct, err
}

// Describe implements snapshot.Database.
func (d *pgDatabase) Describe(ctx context.Context, name string) (*snapshot.Table, error) {
	ct, err := describeByName(ctx, d.conn, name)
	if err != nil {
		return nil, err
	}
	rel, err := catalogRelation(ctx, d.types, ct)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	coll, err := keyCollations(ctx, d.conn, ct, rel.table)
	if err != nil {
		return nil, err
	}
	t := keyFuncs(rel.table, coll.byBytes)
	if t.KeyText != nil && t.Compare == nil {
		// Only the database knows the order (a collation, numeric):
		// ask it, on a connection of the comparison's own.
		o := newDBOrder(d.r.cfg.DSN, ct, rel.table, coll.collate)
		d.orders = append(d.orders, o)
		t.Compare = o.compare
	}
	return t, nil
}

// Plan implements snapshot.Database: the greatest key (read backwards
// through the key's index) and the table's estimated rows, in one
// REPEATABLE READ transaction whose in-progress xids the plan's
// consistency check compares with the stream's commits.
func (d *pgDatabase) Plan(ctx context.Context, name string, _ *snapshot.Table, where string) (*snapshot.Plan, error) {
	tx, snap, ct, err := d.readTx(ctx, name)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	keys, desc := keyColumns(ct), make([]string, len(ct.key))
	sel := make([]string, len(ct.key))
	for i, k := range keys {
		sel[i], desc[i] = k+"::text", k+" DESC"
	}
	sql := "SELECT " + strings.Join(sel, ", ") + " FROM " + ct.from() + " AS " + tableAlias
	if where != "" {
		sql += " WHERE (" + where + ")"
	}
	sql += " ORDER BY " + strings.Join(desc, ", ") + " LIMIT 1"
	upper := make(snapshot.Key, len(keys))
	ptrs := make([]any, len(keys))
	for i := range upper {
		ptrs[i] = &upper[i]
	}
	switch err := tx.QueryRow(ctx, sql).Scan(ptrs...); {
	case errors.Is(err, pgx.ErrNoRows):
		upper = nil
	case err != nil:
		return nil, queryError(name, where, err)
	}
	var est float64
	if err := tx.QueryRow(ctx, `SELECT COALESCE(sum(GREATEST(reltuples, 0)), 0) FROM pg_class WHERE oid = $1::oid
		OR oid IN (SELECT relid FROM pg_partition_tree($1::oid) WHERE isleaf)`, ct.oid).Scan(&est); err != nil {
		return nil, fmt.Errorf("postgres: estimate rows of %s: %w", name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("postgres: end plan transaction: %w", err)
	}
	return &snapshot.Plan{Upper: upper, Estimate: int64(est), Consistent: d.consistent(snap, nil)}, nil
}

// readTx begins the REPEATABLE READ transaction of a plan or a chunk and
// reads its snapshot's in-progress xids (its first statement takes the
// snapshot) and the table as the snapshot describes it. The caller rolls
// it back (or commits).
func (d *pgDatabase) readTx(ctx context.Context, name string) (pgx.Tx, pgSnapshot, *catalogTable, error) {
	tx, err := d.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, pgSnapshot{}, nil, fmt.Errorf("postgres: snapshot transaction of %s: %w", name, err)
	}
	// The table is locked before the snapshot is taken (its first query):
	// a table-rewriting DDL (ALTER TABLE ... TYPE, VACUUM FULL, CLUSTER)
	// that committed after the snapshot would leave it empty to the
	// chunk's read (a rewrite is not MVCC-safe), and the chunk's rows would
	// be missing from the mirror without a word; with the lock it waits
	// for the chunk, or the chunk for it.
	sch, tbl := splitTable(name)
	if _, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{sch, tbl}.Sanitize()+" IN ACCESS SHARE MODE"); err != nil {
		err = queryError(name, "", err)
	}
	var snap string
	if err == nil {
		if err = tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&snap); err != nil {
			err = fmt.Errorf("postgres: read the snapshot: %w", err)
		}
	}
	var ps pgSnapshot
	if err == nil {
		ps, err = parseSnapshot(snap)
	}
	var ct *catalogTable
	if err == nil {
		ct, err = describeByName(ctx, tx, name)
	}
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return nil, pgSnapshot{}, nil, err
	}
	return tx, ps, ct, nil
}

// consistent checks a read of snapshot snap: false when a transaction it
// did not see committed before low having changed rows of one of
// relations (every relation when nil: a plan's check, once a table; see
// xidRing).
func (d *pgDatabase) consistent(snap pgSnapshot, relations []uint32) func(source.Position) bool {
	ring := d.ring
	return func(low source.Position) bool {
		lowLSN, _, err := pgpos.Parse(low)
		return err == nil && !ring.committedBefore(snap, lowLSN, relations)
	}
}

// queryError says which table and condition a failed query had; a
// condition the server refuses ends the run.
func queryError(table, where string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "42601" || pe.Code == "42703" || pe.Code == "42883" || pe.Code[:2] == "22") {
		if where != "" {
			return fmt.Errorf("%w: the condition %q on %s: %w", snapshot.ErrTableGone, where, table, err)
		}
		return fmt.Errorf("%w: %s: %w", snapshot.ErrTableGone, table, err)
	}
	if errors.As(err, &pe) && pe.Code == "42P01" {
		return fmt.Errorf("%w: %s: %w", snapshot.ErrTableGone, table, err)
	}
	return fmt.Errorf("postgres: snapshot of %s: %w", table, err)
}

// keyColumns returns the key columns qualified by tableAlias.
func keyColumns(ct *catalogTable) []string {
	out := make([]string, len(ct.key))
	for i, k := range ct.key {
		out[i] = tableAlias + "." + pgx.Identifier{k}.Sanitize()
	}
	return out
}

// ReadChunk implements snapshot.Database: readChunk without a low
// watermark.
func (d *pgDatabase) ReadChunk(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery) (*snapshot.Chunk, error) {
	return d.readChunk(ctx, "", name, q)
}

// readChunk writes a chunk's low watermark carrying id (none when id is
// empty) and reads the chunk (chunkTx). With SplitRows set, a range
// chunk of at least SplitRows rows is read in two halves at once, the
// second on a connection of its own in the same snapshot (exported by the
// first). A chunk read whole commits in its COPY's query.
func (d *pgDatabase) readChunk(ctx context.Context, id, name string, q snapshot.ChunkQuery) (*snapshot.Chunk, error) {
	snap, rels, ct, rel, err := d.chunkTx(ctx, id, name)
	if err != nil {
		return nil, err
	}
	var res *snapshot.Chunk
	if mid, exported, ok, err := d.splitPoint(ctx, d.conn, ct, rel, q); err != nil {
		d.rollback(ctx)
		return nil, err
	} else if ok {
		res, err = d.readHalves(ctx, d.conn, name, ct, rel, q, mid, exported)
		if err == nil {
			_, err = d.conn.Exec(ctx, "COMMIT")
		}
		if err != nil {
			d.rollback(ctx)
			return nil, err
		}
	} else {
		sql, err := chunkSQL(ct, rel, q, nil, false)
		if err != nil {
			d.rollback(ctx)
			return nil, err
		}
		// Room for the most rows the chunk may hold (a range chunk's Limit
		// is its cap, twice a chunk): the sampled ends make chunks of 0.4
		// to 1.6 times ChunkRows, and half the chunks outgrew slices sized
		// for one, growing their rows (1.7 MB copied) and values in steps
		// a chunk; the free list then kept slices of every size.
		want := max(q.Limit, len(q.Keys))
		// The COMMIT rides in the COPY's query (it runs only when the COPY
		// succeeded): one round trip fewer.
		if res, err = copyRows(ctx, d.conn, name, rel, len(ct.key), sql+"; COMMIT", want, d.r.chunkBufs, d.reuse); err != nil {
			d.rollback(ctx)
			return nil, queryError(name, q.Where, err)
		}
	}
	res.Consistent = d.consistent(snap, rels)
	return res, nil
}

// defaultSplitRows is IncrementalConfig.SplitRows's default: never. The
// halves were for one chunk read at a time; with several range chunks read
// at once (snapshot.Parallel) they only added work: the OFFSET read of
// half a chunk's keys, an exported snapshot and its import, about 0.5
// PostgreSQL CPU-µs a row of the benchmark table (BENCHMARKS.md).
const defaultSplitRows = -1

// splitPoint finds the key that begins the second half of a range chunk
// (the row after its first half) and exports the chunk's snapshot; ok is
// false when the chunk is read whole (a point chunk, a small one, fewer
// rows than half a chunk left).
func (d *pgDatabase) splitPoint(ctx context.Context, tx querier, ct *catalogTable, rel *relation, q snapshot.ChunkQuery) (mid snapshot.Key, snap string, ok bool, err error) {
	split := cmp.Or(d.r.cfg.Incremental.SplitRows, defaultSplitRows)
	if q.Keys != nil || split < 0 || q.Limit < max(split, 2) {
		return nil, "", false, nil
	}
	sql, err := keyAtSQL(ct, rel, q, q.Limit/2)
	if err != nil {
		return nil, "", false, err
	}
	mid = make(snapshot.Key, len(ct.key))
	ptrs := make([]any, len(mid))
	for i := range mid {
		ptrs[i] = &mid[i]
	}
	switch err := tx.QueryRow(ctx, sql).Scan(ptrs...); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, "", false, nil
	case err != nil:
		return nil, "", false, queryError(ct.qualified(), q.Where, err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snap); err != nil {
		return nil, "", false, fmt.Errorf("postgres: export a chunk's snapshot: %w", err)
	}
	return mid, snap, true, nil
}

// readHalves reads a range chunk's rows before mid on conn (in the
// chunk's transaction) and the rest on the second connection in snapshot
// snap, at the same time.
func (d *pgDatabase) readHalves(ctx context.Context, conn1 *pgx.Conn, name string, ct *catalogTable, rel *relation, q snapshot.ChunkQuery,
	mid snapshot.Key, snap string) (*snapshot.Chunk, error) {
	first, err := chunkSQL(ct, rel, snapshot.ChunkQuery{Where: q.Where, After: q.After, Upper: q.Upper, To: q.To, Limit: q.Limit / 2}, mid, false)
	if err != nil {
		return nil, err
	}
	second, err := chunkSQL(ct, rel, snapshot.ChunkQuery{Where: q.Where, Upper: q.Upper, To: q.To, Limit: q.Limit - q.Limit/2}, mid, true)
	if err != nil {
		return nil, err
	}
	conn, err := d.second(ctx)
	if err != nil {
		return nil, err
	}
	var b *snapshot.Chunk
	errB := make(chan error, 1)
	go func() {
		var err error
		b, err = readInSnapshot(ctx, conn, snap, name, rel, len(ct.key), second, q.Limit-q.Limit/2)
		errB <- err
	}()
	a, errA := copyRows(ctx, conn1, name, rel, len(ct.key), first, q.Limit/2, nil, false)
	if err := errors.Join(errA, <-errB); err != nil {
		d.dropSecond(ctx)
		return nil, queryError(name, q.Where, err)
	}
	a.Rows = append(a.Rows, b.Rows...)
	if b.Last != nil {
		a.Last = b.Last
	}
	return a, nil
}

// second returns the connection that reads second halves, opened once.
func (d *pgDatabase) second(ctx context.Context) (*pgx.Conn, error) {
	if d.conn2 != nil {
		return d.conn2, nil
	}
	conn, err := pgx.Connect(ctx, d.r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: snapshot connection: %w", err)
	}
	d.conn2 = conn
	return conn, nil
}

// dropSecond closes the second connection after a failed read (its state
// is unknown); the next read opens another.
func (d *pgDatabase) dropSecond(ctx context.Context) {
	if d.conn2 != nil {
		d.conn2.Close(context.WithoutCancel(ctx))
		d.conn2 = nil
	}
}

// readInSnapshot copies sql's rows on conn in a read-only transaction of
// the exported snapshot snap.
func readInSnapshot(ctx context.Context, conn *pgx.Conn, snap, name string, rel *relation, nk int, sql string, want int) (*snapshot.Chunk, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snap+"'"); err != nil {
		return nil, fmt.Errorf("import the chunk's snapshot %s: %w", snap, err)
	}
	res, err := copyRows(ctx, conn, name, rel, nk, sql, want, nil, false)
	if err != nil {
		return nil, err
	}
	return res, tx.Commit(ctx)
}

// copyRows runs a chunk's COPY (sql, from chunkSQL) on conn and decodes
// its rows, about want of them; the rows and their values are cut from
// one allocation each, taken from bufs and lent to the chunk (a nil bufs
// makes new ones; snapshot.Bufs), and with reuse so is the slab the
// numbers and texts are boxed from (else a slab of the chunk's own). The
// stream gives them back once its Emitter has the rows; whatever it keeps
// of them longer it copies (snapshot.OwnValues). nk is the key's columns; their text follows the
// row's columns unless the key is native (then the last key's text is
// written from its values).
func copyRows(ctx context.Context, conn *pgx.Conn, name string, rel *relation, nk int, sql string, want int, bufs *snapshot.Bufs, reuse bool) (*snapshot.Chunk, error) {
	n := len(rel.types)
	now := time.Now()
	rows, lent, extra := bufs.GetWith(want, n)
	res := &snapshot.Chunk{Rows: rows}
	values := lent
	scalar, _ := extra.(*pgdecode.Slab)
	switch {
	case !reuse || bufs == nil:
		scalar = &pgdecode.Slab{}
	case scalar != nil:
		scalar.Reset()
	default:
		scalar = pgdecode.NewReusableSlab()
	}
	native := nativeKey(rel)
	if native {
		nk = 0
	}
	lastKey := make([][]byte, nk) // the last row's key text, copied (fields are the parser's)
	p := &pgdecode.CopyParser{Row: func(fields [][]byte) error {
		if len(fields) != n+nk {
			return fmt.Errorf("postgres: chunk of %s returned %d columns, want %d", name, len(fields), n+nk)
		}
		if len(values) < n {
			values = make([]any, max(want/4, 1)*n) // more rows than asked: keys read again may repeat
		}
		row := values[:n:n]
		values = values[n:]
		if err := decodeFieldsInto(rel, fields[:n], row, scalar); err != nil {
			return err
		}
		res.Rows = append(res.Rows, source.Change{Table: rel.table, Op: source.OpRead, After: row, Snapshot: true, CommitTime: now})
		for i, f := range fields[n:] {
			lastKey[i] = append(lastKey[i][:0], f...)
		}
		return nil
	}}
	if _, err := conn.PgConn().CopyTo(ctx, p, sql); err != nil {
		return nil, err
	}
	if err := p.Finish(); err != nil {
		return nil, err
	}
	if !reuse {
		scalar = nil
	}
	bufs.LendWith(res.Rows, lent, scalar)
	switch {
	case len(res.Rows) == 0:
	case native:
		last, ok := keyText(keyKinds(rel.table), res.Rows[len(res.Rows)-1].Key())
		if !ok {
			return nil, fmt.Errorf("postgres: chunk of %s: the last row's key %v has no text", name, res.Rows[len(res.Rows)-1].Key())
		}
		res.Last = last
	default:
		res.Last = make(snapshot.Key, nk)
		for i, b := range lastKey {
			res.Last[i] = string(b)
		}
	}
	return res, nil
}

// nativeKey reports whether a table's key is integers and uuids read in
// binary: their text (the chunk's Last, compared with the ends the server
// wrote as text) is then written from the decoded values, as the server
// writes it, and the chunk's COPY does not send each row's key text.
func nativeKey(rel *relation) bool {
	for _, ci := range rel.table.Key {
		switch rel.table.Columns[ci].Kind {
		case schema.Int16, schema.Int32, schema.Int64, schema.UUID:
			if rel.types[ci].Text {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// keyKinds returns the kinds of a table's key columns.
func keyKinds(t *schema.Table) []schema.Kind {
	kinds := make([]schema.Kind, len(t.Key))
	for i, ci := range t.Key {
		kinds[i] = t.Columns[ci].Kind
	}
	return kinds
}

// chunkSQL writes a chunk's COPY: the columns (those without a binary form
// as text), the key's text (unless nativeKey), the key range or the keys, the key's order. A
// bound, when set, cuts a range: the keys before it, or from it on (from).
func chunkSQL(ct *catalogTable, rel *relation, q snapshot.ChunkQuery, bound snapshot.Key, from bool) (string, error) {
	cols := make([]string, 0, len(ct.columns)+len(ct.key))
	for ci, c := range ct.columns {
		id := tableAlias + "." + pgx.Identifier{c.name}.Sanitize()
		if rel.types[ci].Text {
			id += "::text"
		}
		cols = append(cols, id)
	}
	keys := keyColumns(ct)
	if !nativeKey(rel) {
		for _, k := range keys {
			cols = append(cols, "("+k+")::text")
		}
	}
	where, err := chunkWhere(ct, q)
	if err != nil {
		return "", err
	}
	if bound != nil {
		op := " < "
		if from {
			op = " >= "
		}
		l, err := keyLiteral(ct, bound)
		if err != nil {
			return "", err
		}
		where = append(where, "("+strings.Join(keys, ", ")+")"+op+l)
	}
	sql := "SELECT " + strings.Join(cols, ", ") + " FROM " + ct.from() + " AS " + tableAlias +
		" WHERE " + strings.Join(where, " AND ") + " ORDER BY " + strings.Join(keys, ", ")
	if q.Keys == nil {
		sql += " LIMIT " + strconv.Itoa(q.Limit)
	}
	return "COPY (" + sql + ") TO STDOUT (FORMAT binary)", nil
}

// keyAtSQL selects the text of the key at offset (from 0) in a range
// chunk's order.
func keyAtSQL(ct *catalogTable, rel *relation, q snapshot.ChunkQuery, offset int) (string, error) {
	keys := keyColumns(ct)
	sel := make([]string, len(keys))
	for i, k := range keys {
		sel[i] = "(" + k + ")::text"
	}
	where, err := chunkWhere(ct, q)
	if err != nil {
		return "", err
	}
	return "SELECT " + strings.Join(sel, ", ") + " FROM " + ct.from() + " AS " + tableAlias +
		" WHERE " + strings.Join(where, " AND ") + " ORDER BY " + strings.Join(keys, ", ") +
		" OFFSET " + strconv.Itoa(offset) + " LIMIT 1", nil
}

// chunkWhere is a chunk's condition: its keys, or its key range and the
// request's condition.
func chunkWhere(ct *catalogTable, q snapshot.ChunkQuery) ([]string, error) {
	keyRow := "(" + strings.Join(keyColumns(ct), ", ") + ")"
	if q.Keys != nil {
		lits := make([]string, len(q.Keys))
		for i, k := range q.Keys {
			l, err := keyLiteral(ct, k)
			if err != nil {
				return nil, err
			}
			lits[i] = l
		}
		return []string{keyRow + " IN (" + strings.Join(lits, ", ") + ")"}, nil
	}
	var where []string
	if q.After != nil {
		l, err := keyLiteral(ct, q.After)
		if err != nil {
			return nil, err
		}
		where = append(where, keyRow+" > "+l)
	}
	end := q.Upper
	if q.To != nil {
		end = q.To
	}
	l, err := keyLiteral(ct, end)
	if err != nil {
		return nil, err
	}
	where = append(where, keyRow+" <= "+l)
	if q.Where != "" {
		where = append(where, "("+q.Where+")")
	}
	return where, nil
}

// keyLiteral writes a key as a row of typed literals.
func keyLiteral(ct *catalogTable, k snapshot.Key) (string, error) {
	if len(k) != len(ct.key) {
		return "", fmt.Errorf("postgres: a key of %s has %d values, want %d", ct.qualified(), len(k), len(ct.key))
	}
	parts := make([]string, len(k))
	for i, v := range k {
		parts[i] = quoteLiteral(v) + "::" + ct.column(ct.key[i]).typeName
	}
	return "(" + strings.Join(parts, ", ") + ")", nil
}

// pgSnapshot is what a chunk's check needs of a snapshot: its xmax and
// in-progress xids, as 32-bit xids (the stream's).
type pgSnapshot struct {
	xmax uint32
	xip  map[uint32]bool
}

// parseSnapshot reads a pg_current_snapshot() text, "xmin:xmax:xip,...".
func parseSnapshot(s string) (pgSnapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return pgSnapshot{}, fmt.Errorf("postgres: snapshot %q is not xmin:xmax:xip", s)
	}
	xmax, err := strconv.ParseUint(parts[1], 10, 64)
	if err != nil {
		return pgSnapshot{}, fmt.Errorf("postgres: snapshot %q: %w", s, err)
	}
	snap := pgSnapshot{xmax: uint32(xmax), xip: map[uint32]bool{}}
	if parts[2] == "" {
		return snap, nil
	}
	for _, x := range strings.Split(parts[2], ",") {
		v, err := strconv.ParseUint(x, 10, 64)
		if err != nil {
			return pgSnapshot{}, fmt.Errorf("postgres: snapshot %q: %w", s, err)
		}
		snap.xip[uint32(v)] = true
	}
	return snap, nil
}

// WriteWatermark implements snapshot.Database.
func (d *pgDatabase) WriteWatermark(ctx context.Context, id string) error {
	_, err := d.conn.Exec(ctx, "SELECT pg_logical_emit_message(true, $1::text, $2::text)", watermarkPrefix, d.r.cfg.Slot+" "+id)
	if err != nil {
		return fmt.Errorf("postgres: write watermark: %w", err)
	}
	return nil
}

// keyFuncs builds the key order, text and parser of a table's key for the
// engine: for integer, uuid, bytea, bool, date and time keys, and text keys
// whose collation orders by bytes (ordered).
func keyFuncs(t *schema.Table, ordered bool) *snapshot.Table {
	out := &snapshot.Table{Shape: t}
	kinds := keyKinds(t)
	textOK, orderOK := true, ordered
	for i, k := range kinds {
		switch k {
		case schema.Int16, schema.Int32, schema.Int64, schema.UUID, schema.Bytes, schema.Bool:
		case schema.String:
			if st := t.Columns[t.Key[i]].SourceType; strings.HasPrefix(st, "character") || strings.HasPrefix(st, "bpchar") {
				orderOK = false // blank-padded: compared without trailing spaces
			}
		case schema.Decimal:
			orderOK = false
		default:
			textOK, orderOK = false, false
		}
	}
	if textOK {
		out.KeyText = func(vals []any) (snapshot.Key, bool) { return keyText(kinds, vals) }
		out.ParseKey = func(k snapshot.Key) ([]any, bool) { return parseKey(kinds, k) }
	}
	if orderOK && textOK {
		out.Compare = func(a, b []any) (int, error) { return compareKeys(kinds, a, b), nil }
	}
	return out
}

// keyOrder is how a table's key columns collate.
type keyOrder struct {
	byBytes bool     // every text key column orders by bytes (C, POSIX, ...): Go's order is the database's
	collate []string // per key column: " COLLATE schema.name" for text columns, "" for others
}

// keyCollations reads the collations of a table's text key columns.
func keyCollations(ctx context.Context, q querier, ct *catalogTable, t *schema.Table) (keyOrder, error) {
	o := keyOrder{byBytes: true, collate: make([]string, len(t.Key))}
	for i, ci := range t.Key {
		if t.Columns[ci].Kind != schema.String {
			continue
		}
		var name, qualified string
		err := q.QueryRow(ctx, `SELECT CASE WHEN c.collname = 'default' THEN d.datcollate ELSE c.collname END,
			quote_ident(n.nspname) || '.' || quote_ident(c.collname)
			FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation JOIN pg_namespace n ON n.oid = c.collnamespace
			JOIN pg_database d ON d.datname = current_database()
			WHERE a.attrelid = $1 AND a.attname = $2`, ct.oid, ct.key[i]).Scan(&name, &qualified)
		if errors.Is(err, pgx.ErrNoRows) {
			o.byBytes = false
			continue
		}
		if err != nil {
			return o, fmt.Errorf("postgres: collation of %s.%s: %w", ct.qualified(), ct.key[i], err)
		}
		o.collate[i] = " COLLATE " + qualified
		if name != "C" && name != "POSIX" && name != "C.UTF-8" && name != "C.utf8" && name != "ucs_basic" {
			o.byBytes = false
		}
	}
	return o, nil
}
