package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// The initial load's plan: every table is cut into chunks by ranges of its
// key, computed once (in the load's first snapshot) and kept in the State,
// so a resumed load reads the same chunks. A key always falls into the same
// chunk, whatever snapshot reads it.

// tablePlan is one table's chunks: chunk i holds the keys k with
// Bounds[i-1] <= k < Bounds[i] in the key's own order (the first and last
// chunks are open-ended), so there are len(Bounds)+1 chunks.
type tablePlan struct {
	Table    string     `json:"table"`
	Estimate int64      `json:"estimate"`
	Bounds   [][]string `json:"bounds,omitempty"` // key values as text
}

// loadPlan is the whole load's chunks, in load order (State key
// "postgres/<slot>/load-plan").
type loadPlan struct {
	Tables []tablePlan `json:"tables"`
}

// chunks returns the number of chunks in the plan.
func (p *loadPlan) chunks() int {
	n := 0
	for _, t := range p.Tables {
		n += len(t.Bounds) + 1
	}
	return n
}

// chunkRef locates chunk seq of the plan.
func (p *loadPlan) chunk(seq int) (table *tablePlan, i int) {
	for ti := range p.Tables {
		t := &p.Tables[ti]
		if seq <= len(t.Bounds) {
			return t, seq
		}
		seq -= len(t.Bounds) + 1
	}
	return nil, 0
}

// planTable estimates a table's rows and cuts it into chunks of about
// chunkRows, by key values sampled from the table (TABLESAMPLE SYSTEM), in
// the caller's snapshot.
func planTable(ctx context.Context, q querier, t *catalogTable, chunkRows int64) (tablePlan, error) {
	p := tablePlan{Table: t.qualified()}
	var est *float64
	var unknown bool
	leaves := `SELECT $1::oid`
	if t.partitioned {
		leaves = `SELECT relid FROM pg_partition_tree($1) WHERE isleaf`
	}
	err := q.QueryRow(ctx, `SELECT sum(reltuples), COALESCE(bool_or(reltuples < 0), true) FROM pg_class
		WHERE oid IN (`+leaves+`)`, t.oid).Scan(&est, &unknown)
	if err != nil {
		return p, fmt.Errorf("postgres: estimate rows of %s: %w", t.qualified(), err)
	}
	if est == nil || unknown {
		// Never analyzed: count (in the snapshot, so the estimate is exact).
		if err := q.QueryRow(ctx, "SELECT count(*) FROM "+t.from()).Scan(&p.Estimate); err != nil {
			return p, fmt.Errorf("postgres: count rows of %s: %w", t.qualified(), err)
		}
	} else {
		p.Estimate = int64(*est)
	}
	chunkRows = max(chunkRows, p.Estimate/10_000)
	chunks := (p.Estimate + chunkRows - 1) / chunkRows
	if chunks <= 1 {
		return p, nil
	}
	if len(t.key) == 1 && pgdecode.IsInteger(t.column(t.key[0]).oid) {
		return p, planIntegerRange(ctx, q, t, &p, chunks)
	}
	return p, planSampled(ctx, q, t, &p, chunks)
}

// column returns the catalog column named name.
func (t *catalogTable) column(name string) catalogColumn {
	for _, c := range t.columns {
		if c.name == name {
			return c
		}
	}
	return catalogColumn{}
}

// planIntegerRange cuts a single integer key's range (min and max come from
// the index) into chunks of equal width.
func planIntegerRange(ctx context.Context, q querier, t *catalogTable, p *tablePlan, chunks int64) error {
	k := pgx.Identifier{t.key[0]}.Sanitize()
	var lo, hi *int64
	if err := q.QueryRow(ctx, fmt.Sprintf("SELECT min(%s)::int8, max(%s)::int8 FROM %s", k, k, t.from())).Scan(&lo, &hi); err != nil {
		return fmt.Errorf("postgres: key range of %s: %w", t.qualified(), err)
	}
	if lo == nil || hi == nil {
		return nil
	}
	width := (float64(*hi) - float64(*lo) + 1) / float64(chunks)
	for i := int64(1); i < chunks; i++ {
		b := *lo + int64(width*float64(i))
		if b <= *lo || len(p.Bounds) > 0 && p.Bounds[len(p.Bounds)-1][0] == strconv.FormatInt(b, 10) {
			continue
		}
		p.Bounds = append(p.Bounds, []string{strconv.FormatInt(b, 10)})
	}
	return nil
}

// planSampled cuts the table at quantiles of a row sample (TABLESAMPLE
// BERNOULLI: every block is read, so the sample is not clustered).
func planSampled(ctx context.Context, q querier, t *catalogTable, p *tablePlan, chunks int64) error {
	const perChunk = 20 // sampled keys per chunk
	pct := min(100, max(0.0001, 100*float64(chunks*perChunk)/float64(p.Estimate)))
	keys := make([]string, len(t.key))
	for i, k := range t.key {
		keys[i] = tableAlias + "." + pgx.Identifier{k}.Sanitize() // never an output column's name
	}
	sel := make([]string, len(keys))
	for i, k := range keys {
		sel[i] = k + "::text"
	}
	rows, err := q.Query(ctx, fmt.Sprintf("SELECT %s FROM %s AS %s TABLESAMPLE BERNOULLI (%g) ORDER BY %s",
		strings.Join(sel, ", "), t.from(), tableAlias, pct, strings.Join(keys, ", ")))
	if err != nil {
		return fmt.Errorf("postgres: sample keys of %s: %w", t.qualified(), err)
	}
	var sample [][]string
	for rows.Next() {
		vals := make([]string, len(keys))
		ptrs := make([]any, len(keys))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			rows.Close()
			return err
		}
		sample = append(sample, vals)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: sample keys of %s: %w", t.qualified(), err)
	}
	for i := int64(1); i < chunks && len(sample) > 0; i++ {
		b := sample[int(i*int64(len(sample))/chunks)]
		if len(p.Bounds) == 0 || !slices.Equal(p.Bounds[len(p.Bounds)-1], b) {
			p.Bounds = append(p.Bounds, b)
		}
	}
	return nil
}

