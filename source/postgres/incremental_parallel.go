package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Several chunks at once (snapshot.Parallel): the engine's connection
// finds where each range chunk ends; readers, each on a connection of its
// own, write the chunks' watermarks and read them. The COPY initial load
// reads with several workers; one chunk at a time between watermarks left
// an incremental snapshot at about 0.6 of its rate (BENCHMARKS.md).

var _ snapshot.Parallel = (*pgDatabase)(nil)

// Bound implements snapshot.Parallel: the key Limit-1 rows into the range
// chunk q, in its order (an index-only read of the keys).
func (d *pgDatabase) Bound(ctx context.Context, name string, _ *snapshot.Table, q snapshot.ChunkQuery) (snapshot.Key, error) {
	ct, err := describeByName(ctx, d.conn, name)
	if err != nil {
		return nil, err
	}
	sql, err := keyAtSQL(ct, nil, q, q.Limit-1)
	if err != nil {
		return nil, err
	}
	k := make(snapshot.Key, len(ct.key))
	ptrs := make([]any, len(k))
	for i := range k {
		ptrs[i] = &k[i]
	}
	switch err := d.conn.QueryRow(ctx, sql).Scan(ptrs...); {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, queryError(name, q.Where, err)
	}
	return k, nil
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
