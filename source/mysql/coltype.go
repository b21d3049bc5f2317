package mysql

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/schema"
)

// colType is a column's type in one form that both the binlog's table map
// and the information schema fill in, so the stream and the load map a
// column, and decode its values, through the same code.
type colType struct {
	Name string
	// Base is the type family: tinyint smallint mediumint int bigint
	// decimal float double bit year date time datetime timestamp char
	// varchar text binary varbinary blob enum set json geometry.
	Base     string
	Unsigned bool
	// Precision and Scale of a decimal.
	Precision, Scale int
	// FSP is the fractional-second digits of time, datetime, timestamp.
	FSP int
	// Length is the bits of a bit column and the bytes of a binary(n).
	Length int
	// MaxBytes is the declared size in bytes of a char, varchar or
	// varbinary in a table map (only for SourceType).
	MaxBytes int
	// Charset of char, varchar and text ("binary" never: those are
	// binary, varbinary, blob).
	Charset string
	// Values are the labels of an enum or set, in definition order.
	Values   []string
	Nullable bool
	// Generated is set for a VIRTUAL or STORED generated column (from the
	// information schema).
	Generated bool
	// SourceType is the type as the server prints it, e.g.
	// "decimal(10,2) unsigned".
	SourceType string
	// binaryJSON marks MySQL's JSON type, which the binlog carries as a
	// binary document (MariaDB's JSON is text).
	binaryJSON bool
	// HasDefault: rows that predate the column hold a value that is not
	// NULL in the table model (defaults.go); Default is that value when it
	// is a constant of a kind schema.Column.Default holds.
	HasDefault bool
	Default    any
}

// errUnsupportedType is wrapped by every "type not supported" error.
var errUnsupportedType = errors.New("mysql: unsupported column type")

// column is the table-model column of t.
func (t *colType) column() (schema.Column, error) {
	c := schema.Column{Name: t.Name, Nullable: t.Nullable, SourceType: t.SourceType}
	switch t.Base {
	case "tinyint":
		c.Kind = schema.Int16
	case "smallint":
		c.Kind = schema.Int16
		if t.Unsigned {
			c.Kind = schema.Int32
		}
	case "mediumint":
		c.Kind = schema.Int32
	case "int":
		c.Kind = schema.Int32
		if t.Unsigned {
			c.Kind = schema.Int64
		}
	case "bigint":
		c.Kind = schema.Int64
		if t.Unsigned {
			c.Kind, c.Precision = schema.Decimal, 20 // up to 18446744073709551615, exact
		}
	case "decimal":
		c.Kind, c.Precision, c.Scale = schema.Decimal, t.Precision, t.Scale
	case "float":
		c.Kind = schema.Float32
	case "double":
		c.Kind = schema.Float64
	case "bit":
		c.Kind = schema.Bytes
		if t.Length == 1 {
			c.Kind = schema.Bool
		}
	case "year":
		c.Kind = schema.Int16
	case "date":
		c.Kind, c.Nullable = schema.Date, true // zero dates are NULL
	case "time":
		c.Kind = schema.Interval // -838:59:59 .. 838:59:59
	case "datetime":
		c.Kind, c.Nullable = schema.Timestamp, true
	case "timestamp":
		c.Kind, c.Nullable = schema.TimestampTZ, true
	case "char", "varchar", "text", "enum", "set":
		c.Kind = schema.String
	case "binary", "varbinary", "blob", "geometry":
		c.Kind = schema.Bytes
	case "json":
		c.Kind = schema.JSON
	default:
		return c, fmt.Errorf("%w: %s", errUnsupportedType, t.SourceType)
	}
	if (t.Base == "char" || t.Base == "varchar" || t.Base == "text") && decoderFor(t.Charset) == nil {
		return c, fmt.Errorf("%w: character set %s (cdcd reads utf8mb4, utf8mb3, ascii and latin1): "+
			"ALTER TABLE … MODIFY the column to CHARACTER SET utf8mb4, or exclude the table", errUnsupportedType, t.Charset)
	}
	c.Default = t.Default
	return c, nil
}

// collations maps a collation id to its character set, as the server
// lists them (information_schema.COLLATIONS).
type collations map[uint64]string

