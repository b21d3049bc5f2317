package mirror

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go/table"
)

// CompareMySQL is Compare for a MySQL or MariaDB table (db.table read
// through db, a session in UTC): the source rendered the way Render
// renders cdcd's Iceberg values of its types (docs/types.md).
func CompareMySQL(ctx context.Context, db *sql.DB, dbName, name string, tbl *table.Table) (*Diff, error) {
	want, cols, keys, err := MySQLSourceRows(ctx, db, dbName, name)
	if err != nil {
		return nil, err
	}
	return compareRows(ctx, dbName+"."+name, want, cols, keys, tbl)
}

// MySQLSourceRows reads db.table with every column rendered as Render
// renders its Iceberg value, keyed by its primary key: the rows, the
// columns in order and the key columns.
func MySQLSourceRows(ctx context.Context, db *sql.DB, dbName, name string) (Rows, []string, []string, error) {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_KEY = 'PRI'
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, dbName, name)
	if err != nil {
		return nil, nil, nil, err
	}
	var cols, exprs, keys []string
	for rows.Next() {
		var col, typ, full string
		var pk bool
		if err := rows.Scan(&col, &typ, &full, &pk); err != nil {
			rows.Close()
			return nil, nil, nil, err
		}
		cols = append(cols, col)
		if pk {
			keys = append(keys, col)
		}
		expr, err := mysqlExpr("`"+strings.ReplaceAll(col, "`", "``")+"`", typ, full)
		if err != nil {
			rows.Close()
			return nil, nil, nil, fmt.Errorf("mirror: %s.%s.%s: %w", dbName, name, col, err)
		}
		exprs = append(exprs, expr)
	}
	rows.Close()
	if len(cols) == 0 {
		return nil, nil, nil, fmt.Errorf("mirror: %s.%s has no columns (does it exist?)", dbName, name)
	}
	if len(keys) == 0 {
		return nil, nil, nil, fmt.Errorf("mirror: %s.%s has no primary key", dbName, name)
	}
	q := "SELECT " + strings.Join(exprs, ", ") + " FROM `" + dbName + "`.`" + name + "`"
	rows, err = db.QueryContext(ctx, q)
	if err != nil {
		return nil, nil, nil, err
	}
	defer rows.Close()
	out := Rows{}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, nil, nil, err
		}
		row := make(map[string]string, len(cols))
		for i, v := range vals {
			row[cols[i]] = Null
			if v.Valid {
				row[cols[i]] = v.String
			}
		}
		out[keyOf(row, keys)] = row
	}
	return out, cols, keys, rows.Err()
}

// mysqlExpr renders one column in SQL the way Render renders its Iceberg
// value; the types a test table uses (others are refused).
func mysqlExpr(col, typ, full string) (string, error) {
	switch typ {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year", "decimal", "char", "varchar", "text", "mediumtext", "longtext":
		return "CAST(" + col + " AS CHAR)", nil
	case "datetime", "timestamp":
		return "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ") AS CHAR)", nil
	case "date":
		return "CAST(DATEDIFF(" + col + ", '1970-01-01') AS CHAR)", nil
	case "binary", "varbinary", "blob":
		return "LOWER(HEX(" + col + "))", nil
	}
	return "", fmt.Errorf("type %s has no rendering here yet", strconv.Quote(full))
}
