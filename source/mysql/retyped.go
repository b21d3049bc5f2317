package mysql

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// ALTER TABLE ... MODIFY (or CHANGE) converts every stored value of the
// column to its new type, and the binlog carries only the statement: no
// row event for the rows converted. Most conversions keep each value (a
// wider VARCHAR, INT to BIGINT), but under a non-strict sql_mode many
// change it with a warning only: a character the new charset lacks
// becomes '?', a string too long for the new length is cut, a number out
// of range is clamped, a NULL in a column made NOT NULL becomes the zero
// value, an ENUM label dropped becomes ''. The mirror would keep the old
// values with no word.
//
// The columns record (columns.go) keeps each column's type; a column whose
// type changed in a way keepsValues does not list restarts an incremental
// snapshot of its table, origin "column-type-changed" (replacing the
// mirror when a key column changed): at the DDL
// statement (refresh, through syncColumns), or at the session's start when
// the change happened while cdcd was stopped. A record saved before types
// were kept has none to compare against: it gains them, and reads nothing.

// columnType is a column's type as the columns record keeps it.
type columnType struct {
	// Type is the information schema's COLUMN_TYPE in lower case, e.g.
	// "varchar(20)", "int(10) unsigned", "enum('a','b')".
	Type    string `json:"type"`
	Charset string `json:"charset,omitempty"`
	Null    bool   `json:"null,omitempty"`
}

// typeOf is c's type as the record keeps it.
func typeOf(c colType) columnType {
	return columnType{Type: strings.ToLower(c.SourceType), Charset: strings.ToLower(c.Charset), Null: c.Nullable}
}

// reReadRetyped restarts an incremental snapshot of table d when a column
// it had when rec was saved has a type now that may have changed its
// stored values (keepsValues).
func (s *streamer) reReadRetyped(ctx context.Context, d *tableDesc, rec *tableColumns) error {
	qn := d.qualified()
	if len(rec.Types) != len(rec.Columns) || !slices.Contains(s.r.cfg.Tables, qn) { // not the watermark or signal table
		return nil
	}
	var cols []string
	keyChanged := false
	for i, c := range d.cols {
		j := slices.Index(rec.Columns, c.Name)
		if j < 0 {
			continue
		}
		was, now := rec.Types[j], typeOf(c)
		if keepsValues(was, now) {
			continue
		}
		s.r.logger.Warn("a captured column's type changed so that stored values may have been converted, with no row event in the binlog for them: reading the table again",
			"table", qn, "column", c.Name, "old_type", was.String(), "new_type", now.String())
		cols = append(cols, c.Name)
		keyChanged = keyChanged || slices.Contains(d.table.Key, i)
	}
	if len(cols) == 0 {
		return nil
	}
	// A key converted (é to '?') leaves the old keys' rows in a mirror
	// that is only upserted: replace it.
	return s.r.inc.Restart(ctx, snapshot.Request{Table: qn, Replace: keyChanged, Origin: "column-type-changed"})
}

// String is t as a column definition would say it.
func (t columnType) String() string {
	out := t.Type
	if t.Charset != "" {
		out += " character set " + t.Charset
	}
	if !t.Null {
		out += " not null"
	}
	return out
}

// parsedType is a COLUMN_TYPE taken apart.
type parsedType struct {
	base     string
	args     []string // inside the parentheses, split at commas outside quotes
	unsigned bool
}

func parseColumnType(s string) parsedType {
	s = strings.ToLower(strings.TrimSpace(s))
	i := strings.IndexAny(s, "( ")
	if i < 0 {
		return parsedType{base: s}
	}
	p := parsedType{base: s[:i]}
	rest := s[i:]
	if strings.HasPrefix(rest, "(") {
		var arg strings.Builder
		quoted := false
	scan:
		for j := 1; j < len(rest); j++ {
			switch ch := rest[j]; {
			case quoted && ch == '\'' && j+1 < len(rest) && rest[j+1] == '\'':
				arg.WriteString("''")
				j++
			case ch == '\'':
				quoted = !quoted
				arg.WriteByte(ch)
			case !quoted && ch == ',':
				p.args = append(p.args, arg.String())
				arg.Reset()
			case !quoted && ch == ')':
				p.args = append(p.args, arg.String())
				rest = rest[j+1:]
				break scan
			default:
				arg.WriteByte(ch)
			}
		}
	}
	p.unsigned = slices.Contains(strings.Fields(rest), "unsigned")
	return p
}

// arg is the n-th argument as a number (def when absent).
func (p parsedType) arg(n, def int) int {
	if n >= len(p.args) {
		return def
	}
	v, err := strconv.Atoi(strings.TrimSpace(p.args[n]))
	if err != nil {
		return def
	}
	return v
}

