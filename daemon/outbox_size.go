package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/source/mysql"
)

// tableSize reads a table's size on disk (with its indexes and TOAST) and
// its estimated rows from the source database's statistics.
func tableSize(ctx context.Context, cfg *config.Config, namespace, name string) (bytes, rows int64, err error) {
	if my := cfg.Source.MySQL; my != nil {
		db, err := mysql.OpenDB(my.DSN)
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, `SELECT COALESCE(data_length, 0) + COALESCE(index_length, 0), COALESCE(table_rows, 0)
			FROM information_schema.tables WHERE table_schema = ? AND table_name = ?`, namespace, name).Scan(&bytes, &rows)
		if errors.Is(err, sql.ErrNoRows) {
			err = errNoOutboxTable
		}
		return bytes, rows, err
	}
	pg := cfg.Source.Postgres
	if pg == nil {
		return 0, 0, fmt.Errorf("daemon: no source")
	}
	conn, err := pgx.Connect(ctx, pg.DSN)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `SELECT pg_total_relation_size(c.oid), COALESCE(s.n_live_tup, 0)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
		WHERE n.nspname = $1 AND c.relname = $2`, namespace, name).Scan(&bytes, &rows)
	if errors.Is(err, pgx.ErrNoRows) {
		err = errNoOutboxTable
	}
	return bytes, rows, err
}
