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

// Bounds implements snapshot.Parallel: the keys Limit-1, 2·Limit-1, …
// rows into the range chunk q, in its order, from one index read of n·Limit
// keys (and one description of the table for the n chunks).
func (d *pgDatabase) Bounds(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery, n int) ([]snapshot.Key, error) {
	ct, err := describeByName(ctx, d.conn, name)
	if err != nil {
		return nil, err
	}
	sql, err := boundsSQL(ct, q, n)
	if err != nil {
		return nil, err
	}
	rows, err := d.conn.Query(ctx, sql)
	if err != nil {
		return nil, queryError(name, q.Where, err)
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
			return nil, queryError(name, q.Where, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, queryError(name, q.Where, err)
	}
	return out, nil
}

// boundsSQL selects the text of every q.Limit-th key of the next n·q.Limit
// in range chunk q's order (the key's collations are the columns', as in
// the chunks' ORDER BY).
func boundsSQL(ct *catalogTable, q snapshot.ChunkQuery, n int) (string, error) {
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
	order := strings.Join(keys, ", ")
	return "SELECT " + strings.Join(outer, ", ") + " FROM (SELECT " + strings.Join(inner, ", ") +
		", row_number() OVER (ORDER BY " + order + ") AS n FROM " + ct.ident() + " AS " + tableAlias +
		" WHERE " + strings.Join(where, " AND ") + " ORDER BY " + order + " LIMIT " + strconv.Itoa(n*q.Limit) +
		") AS b WHERE b.n % " + strconv.Itoa(q.Limit) + " = 0 ORDER BY b.n", nil
}

// Reader implements snapshot.Parallel.
func (d *pgDatabase) Reader(ctx context.Context) (snapshot.ChunkReader, error) {
	conn, err := pgx.Connect(ctx, d.r.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: snapshot reader connection: %w", err)
	}
	return &chunkReader{pgDatabase{r: d.r, conn: conn, types: newTypeResolver(conn), ring: d.ring}}, nil
}

// chunkReader is a pgDatabase on a connection of its own.
type chunkReader struct{ pgDatabase }

// Close implements snapshot.ChunkReader.
func (c *chunkReader) Close() {
	c.close()
	c.conn.Close(context.Background())
}
