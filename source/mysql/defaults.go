package mysql

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Columns added to a table with rows.
//
// ALTER TABLE … ADD COLUMN gives every row already there a value with no
// row event for it: the column's DEFAULT, the implicit default of a NOT
// NULL column without one (0, '', an ENUM's first label), the value of a
// generated or AUTO_INCREMENT column. Where that value is a constant of
// the information schema's COLUMN_DEFAULT it becomes the column's
// schema.Column.Default, which a sink may give to the rows written before
// the column existed (Iceberg's initial-default, format 3); otherwise, or
// where the sink cannot hold it (Config.KeepsDefault), the table's rows
// are read again (ddl.go reReadAdded).
//
// COLUMN_DEFAULT differs by flavor. MariaDB (10.2.7+) quotes a string
// literal ('red', with '' and backslash escapes), prints NULL for DEFAULT
// NULL and a number, b'101' or an expression (current_timestamp(),
// (1 + 2), rand()) bare. MySQL prints a literal's text bare and marks an
// expression default DEFAULT_GENERATED in EXTRA. Either way only a literal
// that the load's own text parser (fromText) reads becomes a Default: an
// expression, or a text that does not parse (MySQL 5.7's bare
// CURRENT_TIMESTAMP), makes the rows be read again.
//
// A TIMESTAMP default is never carried: its literal is in the time zone of
// the session that inserts, which the information schema does not tell.
// The value is the one COLUMN_DEFAULT shows when the reader reaches the
// DDL statement, not when the statement ran: a later ALTER … SET DEFAULT
// read by a reader that is behind gives the rows the later default. A
// later change of the column's type makes the binlog's shape disagree with
// the information schema's, so the streamed column carries no Default:
// reReadUncarried reads the rows again then.

// columnDefault sets t.HasDefault and t.Default from an information-schema
// row: whether rows that predate the column hold a value that is not NULL
// in the table model, and that value when it is a known constant.
func (t *colType) columnDefault(c infoColumn) {
	t.HasDefault, t.Default = false, nil
	extra := strings.ToUpper(c.Extra)
	if t.Generated || strings.Contains(extra, "AUTO_INCREMENT") {
		t.HasDefault = true // computed per row: read again
		return
	}
	text, ok := defaultText(t, c)
	if !ok {
		t.HasDefault = true // an expression
		return
	}
	if text == nil {
		return // NULL
	}
	v, err := fromText(t, text)
	if err != nil {
		t.HasDefault = true // not a literal the load reads: read again
		return
	}
	if v == nil {
		return // a zero date: NULL in the table model, which the mirror has
	}
	t.HasDefault = true
	if col, err := t.column(); err == nil && schema.DefaultKind(col.Kind) && t.Base != "timestamp" {
		t.Default = v
	}
}

// defaultText is the text protocol's form of the value rows that predate
// column c hold when it is a literal (nil: NULL); ok is false for an
// expression.
func defaultText(t *colType, c infoColumn) (text []byte, ok bool) {
	if !c.Default.Valid {
		if c.Nullable {
			return nil, true
		}
		return implicitDefault(t), true
	}
	d := c.Default.String
	if c.QuotedDefault { // MariaDB
		switch {
		case d == "NULL":
			return nil, true
		case len(d) >= 2 && d[0] == '\'' && d[len(d)-1] == '\'':
			return []byte(unquote(d[1 : len(d)-1])), true
		case strings.HasPrefix(d, "b'") && strings.HasSuffix(d, "'"):
			return bitLiteral(t, d[2:len(d)-1])
		case isNumber(d):
			return []byte(d), true
		}
		return nil, false
	}
	if strings.Contains(strings.ToUpper(c.Extra), "DEFAULT_GENERATED") {
		return nil, false
	}
	if t.Base == "bit" && strings.HasPrefix(d, "b'") && strings.HasSuffix(d, "'") {
		return bitLiteral(t, d[2:len(d)-1])
	}
	return []byte(d), true
}

// implicitDefault is the value a NOT NULL column without a DEFAULT gives
// the rows already there, as the text protocol sends it.
func implicitDefault(t *colType) []byte {
	switch t.Base {
	case "decimal":
		if t.Scale > 0 {
			return []byte("0." + strings.Repeat("0", t.Scale))
		}
		return []byte("0")
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year", "float", "double":
		return []byte("0")
	case "enum":
		if len(t.Values) > 0 {
			return []byte(t.Values[0])
		}
	case "bit":
		return make([]byte, (t.Length+7)/8)
	case "date":
		return []byte("0000-00-00")
	case "datetime", "timestamp":
		return []byte("0000-00-00 00:00:00")
	case "time":
		return []byte("00:00:00")
	case "binary":
		return make([]byte, t.Length)
	}
	return []byte{}
}

// unquote reads the inside of a quoted string literal as MariaDB prints it
// in the information schema: ” for a quote, backslash escapes.
func unquote(s string) string {
	if !strings.ContainsAny(s, `'\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case c == '\\' && i+1 < len(s):
			i++
			switch c = s[i]; c {
			case '0':
				c = 0
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'Z':
				c = 26
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// bitLiteral turns the digits of b'101' into a bit column's bytes.
func bitLiteral(t *colType, digits string) ([]byte, bool) {
	if t.Base != "bit" || digits == "" || len(digits) > 64 {
		return nil, false
	}
	n, err := strconv.ParseUint(digits, 2, 64)
	if err != nil {
		return nil, false
	}
	out := make([]byte, (max(t.Length, 1)+7)/8)
	for i := len(out) - 1; i >= 0; i-- {
		out[i], n = byte(n), n>>8
	}
	return out, true
}

// isNumber reports whether s is a bare numeric literal: [-]digits[.digits][e[±]digits].
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	mant, exp, hasExp := strings.Cut(strings.ToLower(s), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart == "" && frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return false
	}
	if hasExp {
		exp = strings.TrimLeft(exp, "+-")
		return exp != "" && allDigits(exp)
	}
	return true
}

// reReadUncarried queues a re-read of the table when a column that v, a
// new table version, adds to old carries no Default although the
// information schema's column of that name has one the sink keeps:
// reReadAdded took it for carried at the DDL point, but the table map
// disagrees with the information schema (the reader is behind a later
// ALTER of the column), so the sink would add the column without it.
func (s *streamer) reReadUncarried(ctx context.Context, desc *tableDesc, old, v *tableVersion) error {
	qn := desc.qualified()
	if old == nil || s.r.cfg.KeepsDefault == nil || !slices.Contains(s.r.cfg.Tables, qn) { // not the watermark or signal table
		return nil
	}
	for _, c := range v.table.Columns {
		j := desc.table.ColumnIndex(c.Name)
		if c.Default != nil || old.table.ColumnIndex(c.Name) >= 0 || j < 0 {
			continue
		}
		if dc := desc.table.Columns[j]; !desc.cols[j].HasDefault || dc.Default == nil || !s.r.cfg.KeepsDefault(dc) {
			continue
		}
		s.r.logger.Info("a column added with a default now has another type in the information schema than in the binlog, "+
			"so its default cannot be given to the rows already there: reading the table's rows again", "table", qn, "column", c.Name)
		return s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Origin: "added-default"})
	}
	return nil
}
