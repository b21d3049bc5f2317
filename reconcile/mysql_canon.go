package reconcile

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/iceberg-go"
)

// myColumn is a column as the information schema describes it.
type myColumn struct {
	name, dataType, columnType, collation string
	precision                             int64
	key                                   int64 // position in the primary key, 0 when not a key column
}

// Describe looks the table up and matches its columns with the mirror's.
func (m *MySQL) Describe(ctx context.Context, name string, mirror []MirrorColumn, mask map[string]string) (*Table, error) {
	db, tbl, ok := strings.Cut(name, ".")
	if !ok {
		return nil, fmt.Errorf("reconcile: %q is not database.table", name)
	}
	rows, err := m.read.QueryContext(ctx, `
		SELECT c.COLUMN_NAME, LOWER(c.DATA_TYPE), LOWER(c.COLUMN_TYPE), COALESCE(c.COLLATION_NAME, ''),
			COALESCE(c.NUMERIC_PRECISION, 0),
			COALESCE((SELECT s.SEQ_IN_INDEX FROM information_schema.STATISTICS s WHERE s.TABLE_SCHEMA = c.TABLE_SCHEMA
				AND s.TABLE_NAME = c.TABLE_NAME AND s.INDEX_NAME = 'PRIMARY' AND s.COLUMN_NAME = c.COLUMN_NAME), 0)
		FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = ? AND c.TABLE_NAME = ? ORDER BY c.ORDINAL_POSITION`, db, tbl)
	if err != nil {
		return nil, fmt.Errorf("reconcile: describe %s: %w", name, err)
	}
	defer rows.Close()
	var cols []myColumn
	for rows.Next() {
		var c myColumn
		if err := rows.Scan(&c.name, &c.dataType, &c.columnType, &c.collation, &c.precision, &c.key); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: describe %s: %w", name, err)
	}
	if len(cols) == 0 {
		return nil, fmt.Errorf("reconcile: %s: no such table at the source", name)
	}
	return myTable(name, myQuote(db)+"."+myQuote(tbl), cols, mirror, mask)
}

// myTable builds the Table from the information schema's columns.
func myTable(name, quoted string, cols []myColumn, mirror []MirrorColumn, mask map[string]string) (*Table, error) {
	t := &Table{Name: name, SQL: quoted, Ordered: true}
	keys := map[int]int{}
	for _, c := range cols {
		if why, ok := mask[c.name]; ok && c.key == 0 {
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: why})
			continue
		}
		mi := mirrorIndex(mirror, c.name)
		if mi < 0 {
			if c.key > 0 {
				return nil, fmt.Errorf("reconcile: %s: the Iceberg table has no key column %q", name, c.name)
			}
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: "not in the Iceberg table"})
			continue
		}
		col, err := myCanonColumn(c, mirror[mi].Type)
		if err == nil && c.key > 0 {
			err = myKeyColumn(col, c)
		}
		if err != nil {
			if c.key > 0 {
				return nil, fmt.Errorf("reconcile: %s key column %q: %w", name, c.name, err)
			}
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: err.Error()})
			continue
		}
		col.Mirror = mi
		if c.key > 0 {
			if col.Collated {
				t.Ordered = false
			}
			keys[int(c.key)] = len(t.Columns)
		}
		t.Columns = append(t.Columns, col)
	}
	if err := t.setKey(name, keys, "has no primary key"); err != nil {
		return nil, err
	}
	return t, nil
}