var intRank = map[string]int{"tinyint": 1, "smallint": 2, "mediumint": 3, "int": 4, "integer": 4, "bigint": 5}

// textBytes and blobBytes are the sizes in bytes of the TEXT and BLOB types.
var textBytes = map[string]int{"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 4294967295}
var blobBytes = map[string]int{"tinyblob": 255, "blob": 65535, "mediumblob": 16777215, "longblob": 4294967295}

// charsetBytes is the most bytes a character takes in a charset.
func charsetBytes(cs string) int {
	switch cs {
	case "ascii", "latin1", "binary":
		return 1
	case "ucs2":
		return 2
	case "utf8", "utf8mb3":
		return 3
	}
	return 4
}

// widerCharset reports whether every character of charset was is in now.
func widerCharset(was, now string) bool {
	if was == "utf8" { // MariaDB 10.6 and MySQL 8.0.30 renamed it
		was = "utf8mb3"
	}
	if now == "utf8" {
		now = "utf8mb3"
	}
	switch {
	case was == now, was == "ascii":
		return true
	case was == "latin1" && now == "utf8mb3":
		return true // cp1252's characters are all in the BMP
	case was == "latin1", was == "utf8mb3":
		return now == "utf8mb4"
	}
	return false
}

// keepsValues reports whether changing a column's type from was to now
// keeps every value the column can hold as it was: a conversion the
// server can make without a change to any value, under any sql_mode. What
// it does not list (a shorter string, another charset, a narrower number,
// NOT NULL added, an ENUM label gone, any change between families) may
// change values, and the table is read again. It errs towards reading.
func keepsValues(was, now columnType) bool {
	if was == now {
		return true
	}
	if was.Null && !now.Null {
		return false // NULLs become the type's zero value
	}
	if was.Type == now.Type && was.Charset == now.Charset {
		return true // NOT NULL dropped
	}
	a, b := parseColumnType(was.Type), parseColumnType(now.Type)
	if !a.unsigned && b.unsigned {
		return false // negatives are clamped to 0
	}
	switch {
	case intRank[a.base] > 0 && intRank[b.base] > 0:
		if a.unsigned && !b.unsigned {
			return intRank[b.base] > intRank[a.base]
		}
		return intRank[b.base] >= intRank[a.base]
	case a.base == "decimal" && b.base == "decimal":
		// The same scale, at least as many digits before the point.
		return a.arg(1, 0) == b.arg(1, 0) && b.arg(0, 10) >= a.arg(0, 10)
	case a.base == "float" && len(a.args) == 0:
		return b.base == "double" && len(b.args) == 0 || b.base == "float" && len(b.args) == 0
	case a.base == "bit" && b.base == "bit":
		return b.arg(0, 1) >= a.arg(0, 1)
	case a.base == b.base && (a.base == "datetime" || a.base == "time" || a.base == "timestamp"):
		return b.arg(0, 0) >= a.arg(0, 0)
	case (a.base == "enum" || a.base == "set") && a.base == b.base:
		for _, label := range a.args {
			if !slices.Contains(b.args, label) {
				return false // a value holding it becomes '' (or loses the member)
			}
		}
		return true
	case isString(a.base) && isString(b.base):
		if !widerCharset(was.Charset, now.Charset) {
			return false
		}
		if b.base == "char" {
			// CHAR strips trailing spaces: only a wider CHAR keeps them all.
			return a.base == "char" && b.arg(0, 1) >= a.arg(0, 1)
		}
		return stringRoom(b, now.Charset) >= stringRoom(a, "binary")
	case isBinary(a.base) && isBinary(b.base):
		if b.base == "binary" {
			return false // pads with zero bytes, or cuts
		}
		return binaryRoom(b) >= binaryRoom(a)
	}
	return false
}

func isString(base string) bool {
	return base == "char" || base == "varchar" || textBytes[base] > 0
}

func isBinary(base string) bool {
	return base == "binary" || base == "varbinary" || blobBytes[base] > 0
}

// stringRoom is how many characters of charset cs a string type holds for
// sure: CHAR(n) and VARCHAR(n) n, a TEXT its bytes over the charset's
// widest character. Of "binary" (one byte a character) it is the most a
// type can hold, which the new type's room must reach.
func stringRoom(p parsedType, cs string) int {
	if n := textBytes[p.base]; n > 0 {
		return n / charsetBytes(cs)
	}
	return p.arg(0, 1)
}

// binaryRoom is how many bytes a binary type holds.
func binaryRoom(p parsedType) int {
	if n := blobBytes[p.base]; n > 0 {
		return n
	}
	return p.arg(0, 1)
}