// fromTableMap describes column i of a table map event written with
// binlog_row_metadata=FULL. Names, signedness, character sets and enum and
// set labels come from its optional metadata.
func fromTableMap(tm *replication.TableMapEvent, i int, colls collations) (colType, error) {
	names := tm.ColumnNameString()
	if len(names) != int(tm.ColumnCount) {
		return colType{}, errNoMetadata
	}
	t := colType{Name: names[i]}
	_, t.Nullable = tm.Nullable(i)
	meta := tm.ColumnMeta[i]
	typ := tm.ColumnType[i]
	charset := func(m map[int]uint64) string {
		if id, ok := m[i]; ok {
			if cs, ok := colls[id]; ok {
				return cs
			}
			return fmt.Sprintf("collation %d", id)
		}
		return ""
	}
	textOrBinary := func(text, bin string) {
		t.Charset = charset(tm.CollationMap())
		if t.Charset == "binary" {
			t.Base, t.Charset = bin, ""
		} else {
			t.Base = text
		}
	}
	switch typ {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG, gomysql.MYSQL_TYPE_LONGLONG:
		t.Base = map[byte]string{gomysql.MYSQL_TYPE_TINY: "tinyint", gomysql.MYSQL_TYPE_SHORT: "smallint",
			gomysql.MYSQL_TYPE_INT24: "mediumint", gomysql.MYSQL_TYPE_LONG: "int", gomysql.MYSQL_TYPE_LONGLONG: "bigint"}[typ]
		t.Unsigned = tm.UnsignedMap()[i]
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		t.Base, t.Precision, t.Scale = "decimal", int(meta>>8), int(meta&0xff)
		t.Unsigned = tm.UnsignedMap()[i]
	case gomysql.MYSQL_TYPE_FLOAT:
		t.Base = "float"
	case gomysql.MYSQL_TYPE_DOUBLE:
		t.Base = "double"
	case gomysql.MYSQL_TYPE_BIT:
		t.Base, t.Length = "bit", int(meta>>8)*8+int(meta&0xff)
	case gomysql.MYSQL_TYPE_YEAR:
		t.Base = "year"
	case gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_NEWDATE:
		t.Base = "date"
	case gomysql.MYSQL_TYPE_TIME:
		t.Base = "time"
	case gomysql.MYSQL_TYPE_TIME2:
		t.Base, t.FSP = "time", int(meta)
	case gomysql.MYSQL_TYPE_DATETIME:
		t.Base = "datetime"
	case gomysql.MYSQL_TYPE_DATETIME2:
		t.Base, t.FSP = "datetime", int(meta)
	case gomysql.MYSQL_TYPE_TIMESTAMP:
		t.Base = "timestamp"
	case gomysql.MYSQL_TYPE_TIMESTAMP2:
		t.Base, t.FSP = "timestamp", int(meta)
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_VAR_STRING:
		textOrBinary("varchar", "varbinary")
		t.MaxBytes = int(meta)
	case gomysql.MYSQL_TYPE_BLOB:
		textOrBinary("text", "blob")
	case gomysql.MYSQL_TYPE_JSON:
		t.Base, t.binaryJSON = "json", true
	case gomysql.MYSQL_TYPE_GEOMETRY:
		t.Base = "geometry"
	case gomysql.MYSQL_TYPE_STRING:
		real, length := stringMeta(meta)
		switch real {
		case gomysql.MYSQL_TYPE_ENUM:
			t.Base, t.Values = "enum", tm.EnumStrValueMap()[i]
		case gomysql.MYSQL_TYPE_SET:
			t.Base, t.Values = "set", tm.SetStrValueMap()[i]
		default:
			textOrBinary("char", "binary")
			t.MaxBytes = length
			if t.Base == "binary" {
				t.Length = length
			}
		}
	default:
		return t, fmt.Errorf("%w: binlog type code %d", errUnsupportedType, typ)
	}
	t.SourceType = t.defaultSourceType()
	return t, nil
}

// stringMeta splits the metadata of a MYSQL_TYPE_STRING column into its
// real type (string, enum or set) and its length in bytes (as the server
// packs it: Field_string::do_save_field_metadata).
func stringMeta(meta uint16) (real byte, length int) {
	if meta < 256 {
		return gomysql.MYSQL_TYPE_STRING, int(meta)
	}
	b0, b1 := byte(meta>>8), byte(meta)
	if b0&0x30 != 0x30 {
		return b0 | 0x30, int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
	}
	return b0, int(b1)
}