func myQuote(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

var (
	myInts  = map[string]bool{"tinyint": true, "smallint": true, "mediumint": true, "int": true, "integer": true, "bigint": true, "year": true}
	myTexts = map[string]bool{"char": true, "varchar": true, "tinytext": true, "text": true, "mediumtext": true, "longtext": true,
		"enum": true, "set": true, "json": true}
	myBinaries = map[string]bool{"binary": true, "varbinary": true, "tinyblob": true, "blob": true, "mediumblob": true, "longblob": true}
	myGeoms    = map[string]bool{"geometry": true, "point": true, "linestring": true, "polygon": true, "multipoint": true,
		"multilinestring": true, "multipolygon": true, "geometrycollection": true, "geomcollection": true}
)

// myCanonColumn picks the SQL of a column's canonical text (canon.go) from
// its type and the Iceberg type its values are read back as
// (docs/types.md's MySQL table).
func myCanonColumn(c myColumn, it iceberg.Type) (*Column, error) {
	kind, scale, _, err := canonFor(it)
	if err != nil {
		return nil, err
	}
	col := &Column{Name: c.name, Canon: kind, Scale: scale}
	q, dt := myQuote(c.name), c.dataType
	col.Show = "CAST(" + q + " AS CHAR)"
	mismatch := fmt.Errorf("a %s column read back as Iceberg %s: no comparison for it", c.columnType, it)
	switch {
	case kind == cInt && myInts[dt]:
		col.SQL = "CAST(" + q + " AS SIGNED)"
	case kind == cBool && dt == "bit":
		col.SQL = "CASE WHEN " + q + " IS NULL THEN NULL WHEN " + q + "+0 <> 0 THEN 'true' ELSE 'false' END"
		col.Show = "CAST(" + q + "+0 AS CHAR)"
	case kind == cDecimal && (dt == "decimal" || dt == "bigint"):
		col.SQL = "CAST(" + q + " AS CHAR)"
	case kind == cText && (myTexts[dt] || dt == "decimal"):
		col.SQL = myLenText("CONVERT(" + q + " USING utf8mb4)")
	case kind == cText && dt == "time":
		col.SQL = myLenText(myISOTime(q))
	case kind == cBytes && myBinaries[dt]:
		col.SQL = "LOWER(HEX(" + q + "))"
		col.Show = "CONCAT('0x', HEX(" + q + "))"
	case kind == cBytes && dt == "bit":
		col.SQL = fmt.Sprintf("LPAD(LOWER(HEX(%s+0)), %d, '0')", q, 2*((c.precision+7)/8))
		col.Show = "CONCAT('0x', HEX(" + q + "+0))"
	case kind == cBytes && myGeoms[dt]:
		col.SQL = "LOWER(HEX(ST_AsBinary(" + q + ")))"
		col.Show = "ST_AsText(" + q + ")"
	case kind == cDate && dt == "date":
		// TO_DAYS is NULL for a zero date, which cdcd reads as NULL.
		col.SQL = "LPAD(LOWER(HEX((TO_DAYS(" + q + ") - TO_DAYS('2000-01-01')) & 0xFFFFFFFF)), 8, '0')"
	case kind == cTimestamp && (dt == "datetime" || dt == "timestamp"):
		// The session's time zone is UTC (mysql.OpenDB): a TIMESTAMP reads as UTC.
		col.SQL = "LPAD(LOWER(HEX(((TO_SECONDS(" + q + ") - TO_SECONDS('2000-01-01 00:00:00')) * 1000000 + MICROSECOND(" + q +
			")) & 0xFFFFFFFFFFFFFFFF)), 16, '0')"
	case (kind == cFloat32 || kind == cFloat64) && (dt == "float" || dt == "double"):
		// A FLOAT widened to a double exactly, as the load reads it
		// (docs/types.md); its own text is rounded to 6 digits.
		col.Canon, col.SQL = cFloatDec, myFloatDec("CAST(CAST("+q+" AS DOUBLE) AS CHAR)")
		if dt == "double" {
			col.SQL = myFloatDec("CAST(" + q + " AS CHAR)")
		}
	default:
		return nil, mismatch
	}
	return col, nil
}

// myFloatDec is the SQL of a float's floatdec text (canon.go) from s, the
// server's shortest text of it ("-0.00001", "1.5e-7", "1e15", "123"):
// its digits without the point and the zeros around them, "e", and the
// exponent of 0.DIGITS — the integer part's length, plus the exponent
// written, less the leading zeros.
func myFloatDec(s string) string {
	u := "TRIM(LEADING '-' FROM " + s + ")"
	m := "SUBSTRING_INDEX(" + u + ", 'e', 1)"
	digits := "REPLACE(" + m + ", '.', '')"
	sig := "TRIM(TRAILING '0' FROM TRIM(LEADING '0' FROM " + digits + "))"
	exp := "CAST(LENGTH(SUBSTRING_INDEX(" + m + ", '.', 1)) AS SIGNED) + IF(LOCATE('e', " + u + ") > 0, CAST(SUBSTRING_INDEX(" + u +
		", 'e', -1) AS SIGNED), 0) - CAST(LENGTH(" + digits + ") - LENGTH(TRIM(LEADING '0' FROM " + digits + ")) AS SIGNED)"
	return "CASE WHEN " + s + " IS NULL THEN NULL WHEN " + sig + " = '' THEN '0' ELSE CONCAT(IF(LEFT(" + s + ", 1) = '-', '-', ''), " +
		sig + ", 'e', " + exp + ") END"
}

// myLenText is the canonical text of a text: its byte length, ":", the text.
func myLenText(x string) string { return "CONCAT(LENGTH(" + x + "), ':', " + x + ")" }

// myISOTime is the SQL of a TIME's ISO 8601 duration as cdcd writes it
// (schema.IntervalValue.String: "PT-838H59M59S", each part with its sign,
// "PT0S" for zero). HOUR, MINUTE, SECOND and MICROSECOND of a negative
// TIME are the magnitude's.
func myISOTime(q string) string {
	sg := "IF(" + q + " < TIME'00:00:00', '-', '')"
	h, mi, s, f := "HOUR("+q+")", "MINUTE("+q+")", "SECOND("+q+")", "MICROSECOND("+q+")"
	return "CASE WHEN " + q + " IS NULL THEN NULL WHEN " + q + " = TIME'00:00:00' THEN 'PT0S' ELSE CONCAT('PT'," +
		"IF(" + h + " > 0, CONCAT(" + sg + ", " + h + ", 'H'), '')," +
		"IF(" + mi + " > 0, CONCAT(" + sg + ", " + mi + ", 'M'), '')," +
		"IF(" + s + " > 0 OR " + f + " > 0, CONCAT(" + sg + ", " + s + ", IF(" + f + " > 0, CONCAT('.', TRIM(TRAILING '0' FROM LPAD(" + f + ", 6, '0'))), ''), 'S'), '')) END"
}

// myKeyColumn sets a key column's literal SQL (Lit: its text, which
// display.go's literal also derives from the canonical text) and the SQL
// that reads a literal back (Type: "?" stands for it), and whether its
// order is the database's collation rather than cdcd's (compareKeys).
func myKeyColumn(col *Column, c myColumn) error {
	q, dt := myQuote(c.name), c.dataType
	switch {
	case col.Canon == cInt:
		col.Lit, col.Type = col.SQL, "CAST(? AS SIGNED)"
		if strings.Contains(c.columnType, "unsigned") {
			col.Type = "CAST(? AS UNSIGNED)"
		}
	case col.Canon == cDecimal && dt == "bigint":
		col.Lit, col.Type = col.SQL, "CAST(? AS UNSIGNED)"
	case col.Canon == cDecimal:
		col.Lit, col.Type = col.SQL, "CAST(? AS DECIMAL(65,30))"
	case col.Canon == cText && (dt == "char" || dt == "varchar" || strings.HasSuffix(dt, "text")):
		col.Lit, col.Type = "CONVERT("+q+" USING utf8mb4)", "?"
		col.Collated = !(strings.HasSuffix(c.collation, "_nopad_bin") || c.collation == "utf8mb4_0900_bin")
	case col.Canon == cBytes && myBinaries[dt]:
		col.Lit, col.Type = "CONCAT('\\\\x', LOWER(HEX("+q+")))", "UNHEX(SUBSTRING(?, 3))"
	case col.Canon == cDate:
		col.Lit, col.Type = "CAST("+q+" AS CHAR)", "CAST(? AS DATE)"
	case col.Canon == cTimestamp:
		col.Lit, col.Type = "CAST("+q+" AS CHAR)", "CAST(? AS DATETIME(6))"
	default:
		return fmt.Errorf("a %s key: cdcd reconcile cannot read %s keys by range", c.columnType, dt)
	}
	return nil
}
