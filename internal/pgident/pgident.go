// Package pgident parses PostgreSQL table names as cdcd's config writes
// them, and maps them to topic and Iceberg names.
//
// A name is "table" (in schema public) or "schema.table"; each part is
// either unquoted — letters, digits, _ and $, not starting with a digit,
// taken exactly as written (cdcd keeps case, unlike SQL, which folds it) —
// or double-quoted, holding any characters but NUL, with "" for a quote:
// public."Order Items", "Bestellpositionen"."Größe". The canonical form
// (Canonical) quotes every part that is not lower-case letters, digits, _
// and $, so it reads the same in SQL.
//
// Topic names allow only [A-Za-z0-9._-] (Kafka's rule) and Iceberg names
// are best plain for SQL engines, so each part is mapped (TopicPart,
// IcebergPart): characters the target does not take become '_', one per
// character. Two tables may then map to one name; config validation
// refuses that.
package pgident

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// MaxLen is PostgreSQL's identifier limit (NAMEDATALEN - 1) in bytes.
const MaxLen = 63

// DefaultSchema holds tables named without a schema.
const DefaultSchema = "public"

// ErrSyntax: a name that does not parse.
var ErrSyntax = errors.New("pgident: not a table name")

// Split parses name into its schema and table, unquoted.
func Split(name string) (schema, table string, err error) {
	var parts []string
	rest := name
	for {
		part, n, err := parsePart(rest)
		if err != nil {
			return "", "", fmt.Errorf("%w: %q: %v", ErrSyntax, name, err)
		}
		parts = append(parts, part)
		rest = rest[n:]
		if rest == "" {
			break
		}
		if rest[0] != '.' || len(parts) == 2 {
			return "", "", fmt.Errorf("%w: %q: write schema.table, quoting a part that has other characters than letters, digits, _ and $ (\"Order Items\")", ErrSyntax, name)
		}
		rest = rest[1:]
	}
	if len(parts) == 1 {
		return DefaultSchema, parts[0], nil
	}
	return parts[0], parts[1], nil
}

// parsePart reads one part at the start of s and returns it and the bytes
// it took.
func parsePart(s string) (string, int, error) {
	if strings.HasPrefix(s, `"`) {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			switch {
			case s[i] == '"' && i+1 < len(s) && s[i+1] == '"':
				b.WriteByte('"')
				i++
			case s[i] == '"':
				return checkPart(b.String(), i+1)
			case s[i] == 0:
				return "", 0, errors.New("a NUL byte in a name")
			default:
				b.WriteByte(s[i])
			}
		}
		return "", 0, errors.New("a quoted part does not end with \"")
	}
	n := 0
	for n < len(s) && s[n] != '.' {
		c := s[n]
		if !(c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' && n > 0) {
			return "", 0, fmt.Errorf("%q needs quotes", s[:strings.IndexByte(s+".", '.')])
		}
		n++
	}
	return checkPart(s[:n], n)
}

func checkPart(p string, n int) (string, int, error) {
	switch {
	case p == "":
		return "", 0, errors.New("an empty part")
	case len(p) > MaxLen:
		return "", 0, fmt.Errorf("%q is longer than PostgreSQL's %d bytes", p, MaxLen)
	}
	return p, n, nil
}

// Canonical writes schema.table, quoting the parts that need it in SQL.
func Canonical(schema, table string) string { return Quote(schema) + "." + Quote(table) }

// Normalize returns name in canonical form, or name itself when it does
// not parse (validation reports it).
func Normalize(name string) string {
	s, t, err := Split(name)
	if err != nil {
		return name
	}
	return Canonical(s, t)
}

// Quote returns p as written in SQL: as is when it is lower-case letters,
// digits, _ and $ not starting with a digit, else double-quoted.
func Quote(p string) string {
	plain := p != ""
	for i := 0; i < len(p) && plain; i++ {
		c := p[i]
		plain = c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' && i > 0
	}
	if plain {
		return p
	}
	return `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
}

// TopicPart maps a name part into a topic name: A-Z, a-z, 0-9, _, - and $
// stay; every other character becomes '_'. ($ is kept for the topics of
// existing pipelines; the embedded log takes it.)
func TopicPart(p string) string {
	return strings.Map(func(r rune) rune {
		if r < 128 && (r == '_' || r == '-' || r == '$' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, p)
}

// IcebergPart maps a name part into an Iceberg table name: letters and
// digits of any script, _ and $ stay; every other character (a space,
// punctuation) becomes '_'.
func IcebergPart(p string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return '_'
	}, p)
}
