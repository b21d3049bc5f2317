package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// A chunk's round trips (session 15).
//
// A chunk was eleven round trips: the low watermark, BEGIN, LOCK, the
// snapshot, the table's description (its oid, its pg_class row, its
// columns, its key), the COPY, COMMIT and the high watermark. Now it is
// three: one simple-protocol query holds the low watermark in a
// transaction of its own and its COMMIT, then BEGIN, LOCK, the snapshot
// and the table's oid and catalog version (chunkTx; since session 16 a
// statement prepared once per connection, versionStmt); then the COPY with
// the chunk's COMMIT in its query (it runs only when the COPY succeeded);
// then the high watermark. (A chunk read in halves, SplitRows, commits on
// its own.)
//
// The watermark's COMMIT comes before the chunk's BEGIN in the same query
// string, so it is durable, and the stream delivers it before every
// change the chunk's snapshot does not see (snapshot.LowReader's
// requirement; TestLowWatermarkCommitsBeforeRead). LOCK takes no snapshot
// (PostgreSQL leaves the transaction's snapshot to its first query, the
// SELECT after it), so the table is locked before the snapshot as before.
//
// The description (columns, types, key, defaults) is reused while the
// table's catalog version is the one it was read under: the oid, the
// pg_class row's xmin and relfilenode, and each of its pg_attribute,
// pg_index and pg_attrdef rows' xmin (every DDL that changes what a chunk
// reads writes a new version of one of these rows, or adds or removes
// one), read in the chunk's own snapshot. So a chunk after an ALTER TABLE
// describes the table again (TestChunkDescriptionFollowsDDL). A VACUUM
// FREEZE of the catalog only costs a description.

var _ snapshot.LowReader = (*pgDatabase)(nil)

// chunkDesc is a table's description for chunks, and the catalog version
// it was read under.
type chunkDesc struct {
	version string
	ct      *catalogTable
	rel     *relation
}

// ReadChunkAfterLow implements snapshot.LowReader.
func (d *pgDatabase) ReadChunkAfterLow(ctx context.Context, id, name string, _ *snapshot.Table, q snapshot.ChunkQuery) (*snapshot.Chunk, error) {
	return d.readChunk(ctx, id, name, q)
}

// versionSQL selects, for the table named by $1 (schema) and $2 (table),
// the snapshot of the transaction (its first query takes it), the table's
// oid, its catalog version (see above) and the other relations whose
// changes the chunk's consistency check asks about (chunkRelations). A
// chunk runs it as the prepared statement versionStmt.
const versionSQL = `SELECT pg_current_snapshot()::text, c.oid::text, format('%s %s %s/%s/%s', c.xmin, c.relfilenode,
	(SELECT string_agg(a.attnum::text || ':' || a.xmin::text, ',' ORDER BY a.attnum) FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0),
	(SELECT string_agg(i.indexrelid::text || ':' || i.xmin::text, ',' ORDER BY i.indexrelid) FROM pg_index i WHERE i.indrelid = c.oid),
	(SELECT string_agg(f.oid::text || ':' || f.xmin::text, ',' ORDER BY f.oid) FROM pg_attrdef f WHERE f.adrelid = c.oid)),
	(SELECT string_agg(p.relid::oid::text, ',') FROM (SELECT relid FROM pg_partition_tree(c.oid) UNION SELECT relid FROM pg_partition_ancestors(c.oid)) p)
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`

// versionStmt is the name of versionSQL prepared on a chunk connection
// (prepareVersion). Planned afresh in every chunk (its three subqueries
// and two joins) the query cost the server about 0.22 ms of CPU a chunk
// (log_statement_stats), about 0.03 µs a row of a chunk of 8,192; its
// EXECUTE, once a generic plan is cached, about 0.04 ms (BENCHMARKS.md,
// session 16).
const versionStmt = "cdcd_chunk_version"

// prepareVersion prepares versionStmt on d.conn, once per connection (a
// prepared statement lives as long as its session, whatever becomes of
// the transactions around it).
func (d *pgDatabase) prepareVersion(ctx context.Context) error {
	if d.versionReady {
		return nil
	}
	if _, err := d.conn.PgConn().Exec(ctx, "PREPARE "+versionStmt+"(text, text) AS "+versionSQL).ReadAll(); err != nil {
		return fmt.Errorf("postgres: prepare the chunks' catalog query: %w", err)
	}
	d.versionReady = true
	return nil
}

