package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source"
)

// catalogRelation builds the table version the catalog describes, the same
// one a Relation message for the table yields (same columns, key and types).
func catalogRelation(t *catalogTable) (*relation, error) {
	msg := &pglogrepl.RelationMessage{Namespace: t.schema, RelationName: t.name}
	for _, c := range t.columns {
		msg.Columns = append(msg.Columns, &pglogrepl.RelationMessageColumn{Name: c.name, DataType: c.oid, TypeModifier: c.typmod})
	}
	return buildRelation(msg, t.info())
}

// snapshot reads every table in the slot's exported snapshot and emits its
// rows as op r at the slot's consistent point, before streaming starts, so
// every later change of a key follows its snapshot row in the log.
func (r *Reader) snapshot(ctx context.Context, name string, consistentPoint uint64, tables []*catalogTable, e source.Emitter) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: snapshot connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+name+"'"); err != nil {
		return fmt.Errorf("postgres: import snapshot %s: %w", name, err)
	}
	started := time.Now()
	var idx uint32
	for _, t := range tables {
		n, err := r.snapshotTable(ctx, conn, t, consistentPoint, started, &idx, e)
		if err != nil {
			return err
		}
		r.logger.Info("loaded table", "table", t.qualified(), "rows", n, "elapsed", time.Since(started).Round(time.Millisecond))
	}
	return tx.Commit(ctx)
}

func (r *Reader) snapshotTable(ctx context.Context, conn *pgx.Conn, t *catalogTable, cp uint64, started time.Time, idx *uint32, e source.Emitter) (int64, error) {
	rel, err := catalogRelation(t)
	if err != nil {
		return 0, err
	}
	r.known[rel.table.QualifiedName()] = rel.table
	cols := make([]string, len(t.columns))
	for i, c := range t.columns {
		cols[i] = pgx.Identifier{c.name}.Sanitize()
	}
	sql := fmt.Sprintf("COPY (SELECT %s FROM %s) TO STDOUT (FORMAT binary)", strings.Join(cols, ", "), t.ident())

	pr, pw := io.Pipe()
	copyErr := make(chan error, 1)
	go func() {
		_, err := conn.PgConn().CopyTo(ctx, pw, sql)
		pw.CloseWithError(err)
		copyErr <- err
	}()
	n, err := r.readCopy(ctx, pr, rel, cp, started, idx, e)
	pr.CloseWithError(errors.New("postgres: snapshot reader stopped"))
	if cerr := <-copyErr; err == nil && cerr != nil {
		err = fmt.Errorf("postgres: copy %s: %w", t.qualified(), cerr)
	}
	return n, err
}

func (r *Reader) readCopy(ctx context.Context, in io.Reader, rel *relation, cp uint64, started time.Time, idx *uint32, e source.Emitter) (int64, error) {
	cr, err := newCopyReader(in)
	if err != nil {
		return 0, err
	}
	var n int64
	batch := make([]source.Change, 0, r.cfg.BatchMax)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := e.Emit(ctx, batch); err != nil {
			return err
		}
		r.stats.SnapshotRows.Add(int64(len(batch)))
		clear(batch)
		batch = batch[:0]
		return nil
	}
	for {
		fields, err := cr.next()
		if err == io.EOF {
			return n, flush()
		}
		if err != nil {
			return n, err
		}
		if len(fields) != len(rel.decoders) {
			return n, fmt.Errorf("postgres: copy of %s returned %d columns, want %d", rel.table.QualifiedName(), len(fields), len(rel.decoders))
		}
		row := make([]any, len(fields))
		for i, f := range fields {
			if f == nil {
				continue
			}
			if row[i], err = rel.decoders[i](f); err != nil {
				return n, fmt.Errorf("postgres: %s column %q: %w", rel.table.QualifiedName(), rel.table.Columns[i].Name, err)
			}
		}
		batch = append(batch, source.Change{
			Table: rel.table, Op: source.OpRead, After: row, Snapshot: true,
			Pos: source.PGPosition(cp, *idx), LSN: cp, CommitTime: started,
		})
		*idx++
		n++
		if len(batch) >= r.cfg.BatchMax {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
}
