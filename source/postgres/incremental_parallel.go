package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Several chunks at once (snapshot.Parallel): the engine's connection
// finds where each range chunk ends; readers, each on a connection of its
// own, write the chunks' watermarks and read them. The COPY initial load
// reads with several workers; one chunk at a time between watermarks left
// an incremental snapshot at about 0.6 of its rate (BENCHMARKS.md).

var _ snapshot.Parallel = (*pgDatabase)(nil)

// Bounds implements snapshot.Parallel: where the next range chunks end,
// about q.Limit rows apart, from a sample of the table's pages (sorted by
// the server, so the order and collations are the key's), or, when a
// sample would cost about what it saves (see IncrementalConfig.SamplePercent),
// from an index read of every key of the next exactBatch chunks.
//
// The index read (row_number over n·Limit keys) was about 0.45 PostgreSQL
// CPU-µs a row of the benchmark table, half of what reading the chunk
// costs; a sample of 8% of the pages, once for the whole range, about
// 0.04 (BENCHMARKS.md). A sample's ends are estimates: a chunk may hold up
// to a few times its rows, and one holding more than the engine's cap is
// cut there (snapshot.ChunkQuery.To); a page sample of a table whose
// physical order follows its key places ends a page apart at best, which
// ten pages a chunk keep to about ±30%.
func (d *pgDatabase) Bounds(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery, n int) ([]snapshot.Key, bool, error) {
	ct, err := describeByName(ctx, d.conn, name)
	if err != nil {
		return nil, false, err
	}
	pct, every, err := d.sampleRate(ctx, ct, q.Limit, n)
	if err != nil {
		return nil, false, err
	}
	if pct == 0 {
		n, every = min(n, exactBatch), q.Limit
	}
	sql, err := boundsSQL(ct, q, n, every, pct)
	if err != nil {
		return nil, false, err
	}
	rows, err := d.conn.Query(ctx, sql)
	if err != nil {
		return nil, false, queryError(name, q.Where, err)
	}
	defer rows.Close()
	var out []snapshot.Key
	for rows.Next() {
		k := make(snapshot.Key, len(ct.key))
		ptrs := make([]any, len(k))
		for i := range k {
			ptrs[i] = &k[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, false, queryError(name, q.Where, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, false, queryError(name, q.Where, err)
	}
	return out, len(out) < n, nil
}

// exactBatch is how many chunks' ends one index read finds.
const exactBatch = 8

// Sampling: about samplePages sampled pages a chunk (at least sampleMin
// rows), unless that is more than sampleMaxPercent of the table, or the
// table holds more than sampleMaxReads reads' worth of ends (each read
// samples the whole table again).
const (
	samplePages      = 10
	sampleMin        = 64
	sampleMaxPercent = 30
	sampleMaxReads   = 4
)

// sampleRate returns the percentage of a table's pages a read of chunk
// ends samples and every how many sampled keys a chunk ends (about limit
// rows); pct 0: read the ends through the index.
func (d *pgDatabase) sampleRate(ctx context.Context, ct *catalogTable, limit, n int) (pct float64, every int, err error) {
	if p := d.r.cfg.Incremental.SamplePercent; p != 0 {
		if p < 0 {
			return 0, 0, nil
		}
		p = min(p, 100)
		return p, max(1, int(float64(limit)*p/100)), nil
	}
	var tuples, pages, size float64
	if err := d.conn.QueryRow(ctx, `SELECT COALESCE(sum(GREATEST(reltuples, 0)), 0), COALESCE(sum(relpages), 0),
		COALESCE(sum(pg_relation_size(oid)), 0) / current_setting('block_size')::float8 FROM pg_class
		WHERE oid = $1::oid OR oid IN (SELECT relid FROM pg_partition_tree($1::oid) WHERE isleaf)`, ct.oid).Scan(&tuples, &pages, &size); err != nil {
		return 0, 0, fmt.Errorf("postgres: statistics of %s: %w", ct.qualified(), err)
	}
	perPage := 100.0 // never analyzed: a guess, a narrow row's
	if tuples > 0 && pages > 0 {
		perPage = tuples / pages
	} else {
		tuples = size * perPage
	}
	rows := max(sampleMin, samplePages*perPage) // sampled a chunk
	pct = 100 * rows / float64(limit)
	if pct > sampleMaxPercent || tuples > sampleMaxReads*float64(n)*float64(limit) {
		return 0, 0, nil
	}
	return pct, int(rows), nil
}

// boundsSQL selects the text of every every-th key of range chunk q's
// rows, in its order (the key's collations are the columns', as in the
// chunks' ORDER BY), at most n of them: of a sample of pct% of the table's
// pages (TABLESAMPLE SYSTEM), or of every row when pct is 0.
func boundsSQL(ct *catalogTable, q snapshot.ChunkQuery, n, every int, pct float64) (string, error) {
	keys := keyColumns(ct)
	inner := make([]string, len(keys))
	outer := make([]string, len(keys))
	for i, k := range keys {
		inner[i] = k + " AS k" + strconv.Itoa(i)
		outer[i] = "(b.k" + strconv.Itoa(i) + ")::text"
	}
	where, err := chunkWhere(ct, q)
	if err != nil {
		return "", err
	}
	sample := ""
	if pct > 0 {
		sample = " TABLESAMPLE SYSTEM (" + strconv.FormatFloat(pct, 'f', -1, 64) + ")"
	}
	order := strings.Join(keys, ", ")
	return "SELECT " + strings.Join(outer, ", ") + " FROM (SELECT " + strings.Join(inner, ", ") +
		", row_number() OVER (ORDER BY " + order + ") AS n FROM " + ct.from() + " AS " + tableAlias + sample +
		" WHERE " + strings.Join(where, " AND ") + " ORDER BY " + order + " LIMIT " + strconv.FormatInt(int64(n)*int64(every), 10) +
		") AS b WHERE b.n % " + strconv.Itoa(every) + " = 0 ORDER BY b.n", nil
}

// Reader implements snapshot.Parallel.
func (d *pgDatabase) Reader(ctx context.Context) (snapshot.ChunkReader, error) {
	conn, err := pgx.Connect(ctx, d.r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: snapshot reader connection: %w", err)
	}
	return &chunkReader{pgDatabase{r: d.r, conn: conn, types: newTypeResolver(conn), ring: d.ring, reuse: d.reuse}}, nil
}

// chunkReader is a pgDatabase on a connection of its own.
type chunkReader struct{ pgDatabase }

// Close implements snapshot.ChunkReader.
func (c *chunkReader) Close() {
	c.close()
	c.conn.Close(context.Background())
}
