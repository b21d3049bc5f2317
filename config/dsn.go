package config

import (
	"net/url"
	"strings"
)

// Secrets inside URLs and DSNs.
//
// A ${NAME} reference inside a DSN or URL (the keys tagged secret:"true")
// is escaped into its place, so a password holding @ / # ? : % ' \ or a
// space is read back whole by the database driver instead of splitting the
// string elsewhere (a piece of the password taken for the host name and
// looked up over DNS):
//
//	URL user info and query values   percent-encoded (all but A-Z a-z 0-9 - . _ ~)
//	key=value values                 \ before \, ' and white space; an empty value quoted
//
// A whole DSN taken from one variable (dsn: ${PG_DSN}) is used as it is.
// The checks below follow libpq's (and pgx's) parsers, so that a DSN that
// would be misread is refused by validate, and their messages never echo
// the DSN: it may hold a password.

// dsnEscaper returns how to escape the values expanded into the DSN or URL
// template s; nil when s is neither a URL nor key=value pairs.
func dsnEscaper(s string) escaper {
	if i := strings.Index(s, "://"); i >= 0 && scheme(s) != "" {
		return urlEscaper(s, i+len("://"))
	}
	if strings.Contains(s, "=") {
		return kvEscaper(s)
	}
	return nil
}

// urlEscaper percent-encodes values expanded into the user info or the
// query of the URL template s, whose authority starts at start. The user
// info ends at the first @ before any / (libpq's rule; net/url takes the
// last @, which also works for an escaped value). A reference's own text
// holds none of @ / ? #, so the template's delimiters are the user's.
func urlEscaper(s string, start int) escaper {
	rest := s[start:]
	userEnd := -1
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		userEnd = start + i
	}
	query := strings.IndexByte(rest, '?')
	if query >= 0 {
		query += start
	}
	return func(refStart, _ int, val string) string {
		if refStart >= start && refStart < userEnd || query >= 0 && refStart > query {
			return pctEncode(val)
		}
		return val
	}
}

// pctEncode percent-encodes every byte of s but the unreserved ones.
func pctEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// kvEscaper escapes values expanded into a key=value DSN template s: a
// backslash before \, ' and white space works inside and outside quotes;
// an empty value that is the whole of an unquoted value becomes a quoted
// empty string.
func kvEscaper(s string) escaper {
	return func(refStart, refEnd int, val string) string {
		if val == "" {
			whole := strings.HasSuffix(strings.TrimRight(s[:refStart], " \t\n\r\v\f"), "=") &&
				(refEnd == len(s) || isKVSpace(s[refEnd]))
			if whole && !inKVQuote(s[:refStart]) {
				return "''"
			}
			return ""
		}
		var b strings.Builder
		for i := 0; i < len(val); i++ {
			if c := val[i]; c == '\\' || c == '\'' || isKVSpace(c) {
				b.WriteByte('\\')
			}
			b.WriteByte(val[i])
		}
		return b.String()
	}
}

// inKVQuote reports whether the key=value text s ends inside a quoted value.
func inKVQuote(s string) bool {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '\'':
			quoted = !quoted
		}
	}
	return quoted
}

func isKVSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// pgURLProblem checks a postgres:// URL the way libpq and pgx split it and
// says what is wrong without quoting any of it ("" when it is sound).
func pgURLProblem(s string) string {
	p := s[strings.Index(s, "://")+len("://"):]
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		if !validEscapes(p[:i]) {
			return "the user name or password has a % not followed by two hex digits: write % as %25"
		}
		p = p[i+1:]
	}
	netloc, path, _ := strings.Cut(p, "/")
	netloc, query, _ := strings.Cut(netloc, "?")
	if path, q, ok := strings.Cut(path, "?"); ok {
		query = q
		if !validEscapes(path) {
			return "the database name has a % not followed by two hex digits: write % as %25"
		}
	}
	if strings.Contains(netloc, "@") {
		return "it has a second @ after the user info, so the rest of the password would be read as the host: write @ in a password as %40"
	}
	for _, hp := range strings.Split(netloc, ",") {
		if strings.HasPrefix(hp, "[") {
			_, hp, _ = strings.Cut(hp, "]")
		}
		if _, port, ok := strings.Cut(hp, ":"); ok && strings.Trim(port, "0123456789") != "" {
			return "the port after the host is not a number; if that is part of a password holding / ? or #, write them as %2F %3F %23"
		}
	}
	if !validEscapes(netloc) {
		return "the host has a % not followed by two hex digits"
	}
	if query == "" {
		return ""
	}
	for _, pair := range strings.Split(query, "&") {
		_, v, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			return "a query parameter has no =: write ?name=value&name=value"
		case strings.Contains(v, "="):
			return "the value of a query parameter has a second =: write = in a value as %3D"
		case !validEscapes(pair):
			return "a query parameter has a % not followed by two hex digits: write % as %25"
		}
	}
	return ""
}

// netURLProblem checks a URL as net/url reads it (the MySQL source's DSN,
// the webhook) and says what is wrong without quoting any of it ("" when
// it is sound).
func netURLProblem(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "it is not a URL: a user name or password holding / ? # % or spaces must be percent-escaped (%2F %3F %23 %25 %20)"
	case u.Host == "":
		return "it names no host"
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "it holds a # (a URL fragment): write # in a password as %23"
	}
	return ""
}

// validEscapes reports whether every % in s starts a %XX escape.
func validEscapes(s string) bool {
	_, err := url.PathUnescape(strings.ReplaceAll(s, "/", "%2F"))
	return err == nil
}

// kvProblem checks a key=value DSN the way libpq and pgx split it and says
// what is wrong without quoting any of it ("" when it is sound): even a
// "key" may be a piece of a password that held a space.
func kvProblem(s string) string {
	s = strings.TrimLeft(s, " \t\n\r\v\f")
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "the text after the last value has no =: write key=value pairs separated by spaces, and quote values with spaces ('...')"
		}
		if strings.ContainsAny(strings.Trim(s[:eq], " \t\n\r\v\f"), " \t\n\r\v\f") {
			return "a word is not followed by =: write key=value pairs, and quote a value with spaces ('...') or escape them (\\ )"
		}
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		end, quoted := 0, s != "" && s[0] == '\''
		if quoted {
			s = s[1:]
		}
		for ; end < len(s); end++ {
			if c := s[end]; c == '\\' {
				end++
			} else if quoted && c == '\'' || !quoted && isKVSpace(c) {
				break
			}
		}
		if quoted && end >= len(s) {
			return "a value opens a quote (') that is never closed: write ' inside a value as \\'"
		}
		if quoted {
			end++
		}
		s = strings.TrimLeft(s[min(end, len(s)):], " \t\n\r\v\f")
	}
	return ""
}
