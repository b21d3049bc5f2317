package mysql

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Incremental snapshots (package source/snapshot) on MySQL and MariaDB:
// the lock-free initial load, tables added later, `cdcd snapshot`.
//
// Watermarks are rows of a watermark table the user grants (Watermarks):
// each is its own autocommit transaction, so its place in the binlog
// orders it with every other transaction, and the stream recognises it by
// the table and the pipeline's id (incStream.row).
//
// A chunk is one SELECT (autocommit: one consistent read view) of the rows
// after the last key read and at most the run's upper bound, in key order,
// with a LIMIT; the bounds are compared by the server (row comparisons
// spelled out so the primary key's index serves them), so collations are
// its own. A chunk needs no consistency check of its rows
// (snapshot.Chunk.Consistent): both flavors make transactions visible in
// their binlog order (MariaDB always; MySQL with binlog_order_commits=ON,
// its default, checked when the engine starts), so once the low
// watermark's INSERT has returned, every transaction before it in the
// binlog is visible to the read. Its Consistent checks the table's
// description instead: a table is described once, not for every chunk,
// and a chunk read with a description from before a DDL statement the
// stream met before its high watermark is read again (described).

// myDatabase is the engine's view of the source database (snapshot.Database).
type myDatabase struct {
	db     *sql.DB
	flavor string
	wm     *Watermarks
	wmErr  error    // why there is no wm
	ro     *roState // read-only: watermarks at GTID positions (readonly.go)
	// dropped names the columns dropped at the source that a shape lacks
	// (Reader.dropped); nil: none.
	dropped func(qn string, has func(string) bool) []string
	// ci, when set, is how chunk reads connect with go-mysql's client
	// (chunkconn.go); nil: they read through the pool (database/sql).
	ci *connInfo
	// own is the engine goroutine's chunk connection (ReadChunk; the
	// Parallel readers have their own).
	own *chunkConn
	// bufs recycles the go-mysql reads' chunk slices (Reader.chunkBufs;
	// nil: new ones each chunk).
	bufs *snapshot.Bufs
	// ddl counts the DDL statements on captured tables the stream has
	// handled (Reader.ddl);
	// nil: every chunk describes its table again. descs caches a
	// description per table with the count it was read at (described).
	ddl    *atomic.Uint64
	descMu sync.Mutex
	descs  map[string]cachedDesc
}

// cachedDesc is a table's description and the DDL count before it was read.
type cachedDesc struct {
	desc *tableDesc
	gen  uint64
}

// querier runs a query on a pool or one connection.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

var _ snapshot.Database = (*myDatabase)(nil)

// keyBases are the column types a chunked key may have: their order in the
// server and their form as a query argument are known. ENUM and SET keys
// sort by their index and bit mask, and compare with an integer by them
// too (with a label they would compare as text), BIT by its value; so
// their bounds go to the server as integers (keyArg). FLOAT and DOUBLE go
// as doubles: a FLOAT's bound is its exact value widened (selectExpr).
var keyBases = map[string]bool{
	"tinyint": true, "smallint": true, "mediumint": true, "int": true, "bigint": true, "year": true, "decimal": true,
	"char": true, "varchar": true, "text": true, "binary": true, "varbinary": true, "blob": true,
	"date": true, "datetime": true, "timestamp": true, "time": true,
	"enum": true, "set": true, "bit": true, "float": true, "double": true,
}

