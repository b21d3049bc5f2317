package mysql

import (
	"context"
	"database/sql"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Several chunks at once (snapshot.Parallel): the engine finds where each
// range chunk ends (Bound), and readers write the chunks' watermarks and
// read them beside each other. The query pool is safe for concurrent use,
// so a reader is the database itself; each watermark is its own
// autocommit upsert of the pipeline's row, which the server serialises.
// Not in read-only mode (a chunk's read is its watermark there).

// myParallel is a myDatabase that reads several range chunks at once.
type myParallel struct{ *myDatabase }

var _ snapshot.Parallel = (*myParallel)(nil)

// Bounds implements snapshot.Parallel: the keys Limit-1, 2·Limit-1, …
// rows into the range chunk q, in its order, for at most boundBatch
// chunks (fewer: fewer rows are left), one query each.
//
// A key of one integer column (a run with no condition) is read so only
// for two chunks; the ends after them are spaced as those two are, up to
// spacedBatch chunks in all (spaceEnds). Each exact end is an index read
// of Limit keys on the engine's goroutine, while no new chunk can start
// (30–470 ms each on the loaded machine of session 9, eight every eight
// chunks); the benchmark's and most tables' keys are dense enough that
// the spacing is the exact ends'. Where keys are denser than the two
// ends said, a chunk is cut at its cap (snapshot.ChunkCap) and the range
// goes on after it; where sparser, chunks hold fewer rows.
func (d *myParallel) Bounds(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery, n int) ([]snapshot.Key, bool, error) {
	desc, _, _, err := d.described(ctx, name, false)
	if err != nil {
		return nil, false, err
	}
	spaced := q.Where == "" && len(desc.table.Key) == 1 && isInteger(desc.cols[desc.table.Key[0]].Base)
	exact := min(n, boundBatch)
	if spaced {
		exact = min(n, 2)
	}
	keys := keyExprs(desc)
	sel := make([]string, len(keys))
	for i, k := range desc.table.Key {
		sel[i] = selectExpr(&desc.cols[k], keys[i])
	}
	var out []snapshot.Key
	for len(out) < exact {
		where, args, err := rangeWhere(desc, q)
		if err != nil {
			return nil, false, err
		}
		text := "SELECT " + strings.Join(sel, ", ") + " FROM " + desc.ident() + " WHERE " + where +
			" ORDER BY " + strings.Join(keys, ", ") + " LIMIT 1 OFFSET ?"
		p := &snapshot.Plan{}
		if err := readKey(ctx, d.db, desc, text, append(args, int64(q.Limit-1)), name, q.Where, p); err != nil {
			return nil, false, err
		}
		if p.Upper == nil {
			return out, true, nil
		}
		out = append(out, p.Upper)
		q.After = p.Upper
	}
	if spaced && len(out) == 2 {
		return spaceEnds(out, q.Upper, min(n, spacedBatch))
	}
	return out, false, nil
}

// boundBatch is how many chunks' ends one Bounds call reads exactly;
// spacedBatch how many it returns for an integer key (spaceEnds).
const (
	boundBatch  = 8
	spacedBatch = 64
)

// spaceEnds adds ends to two exact ends of an integer key, spaced as they
// are, below upper, until there are n; last when about a chunk or less is
// left after them. Keys whose text is not an int64 get no more ends. The
// differences are taken as uint64: exact for any two int64 in order.
func spaceEnds(ends []snapshot.Key, upper snapshot.Key, n int) ([]snapshot.Key, bool, error) {
	a, errA := strconv.ParseInt(ends[0][0], 10, 64)
	b, errB := strconv.ParseInt(ends[1][0], 10, 64)
	u, errU := strconv.ParseInt(upper[0], 10, 64)
	if errA != nil || errB != nil || errU != nil || b <= a || u < b {
		return ends, false, nil
	}
	step, last := uint64(b)-uint64(a), b
	for len(ends) < n {
		if uint64(u)-uint64(last) <= step {
			return ends, true, nil
		}
		last = int64(uint64(last) + step)
		ends = append(ends, snapshot.Key{strconv.FormatInt(last, 10)})
	}
	return ends, false, nil
}

// Reader implements snapshot.Parallel.
func (d *myParallel) Reader(context.Context) (snapshot.ChunkReader, error) {
	return &chunkReader{myDatabase: d.myDatabase}, nil
}

// chunkReader reads chunks on a connection of its own (dialed at its first
// read; see chunkconn.go) and writes watermarks on the shared pool.
type chunkReader struct {
	*myDatabase
	cc *chunkConn
}

// ReadChunk implements snapshot.ChunkReader.
func (r *chunkReader) ReadChunk(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery) (*snapshot.Chunk, error) {
	return r.readChunk(ctx, name, q, &r.cc)
}

// Close implements snapshot.ChunkReader: its connection is closed, the
// pool stays the engine's.
func (r *chunkReader) Close() {
	r.cc.close()
	r.cc = nil
}

// readKey runs a query of one key (its columns as selectExpr selects
// them) into p.Upper; none leaves it nil.
func readKey(ctx context.Context, db querier, desc *tableDesc, q string, args []any, name, where string, p *snapshot.Plan) error {
	keys := desc.table.Key
	raw := make([]sql.RawBytes, len(keys))
	ptrs := make([]any, len(keys))
	for i := range raw {
		ptrs[i] = &raw[i]
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return queryError(name, where, err)
	}
	defer rows.Close()
	if rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return queryError(name, where, err)
		}
		vals := make([]any, len(keys))
		for i, k := range keys {
			if vals[i], err = fromText(&desc.cols[k], raw[i]); err != nil {
				return &ValueError{Table: name, Column: desc.cols[k].Name, Type: desc.cols[k].SourceType, Err: err}
			}
		}
		p.Upper = keyText(desc, vals)
	}
	if err := rows.Err(); err != nil {
		return queryError(name, where, err)
	}
	return nil
}