// defaultSourceType renders t the way the server prints the type, as far
// as a table map tells (the information schema's COLUMN_TYPE replaces it
// where the two agree).
func (t *colType) defaultSourceType() string {
	s := t.Base
	switch t.Base {
	case "decimal":
		s = fmt.Sprintf("decimal(%d,%d)", t.Precision, t.Scale)
	case "bit", "binary":
		s = fmt.Sprintf("%s(%d)", t.Base, t.Length)
	case "char", "varchar", "varbinary":
		if n := t.MaxBytes / bytesPerChar(t.Charset); n > 0 {
			s = fmt.Sprintf("%s(%d)", t.Base, n)
		}
	case "time", "datetime", "timestamp":
		if t.FSP > 0 {
			s = fmt.Sprintf("%s(%d)", t.Base, t.FSP)
		}
	case "enum", "set":
		q := make([]string, len(t.Values))
		for i, v := range t.Values {
			q[i] = "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
		s = t.Base + "(" + strings.Join(q, ",") + ")"
	}
	if t.Unsigned {
		s += " unsigned"
	}
	return s
}

// infoColumn is one row of information_schema.COLUMNS (plus whether a
// MariaDB CHECK (json_valid(col)) makes a longtext a JSON column).
type infoColumn struct {
	Name, DataType, ColumnType, Charset, Extra string
	Nullable                                   bool
	Precision, Scale, FSP, OctetLength         int64
	JSONCheck                                  bool
	// Default is COLUMN_DEFAULT; QuotedDefault: in MariaDB's form, where a
	// string literal is quoted and NULL is the text NULL (defaults.go).
	Default       sql.NullString
	QuotedDefault bool
}

// fromInfo describes a column as the information schema gives it.
func fromInfo(c infoColumn) (colType, error) {
	extra := strings.ToUpper(c.Extra)
	t := colType{Name: c.Name, Nullable: c.Nullable, SourceType: c.ColumnType, Charset: c.Charset,
		Unsigned: strings.Contains(c.ColumnType, "unsigned"),
		// Not MySQL's DEFAULT_GENERATED (an expression default).
		Generated: strings.Contains(extra, "VIRTUAL GENERATED") || strings.Contains(extra, "STORED GENERATED")}
	dt := strings.ToLower(c.DataType)
	switch dt {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "float", "double", "year", "date", "json", "enum", "set",
		"char", "varchar", "binary", "varbinary":
		t.Base = dt
	case "integer":
		t.Base = "int"
	case "decimal", "numeric":
		t.Base, t.Precision, t.Scale = "decimal", int(c.Precision), int(c.Scale)
	case "real":
		t.Base = "double"
	case "bit":
		t.Base, t.Length = "bit", int(c.Precision)
	case "time", "datetime", "timestamp":
		t.Base, t.FSP = dt, int(c.FSP)
	case "tinytext", "text", "mediumtext", "longtext":
		t.Base = "text"
		if c.JSONCheck {
			t.Base = "json"
		}
	case "tinyblob", "blob", "mediumblob", "longblob":
		t.Base = "blob"
	case "geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
		"geometrycollection", "geomcollection":
		t.Base = "geometry"
	default:
		return t, fmt.Errorf("%w: %s", errUnsupportedType, c.ColumnType)
	}
	switch t.Base {
	case "binary":
		t.Length = int(c.OctetLength)
	case "enum", "set":
		vals, err := parseLabels(c.ColumnType)
		if err != nil {
			return t, err
		}
		t.Values = vals
	}
	if t.Base != "char" && t.Base != "varchar" && t.Base != "text" {
		t.Charset = ""
	}
	t.columnDefault(c)
	return t, nil
}

// parseLabels reads the labels of "enum('a','b”c')" or "set(...)".
func parseLabels(ct string) ([]string, error) {
	open := strings.IndexByte(ct, '(')
	if open < 0 || !strings.HasSuffix(ct, ")") {
		return nil, fmt.Errorf("mysql: cannot read the labels of %q", ct)
	}
	s := ct[open+1 : len(ct)-1]
	var vals []string
	for len(s) > 0 {
		if s[0] != '\'' {
			return nil, fmt.Errorf("mysql: cannot read the labels of %q", ct)
		}
		var b strings.Builder
		i := 1
		for ; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				break
			}
			if s[i] == '\\' && i+1 < len(s) {
				i++
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return nil, fmt.Errorf("mysql: cannot read the labels of %q", ct)
		}
		vals = append(vals, b.String())
		s = s[i+1:]
		if len(s) > 0 {
			if s[0] != ',' {
				return nil, fmt.Errorf("mysql: cannot read the labels of %q", ct)
			}
			s = s[1:]
		}
	}
	return vals, nil
}

// sameType reports whether a table map's view of a column (b) agrees with
// the information schema's (i): then i's extras (source type, JSON-ness of
// a MariaDB longtext, generated) may be trusted for it.
func sameType(b, i colType) bool {
	if b.Name != i.Name {
		return false
	}
	if b.Base == "text" && i.Base == "json" {
		return true
	}
	return b.Base == i.Base && b.Unsigned == i.Unsigned && b.Precision == i.Precision && b.Scale == i.Scale &&
		b.FSP == i.FSP && b.Length == i.Length && strings.EqualFold(b.Charset, i.Charset)
}

// bytesPerChar is the most bytes a character takes in charset.
func bytesPerChar(charset string) int {
	switch strings.ToLower(charset) {
	case "utf8mb4":
		return 4
	case "utf8mb3", "utf8":
		return 3
	}
	return 1
}