// describe reads a table's description; a table that is gone, or whose
// key cannot be chunked, ends the run.
func (d *myDatabase) describe(ctx context.Context, name string) (*tableDesc, error) {
	dbName, tbl, err := splitTable(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	desc, err := describeTable(ctx, d.db, d.flavor, dbName, tbl)
	var te *TableError
	if errors.As(err, &te) {
		return nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	if err != nil {
		return nil, err
	}
	if d.dropped != nil {
		desc.table.Dropped = d.dropped(name, func(c string) bool { return desc.table.ColumnIndex(c) >= 0 })
	}
	for _, k := range desc.table.Key {
		if c := &desc.cols[k]; !keyBases[c.Base] {
			return nil, fmt.Errorf("%w: %s: the primary-key column %s is %s, which cdcd cannot read in key ranges; "+
				"capture the table with snapshot: never, or give it a key of integers, text, binary or dates",
				snapshot.ErrTableGone, name, c.Name, c.SourceType)
		}
	}
	return desc, nil
}

// Describe implements snapshot.Database. Key order, text and parsing are
// left to the server (nil): they serve only changes with unchanged values,
// which full row images never carry.
func (d *myDatabase) Describe(ctx context.Context, name string) (*snapshot.Table, error) {
	desc, _, _, err := d.described(ctx, name, true)
	if err != nil {
		return nil, err
	}
	return &snapshot.Table{Shape: desc.table}, nil
}

// Plan implements snapshot.Database: the greatest key (read backwards
// through the primary key) and the server's estimate of the rows.
func (d *myDatabase) Plan(ctx context.Context, name string, _ *snapshot.Table, where string) (*snapshot.Plan, error) {
	desc, _, _, err := d.described(ctx, name, true)
	if err != nil {
		return nil, err
	}
	keys := keyExprs(desc)
	sel := make([]string, len(keys))
	order := make([]string, len(keys))
	for i, k := range desc.table.Key {
		sel[i] = selectExpr(&desc.cols[k], keys[i])
		order[i] = keys[i] + " DESC"
	}
	q := "SELECT " + strings.Join(sel, ", ") + " FROM " + desc.ident()
	if where != "" {
		q += " WHERE (" + where + ")"
	}
	q += " ORDER BY " + strings.Join(order, ", ") + " LIMIT 1"
	p := &snapshot.Plan{}
	read := func(db querier) error { return readKey(ctx, db, desc, q, nil, name, where, p) }
	if d.ro != nil {
		set, err := d.consistentRead(ctx, read)
		if err != nil {
			return nil, err
		}
		d.roPlan(set, p)
	} else if err := read(d.db); err != nil {
		return nil, err
	}
	if err := d.db.QueryRowContext(ctx, "SELECT IFNULL(TABLE_ROWS, 0) FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?",
		desc.db, desc.name).Scan(&p.Estimate); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("mysql: estimate the rows of %s: %w", name, err)
	}
	return p, nil
}

// ReadChunk implements snapshot.Database.
func (d *myDatabase) ReadChunk(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery) (*snapshot.Chunk, error) {
	return d.readChunk(ctx, name, q, &d.own)
}

// described returns a table's description: the cached one while the stream
// has handled no DDL statement since it was read (fresh: read it again),
// with the DDL count it was read at.
//
// A chunk read with a description from before a DDL statement could hold
// rows of the old shape (a column added to a SELECT that names its
// columns) to be emitted after the stream met the statement. So a chunk's
// Consistent (readChunk) says no when the stream handled a DDL statement
// after its description was read and before its high watermark; the engine
// then reads the chunk again, described again. A statement that changed
// the table before the read is in the binlog before the chunk's high
// watermark (the read waits for its metadata lock), so the stream counts
// it before it meets that watermark. The count is of the DDL statements
// naming any captured table (by its bare name, in any case: the refresh's
// rule): they are rare, and a chunk read again costs one read.
func (d *myDatabase) described(ctx context.Context, name string, fresh bool) (*tableDesc, uint64, bool, error) {
	if d.ddl == nil {
		desc, err := d.describe(ctx, name)
		return desc, 0, false, err
	}
	gen := d.ddl.Load()
	d.descMu.Lock()
	c, ok := d.descs[name]
	d.descMu.Unlock()
	if ok && c.gen == gen && !fresh {
		return c.desc, gen, true, nil
	}
	desc, err := d.describe(ctx, name)
	if err != nil {
		return nil, 0, false, err
	}
	d.descMu.Lock()
	if d.descs == nil {
		d.descs = map[string]cachedDesc{}
	}
	d.descs[name] = cachedDesc{desc: desc, gen: gen}
	d.descMu.Unlock()
	return desc, gen, false, nil
}

// readChunk reads a chunk with the table's cached description, on *cc
// (dialed when nil or broken; the pool when d.ci is nil, and in read-only
// mode). A read that fails with a cached description is read once more,
// described again: the table may have changed since (a column dropped or
// retyped).
func (d *myDatabase) readChunk(ctx context.Context, name string, q snapshot.ChunkQuery, cc **chunkConn) (*snapshot.Chunk, error) {
	for fresh := false; ; fresh = true {
		desc, gen, cached, err := d.described(ctx, name, fresh)
		if err != nil {
			return nil, err
		}
		res, err := d.readDescribed(ctx, desc, name, q, cc)
		if err != nil {
			if cached && ctx.Err() == nil {
				continue
			}
			return nil, err
		}
		if d.ddl != nil {
			prev := res.Consistent
			res.Consistent = func(low source.Position) bool {
				return d.ddl.Load() == gen && (prev == nil || prev(low))
			}
		}
		return res, nil
	}
}

// readDescribed runs a chunk's query with the description desc.
func (d *myDatabase) readDescribed(ctx context.Context, desc *tableDesc, name string, q snapshot.ChunkQuery, cc **chunkConn) (*snapshot.Chunk, error) {
	text, args, err := chunkQuery(desc, q)
	if err != nil {
		return nil, err
	}
	if d.ro != nil {
		var res *snapshot.Chunk
		set, err := d.consistentRead(ctx, func(db querier) (err error) {
			res, err = readRows(ctx, db, desc, name, q, text, args)
			return err
		})
		if err != nil {
			return nil, err
		}
		d.roChunk(set, res)
		return res, nil
	}
	if d.ci == nil {
		return readRows(ctx, d.db, desc, name, q, text, args)
	}
	if *cc != nil && (*cc).broken {
		(*cc).close()
		*cc = nil
	}
	if *cc == nil {
		c, err := d.ci.dialChunks(ctx)
		if err != nil {
			return nil, err
		}
		*cc = c
	}
	return (*cc).read(ctx, desc, name, q, text, args, d.bufs)
}

// closeConns closes the engine goroutine's chunk connection.
func (d *myDatabase) closeConns() {
	d.own.close()
	d.own = nil
}

// newChunk returns an empty chunk with room for the rows q likely reads.
func newChunk(q snapshot.ChunkQuery) *snapshot.Chunk {
	return &snapshot.Chunk{Rows: make([]source.Change, 0, chunkRows(q))}
}

// chunkRows is how many rows q likely reads.
func chunkRows(q snapshot.ChunkQuery) int {
	want := q.Limit
	switch {
	case q.Keys != nil:
		want = len(q.Keys)
	case q.To != nil:
		want = q.Limit / snapshot.ChunkCap // its Limit is the cap; most hold about a chunk
	}
	return max(min(want, 1<<14), 1)
}

// finishChunk sets a read chunk's Last.
func finishChunk(res *snapshot.Chunk, desc *tableDesc) {
	if k := len(res.Rows); k > 0 {
		res.Last = keyText(desc, res.Rows[k-1].Key())
	}
}

// readRows runs a chunk's query through database/sql.
func readRows(ctx context.Context, db querier, desc *tableDesc, name string, q snapshot.ChunkQuery, text string, args []any) (*snapshot.Chunk, error) {
	rows, err := db.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, queryError(name, q.Where, err)
	}
	defer rows.Close()
	now, n := time.Now(), len(desc.cols)
	res := newChunk(q)
	vals, ptrs := scanDests(desc.cols)
	var slab rowSlab
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, queryError(name, q.Where, err)
		}
		row := slab.next(n)
		for i := range vals {
			v, err := vals[i].value(&desc.cols[i])
			if err != nil {
				return nil, &ValueError{Table: name, Column: desc.cols[i].Name, Type: desc.cols[i].SourceType, Err: err}
			}
			row[i] = v
		}
		res.Rows = append(res.Rows, source.Change{Table: desc.table, Op: source.OpRead, After: row, Snapshot: true, CommitTime: now})
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(name, q.Where, err)
	}
	finishChunk(res, desc)
	return res, nil
}

