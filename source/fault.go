package source

import (
	"fmt"
	"unicode/utf8"
)

// ValueFix is the fix of a fault of one value of table: the change is in
// the database's log already, so changing the row or the column cannot
// reach it. hint, when not empty, says what to change in the source before
// a re-snapshot (e.g. the column's type).
func ValueFix(table, hint string) string {
	if hint != "" {
		hint = " (" + hint + ")"
	}
	return fmt.Sprintf("the change is already in the database's log, so altering the column or the row cannot help it. Either skip it: "+
		"cdcd table skip -c FILE %s (it moves to a dead-letter topic, which cdcd log consume shows, and the table's later changes flow); "+
		"or fix the source row or column%s and re-snapshot the table: cdcd snapshot -c FILE --replace %s; "+
		"or remove the table from the config's tables and restart", table, hint, table)
}

// Printable returns s with each byte that is not valid UTF-8 written as
// the four characters \xNN, for messages and JSON.
func Printable(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var out []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			out = fmt.Appendf(out, `\x%02x`, s[i])
			i++
			continue
		}
		out = append(out, s[i:i+n]...)
		i += n
	}
	return string(out)
}