// tableAlias names the table in the load's queries, so ORDER BY and WHERE
// refer to its columns, never to output columns of the same name.
const tableAlias = "_cdcd_t"

// keyPart says how one key column orders a chunk's rows and how its value
// becomes part of the rows' positions: the rows of a chunk are read in the
// byte order of their encoded keys, so a resumed chunk re-reads them in
// the order the positions expect.
type keyPart struct {
	col     int  // index of the column in the row
	textCol int  // index of the extra text column in the COPY, for text parts
	native  bool // ordered by the column itself (integers, uuid)
}

// chunkQuery is a chunk's COPY statement and how to read its rows.
type chunkQuery struct {
	sql   string
	parts []keyPart
	ncols int // data columns; the COPY has extra text key columns after them
}

// buildChunkQuery writes the COPY of chunk i of table t in plan p: the
// columns (those without a binary form cast to text), the key range, and
// the order of the encoded keys.
func buildChunkQuery(t *catalogTable, rel *relation, p *tablePlan, i int) chunkQuery {
	q := chunkQuery{ncols: len(t.columns)}
	cols := make([]string, 0, len(t.columns)+len(t.key))
	for ci, c := range t.columns {
		id := pgx.Identifier{c.name}.Sanitize()
		if rel.types[ci].Text {
			id += "::text"
		}
		cols = append(cols, id)
	}
	var order, keys, casts []string
	for _, k := range t.key {
		ci := rel.table.ColumnIndex(k)
		id := tableAlias + "." + pgx.Identifier{k}.Sanitize()
		keys = append(keys, id)
		casts = append(casts, t.columns[ci].typeName)
		part := keyPart{col: ci}
		switch rel.table.Columns[ci].Kind {
		case schema.Int16, schema.Int32, schema.Int64, schema.UUID:
			part.native = true
			order = append(order, id)
		default:
			part.textCol = len(cols)
			cols = append(cols, "("+id+")::text")
			order = append(order, "("+id+`)::text COLLATE "C"`)
		}
		q.parts = append(q.parts, part)
	}
	var where []string
	row := func(vals []string) string {
		lits := make([]string, len(vals))
		for j, v := range vals {
			lits[j] = quoteLiteral(v) + "::" + casts[j]
		}
		return "(" + strings.Join(lits, ", ") + ")"
	}
	keyRow := "(" + strings.Join(keys, ", ") + ")"
	if i > 0 {
		where = append(where, keyRow+" >= "+row(p.Bounds[i-1]))
	}
	if i < len(p.Bounds) {
		where = append(where, keyRow+" < "+row(p.Bounds[i]))
	}
	sql := "SELECT " + strings.Join(cols, ", ") + " FROM " + t.from() + " AS " + tableAlias
	if len(where) > 0 {
		sql += " WHERE " + strings.Join(where, " AND ")
	}
	sql += " ORDER BY " + strings.Join(order, ", ")
	q.sql = "COPY (" + sql + ") TO STDOUT (FORMAT binary)"
	return q
}

// quoteLiteral writes s as an escape string literal, which reads the same
// whatever standard_conforming_strings says.
func quoteLiteral(s string) string {
	var b strings.Builder
	b.WriteString("E'")
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\'':
			b.WriteString("''")
		case '\\':
			b.WriteString(`\\`)
		default:
			b.WriteByte(s[i])
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// A row of the initial load has the position: the 12-byte PostgreSQL
// position (consistent point − 1, chunk sequence), followed by the row's
// encoded key. Every row of the load sorts before every change streamed
// from the slot (whose commit LSN is at least the consistent point), the
// chunks in load order, and the rows of a chunk in the order they are
// read, so a chunk read again after a crash, even in another snapshot,
// gets the same position for the same key, and the Emitter's per-partition
// dedupe drops exactly the rows it already holds.

// appendKeyPart appends the order-preserving encoding of one key value:
// integers as 8 big-endian bytes with the sign bit flipped, uuids as their
// 16 bytes, text with 0x00 escaped as 0x00 0xFF and ended by 0x00 0x01.
func appendKeyPart(dst []byte, part keyPart, row []any, fields [][]byte) ([]byte, error) {
	if part.native {
		switch v := row[part.col].(type) {
		case int64:
			return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63)), nil
		case [16]byte:
			return append(dst, v[:]...), nil
		}
		return dst, fmt.Errorf("postgres: key value %T cannot order a chunk", row[part.col])
	}
	if part.textCol >= len(fields) || fields[part.textCol] == nil {
		return dst, fmt.Errorf("postgres: key text missing from the chunk's copy")
	}
	for _, c := range fields[part.textCol] {
		if c == 0 {
			dst = append(dst, 0, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, 0, 1), nil
}