// WriteWatermark implements snapshot.Database.
func (d *myDatabase) WriteWatermark(ctx context.Context, id string) error {
	if d.ro != nil {
		return d.roWatermark(ctx, id)
	}
	if d.wm == nil {
		why := "source.mysql.watermark_table is not set"
		if d.wmErr != nil {
			why = d.wmErr.Error()
		}
		return fmt.Errorf("%w: snapshots need the watermark table: %s", snapshot.ErrTableGone, why)
	}
	return d.wm.Write(ctx, id)
}

// queryError says which table and condition a failed query had; a
// condition or table the server refuses ends the run.
func queryError(table, where string, err error) error {
	switch serverCode(err) {
	case 1064, 1054, 1305, 1583, 1584: // syntax, unknown column, unknown function, wrong arguments
		if where != "" {
			return fmt.Errorf("%w: the condition %q on %s: %w", snapshot.ErrTableGone, where, table, err)
		}
		return &connError{fmt.Errorf("mysql: snapshot of %s (the table changed while it was read?): %w", table, err)}
	case 1146: // no such table
		return fmt.Errorf("%w: %s: %w", snapshot.ErrTableGone, table, err)
	}
	return fmt.Errorf("mysql: snapshot of %s: %w", table, err)
}

// ident is the table's quoted name.
func (d *tableDesc) ident() string { return quoteIdent(d.db) + "." + quoteIdent(d.name) }

