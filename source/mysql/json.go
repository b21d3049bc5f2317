package mysql

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// mysqlJSONText re-renders the JSON text go-mysql makes of a MySQL binary
// JSON document (Go's encoder: compact, keys in byte order, <>& escaped,
// doubles with a trailing ".0") the way MySQL prints a JSON value: ", "
// and ": " separators, object keys in MySQL's storage order (shorter keys
// first, then by bytes), strings escaped only where JSON requires, doubles
// in their shortest form ("1.5", "3.0", "1e300"). A DECIMAL inside the
// document reaches cdcd as a JSON string (go-mysql renders it so), which
// cannot be told from a string value: such numbers stay strings.
func mysqlJSONText(in []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var b strings.Builder
	if err := renderJSON(dec, &b); err != nil {
		return "", fmt.Errorf("%w: JSON: %v", errBadValue, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("%w: JSON: trailing data", errBadValue)
	}
	return b.String(), nil
}

// renderJSON renders the next value of dec.
func renderJSON(dec *json.Decoder, b *strings.Builder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '[':
			b.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					b.WriteString(", ")
				}
				if err := renderJSON(dec, b); err != nil {
					return err
				}
			}
			_, err := dec.Token() // ]
			b.WriteByte(']')
			return err
		case '{':
			type member struct{ key, val string }
			var ms []member
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return err
				}
				var vb strings.Builder
				if err := renderJSON(dec, &vb); err != nil {
					return err
				}
				ms = append(ms, member{k.(string), vb.String()})
			}
			if _, err := dec.Token(); err != nil { // }
				return err
			}
			sort.Slice(ms, func(i, j int) bool {
				if len(ms[i].key) != len(ms[j].key) {
					return len(ms[i].key) < len(ms[j].key)
				}
				return ms[i].key < ms[j].key
			})
			b.WriteByte('{')
			for i, m := range ms {
				if i > 0 {
					b.WriteString(", ")
				}
				writeJSONString(b, m.key)
				b.WriteString(": ")
				b.WriteString(m.val)
			}
			b.WriteByte('}')
			return nil
		}
	case string:
		writeJSONString(b, t)
	case json.Number:
		b.WriteString(jsonNumber(string(t)))
	case bool:
		b.WriteString(strconv.FormatBool(t))
	case nil:
		b.WriteString("null")
	}
	return nil
}

// jsonNumber renders a number token: integers as they are, doubles (a
// token with '.' or an exponent) in the shortest form that reads back,
// with ".0" on integral values and no '+' in the exponent.
func jsonNumber(s string) string {
	if !strings.ContainsAny(s, ".eE") {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s
	}
	out := strconv.FormatFloat(f, 'g', -1, 64)
	if mant, exp, ok := strings.Cut(out, "e"); ok {
		exp = strings.TrimPrefix(exp, "+")
		neg := strings.HasPrefix(exp, "-")
		exp = strings.TrimLeft(strings.TrimPrefix(exp, "-"), "0")
		if neg {
			exp = "-" + exp
		}
		return mant + "e" + exp
	}
	if !strings.Contains(out, ".") {
		out += ".0"
	}
	return out
}

// writeJSONString quotes s as MySQL does: \" \\ \b \f \n \r \t, other
// control characters as \u00XX, everything else as is.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
}