// chunkTx writes a chunk's low watermark carrying id (none when id is
// empty) and begins the chunk's REPEATABLE READ transaction on d.conn, in
// one round trip (see above), and returns the transaction's snapshot and
// the table's description, and the relations whose changes can make the
// read stale (chunkRelations). The transaction is left open: the caller
// ends it (COMMIT or rollback).
func (d *pgDatabase) chunkTx(ctx context.Context, id, name string) (pgSnapshot, []uint32, *catalogTable, *relation, error) {
	if err := d.prepareVersion(ctx); err != nil {
		return pgSnapshot{}, nil, nil, nil, err
	}
	sch, tbl := splitTable(name)
	var b strings.Builder
	if id != "" {
		b.WriteString("BEGIN; SELECT pg_logical_emit_message(true, " + quoteLiteral(watermarkPrefix) + ", " +
			quoteLiteral(d.r.cfg.Slot+" "+id) + "); COMMIT; ")
	}
	b.WriteString("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; LOCK TABLE " + pgx.Identifier{sch, tbl}.Sanitize() +
		" IN ACCESS SHARE MODE; EXECUTE " + versionStmt + "(" + quoteLiteral(sch) + ", " + quoteLiteral(tbl) + ")")
	results, err := d.conn.PgConn().Exec(ctx, b.String()).ReadAll()
	if err != nil {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, queryError(name, "", err)
	}
	last := results[len(results)-1]
	if len(last.Rows) != 1 || len(last.Rows[0]) != 4 {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, &TableError{Table: name,
			Err: fmt.Errorf("was dropped while a chunk was read; check source.postgres.tables (%w)", errNoTable)})
	}
	row := last.Rows[0]
	snap, err := parseSnapshot(string(row[0]))
	if err != nil {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, err
	}
	oid, err := strconv.ParseUint(string(row[1]), 10, 32)
	if err != nil {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, fmt.Errorf("postgres: the oid of %s: %w", name, err)
	}
	rels, err := chunkRelations(uint32(oid), string(row[3]))
	if err != nil {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, err
	}
	version := string(row[1]) + " " + string(row[2])
	if c := d.descs[name]; c != nil && c.version == version {
		return snap, rels, c.ct, c.rel, nil
	}
	delete(d.descs, name)
	ct, rel, err := d.describeInTx(ctx, name, uint32(oid))
	if err != nil {
		d.rollback(ctx)
		return pgSnapshot{}, nil, nil, nil, err
	}
	if d.descs == nil {
		d.descs = map[string]*chunkDesc{}
	}
	d.descs[name] = &chunkDesc{version: version, ct: ct, rel: rel}
	return snap, rels, ct, rel, nil
}

// chunkRelations returns the relations whose row changes can make a read
// of table oid stale: the table, and with declarative partitioning the
// rest of its partition tree, as listed (comma-separated oids of
// pg_partition_tree and pg_partition_ancestors) in the chunk's snapshot.
// A partitioned table's chunk reads its partitions' rows, whose changes
// pgoutput names by the partition's oid; a partition's changes come under
// its root's with publish_via_partition_root. An inheritance parent is
// read ONLY (catalogTable.from), so its children are not asked about.
func chunkRelations(oid uint32, tree string) ([]uint32, error) {
	rels := []uint32{oid}
	if tree == "" {
		return rels, nil
	}
	for f := range strings.SplitSeq(tree, ",") {
		v, err := strconv.ParseUint(f, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("postgres: the partition tree of table %d: %q: %w", oid, tree, err)
		}
		if r := uint32(v); !slices.Contains(rels, r) {
			rels = append(rels, r)
		}
	}
	return rels, nil
}

// describeInTx describes table oid (name) in the open transaction.
func (d *pgDatabase) describeInTx(ctx context.Context, name string, oid uint32) (*catalogTable, *relation, error) {
	ct, err := describeTable(ctx, d.conn, oid)
	if errors.Is(err, errNoTable) {
		return nil, nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	if err != nil {
		return nil, nil, err
	}
	rel, err := catalogRelation(ctx, d.types, ct)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", snapshot.ErrTableGone, err)
	}
	return ct, rel, nil
}

// rollback ends d.conn's transaction, if any, after a failed step (a
// failed rollback leaves the connection to its next query's error).
func (d *pgDatabase) rollback(ctx context.Context) {
	_, _ = d.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
}