// keyExprs are the quoted key columns.
func keyExprs(d *tableDesc) []string {
	out := make([]string, len(d.table.Key))
	for i, k := range d.table.Key {
		out[i] = quoteIdent(d.cols[k].Name)
	}
	return out
}

// keyMarks are the placeholders of the key's values: a decimal's cast, so
// the server compares decimals, not doubles.
func keyMarks(d *tableDesc) []string {
	out := make([]string, len(d.table.Key))
	for i, k := range d.table.Key {
		out[i] = "?"
		if c := &d.cols[k]; c.Base == "decimal" {
			out[i] = fmt.Sprintf("CAST(? AS DECIMAL(%d,%d))", c.Precision, c.Scale)
		}
	}
	return out
}

// chunkQuery writes a chunk's SELECT and its arguments: the key range (or
// the keys), the condition, the key's order and the limit.
func chunkQuery(d *tableDesc, q snapshot.ChunkQuery) (string, []any, error) {
	cols := make([]string, len(d.cols))
	for i := range d.cols {
		cols[i] = selectExpr(&d.cols[i], quoteIdent(d.cols[i].Name))
	}
	where, args, err := rangeWhere(d, q)
	if err != nil {
		return "", nil, err
	}
	keys := keyExprs(d)
	text := "SELECT " + strings.Join(cols, ", ") + " FROM " + d.ident() + " WHERE " + where +
		" ORDER BY " + strings.Join(keys, ", ")
	if q.Keys == nil {
		text += " LIMIT " + strconv.Itoa(q.Limit) // with To, the cap (snapshot.ChunkCap)
	}
	return text, args, nil
}

// rangeWhere writes a chunk's condition and its arguments: the keys, or
// the range after q.After up to q.To (every row) or q.Upper, and the
// run's condition.
func rangeWhere(d *tableDesc, q snapshot.ChunkQuery) (string, []any, error) {
	keys, marks := keyExprs(d), keyMarks(d)
	var where []string
	var args []any
	if q.Keys != nil {
		var alts []string
		for _, k := range q.Keys {
			vals, err := keyArgs(d, k)
			if err != nil {
				return "", nil, err
			}
			eq := make([]string, len(keys))
			for i := range keys {
				eq[i] = keys[i] + " = " + marks[i]
			}
			alts = append(alts, "("+strings.Join(eq, " AND ")+")")
			args = append(args, vals...)
		}
		where = append(where, "("+strings.Join(alts, " OR ")+")")
	} else {
		if q.After != nil {
			vals, err := keyArgs(d, q.After)
			if err != nil {
				return "", nil, err
			}
			w, a := rowCompare(keys, marks, vals, ">")
			where, args = append(where, w), append(args, a...)
		}
		upper := q.Upper
		if q.To != nil {
			upper = q.To
		}
		vals, err := keyArgs(d, upper)
		if err != nil {
			return "", nil, err
		}
		w, a := rowCompare(keys, marks, vals, "<=")
		where, args = append(where, w), append(args, a...)
		if q.Where != "" {
			where = append(where, "("+q.Where+")")
		}
	}
	return strings.Join(where, " AND "), args, nil
}

// rowCompare writes (k1, k2, …) op (v1, v2, …) for op > or <= as the
// expansion the optimizer turns into index ranges on both flavors:
// k1 > v1 OR (k1 = v1 AND k2 > v2) OR …, the last term for <= taking
// <=. marks are the placeholders of the values.
func rowCompare(keys, marks []string, vals []any, op string) (string, []any) {
	strict := ">"
	if op == "<=" {
		strict = "<"
	}
	var terms []string
	var args []any
	for i := range keys {
		var parts []string
		for j := 0; j < i; j++ {
			parts = append(parts, keys[j]+" = "+marks[j])
			args = append(args, vals[j])
		}
		cmp := strict
		if op == "<=" && i == len(keys)-1 {
			cmp = "<="
		}
		parts = append(parts, keys[i]+" "+cmp+" "+marks[i])
		args = append(args, vals[i])
		terms = append(terms, "("+strings.Join(parts, " AND ")+")")
	}
	return "(" + strings.Join(terms, " OR ") + ")", args
}

// keyText writes key values (the table model's) as a Key: each value as
// the server reads it as a query argument, binary values in hex.
func keyText(d *tableDesc, vals []any) snapshot.Key {
	out := make(snapshot.Key, len(vals))
	for i, v := range vals {
		c := &d.cols[d.table.Key[i]]
		switch a := keyArg(c, v).(type) {
		case []byte:
			out[i] = hex.EncodeToString(a)
		case string:
			out[i] = a
		default:
			out[i] = fmt.Sprint(a)
		}
	}
	return out
}

// keyArgs turns a Key back into query arguments.
func keyArgs(d *tableDesc, k snapshot.Key) ([]any, error) {
	if len(k) != len(d.table.Key) {
		return nil, fmt.Errorf("%w: %s: a saved key has %d values, the primary key %d columns (the key changed?); "+
			"stop the snapshot and start it again", snapshot.ErrTableGone, d.qualified(), len(k), len(d.table.Key))
	}
	out := make([]any, len(k))
	for i, s := range k {
		c := &d.cols[d.table.Key[i]]
		var err error
		switch c.Base {
		case "binary", "varbinary", "blob":
			out[i], err = hex.DecodeString(s)
		case "tinyint", "smallint", "mediumint", "int", "bigint", "year":
			// Integers as integers: a string compared with an integer
			// column is compared as a double.
			if c.Unsigned {
				out[i], err = strconv.ParseUint(s, 10, 64)
			} else {
				out[i], err = strconv.ParseInt(s, 10, 64)
			}
		case "enum", "set", "bit": // index, mask, value (keyArg)
			out[i], err = strconv.ParseUint(s, 10, 64)
		case "float", "double":
			out[i], err = strconv.ParseFloat(s, 64)
		default:
			out[i] = s
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: saved key value %q of %s does not parse as %s: %v",
				snapshot.ErrTableGone, d.qualified(), s, c.Name, c.SourceType, err)
		}
	}
	return out, nil
}

// keyArg converts a key value of the table model to a query argument.
func keyArg(t *colType, v any) any {
	switch t.Base {
	case "enum", "set", "bit":
		return keyNumber(t, v)
	case "float":
		if f, ok := v.(float32); ok {
			return float64(f)
		}
	}
	switch v := v.(type) {
	case []byte, string:
		return v
	}
	switch t.Base {
	case "date", "datetime", "timestamp", "time":
		return renderTemporal(t, v)
	}
	return v
}

// keyNumber is the integer an ENUM (its label's index, 0 for the empty
// error value), SET (its labels' bit mask) or BIT (its value) key is
// ordered and compared by.
func keyNumber(t *colType, v any) uint64 {
	switch x := v.(type) {
	case bool:
		if x {
			return 1
		}
		return 0
	case []byte:
		var n uint64
		for _, b := range x {
			n = n<<8 | uint64(b)
		}
		return n
	case string:
		var n uint64
		if x == "" {
			return 0
		}
		if t.Base == "enum" {
			return uint64(slices.Index(t.Values, x) + 1)
		}
		for _, label := range strings.Split(x, ",") {
			if i := slices.Index(t.Values, label); i >= 0 {
				n |= 1 << i
			}
		}
		return n
	}
	return 0
}
