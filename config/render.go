package config

import (
	"fmt"
	"log/slog"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// String renders the effective config as YAML, every key written out
// (optional secrets such as a rest catalog's token only when set), with
// the password of each DSN and URI replaced by *** (postgres://u:***@h/db,
// password=***) and tokens and keys by ***. Parsing the output gives the same Config, apart from
// redacted passwords. It has a value receiver so that printing a Config
// value, not only a pointer, is redacted too.
func (c Config) String() string {
	var b strings.Builder
	writeStruct(&b, reflect.ValueOf(c), 0)
	return b.String()
}

// LogValue logs the config redacted, as String does, with any slog handler.
func (c Config) LogValue() slog.Value {
	return slog.StringValue(c.String())
}

// Fields tagged secret:"true" (DSN, URI, Warehouse) hold URLs or DSNs whose
// passwords String redacts; fields tagged secret:"all" (tokens, keys) are
// secrets as a whole and print as *** when set.

// writeStruct writes the yaml keys of struct v at an indentation level;
// nil sections and unset ",omitempty" keys are left out.
func writeStruct(b *strings.Builder, v reflect.Value, indent int) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, ok := yamlKey(f)
		if !ok {
			continue
		}
		fv := v.Field(i)
		if fv.IsZero() && strings.HasSuffix(f.Tag.Get("yaml"), ",omitempty") {
			continue // an optional setting, unset (e.g. a rest catalog's token)
		}
		if fv.Kind() == reflect.Pointer {
			if fv.IsNil() {
				continue
			}
			fv = fv.Elem()
		}
		writeField(b, key, fv, f.Tag.Get("secret"), indent)
	}
}

func writeField(b *strings.Builder, key string, v reflect.Value, secret string, indent int) {
	pad := strings.Repeat("  ", indent)
	switch {
	case v.Type() == durationType:
		fmt.Fprintf(b, "%s%s: %s\n", pad, key, formatDuration(time.Duration(v.Int())))
	case v.Type() == byteSizeType:
		fmt.Fprintf(b, "%s%s: %s\n", pad, key, ByteSize(v.Int()))
	case v.Kind() == reflect.Struct:
		var inner strings.Builder
		writeStruct(&inner, v, indent+1)
		if inner.Len() == 0 {
			fmt.Fprintf(b, "%s%s: {}\n", pad, key)
			return
		}
		fmt.Fprintf(b, "%s%s:\n%s", pad, key, inner.String())
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
		// Lists of sections (sink.iceberg.tables) are optional: an empty one
		// is left out.
		if v.Len() == 0 {
			return
		}
		fmt.Fprintf(b, "%s%s:\n", pad, key)
		for i := range v.Len() {
			var inner strings.Builder
			writeStruct(&inner, v.Index(i), indent+2)
			item := inner.String()
			// "    key: v" -> "  - key: v" for the item's first line.
			item = pad + "  - " + strings.TrimPrefix(item, pad+"    ")
			b.WriteString(item)
		}
	case v.Kind() == reflect.Slice:
		if v.Len() == 0 {
			fmt.Fprintf(b, "%s%s: []\n", pad, key)
			return
		}
		fmt.Fprintf(b, "%s%s:\n", pad, key)
		for i := range v.Len() {
			fmt.Fprintf(b, "%s  - %s\n", pad, quoteYAML(v.Index(i).String()))
		}
	case v.Kind() == reflect.String:
		s := v.String()
		switch {
		case secret == "true":
			s = redact(s)
		case secret == "all" && s != "":
			s = "***"
		}
		fmt.Fprintf(b, "%s%s: %s\n", pad, key, quoteYAML(s))
	case v.CanInt():
		fmt.Fprintf(b, "%s%s: %d\n", pad, key, v.Int())
	case v.Kind() == reflect.Bool:
		fmt.Fprintf(b, "%s%s: %t\n", pad, key, v.Bool())
	}
}

// formatDuration writes d in its largest whole unit: 168h, not 168h0m0s.
func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

var plainScalar = regexp.MustCompile(`^[A-Za-z0-9_./][A-Za-z0-9_./:@+*=?&%,-]*$`)

// quoteYAML writes s as a YAML scalar that reads back as s: plain when
// unambiguous, double-quoted otherwise; ${ is escaped as $${.
func quoteYAML(s string) string {
	s = strings.ReplaceAll(s, "${", "$${")
	if plainScalar.MatchString(s) && !yaml11Bool(s) && !looksNumeric(s) &&
		!strings.HasSuffix(s, ":") && !isNullWord(s) {
		return s
	}
	return strconv.Quote(s)
}

func isNullWord(s string) bool {
	switch s {
	case "null", "Null", "NULL", "~":
		return true
	}
	return false
}

// The password forms redact hides.
var (
	kvPassword    = regexp.MustCompile(`(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.?)*'?|(?:\\.|[^\s\\])*\\?)`)
	queryPassword = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&#]*`)
)

// redact hides passwords in a DSN or URI: the password of the user info
// and password/sslpassword parameters, in URL or key=value form. When a
// URL is malformed it hides more rather than less.
func redact(s string) string {
	i := strings.Index(s, "://")
	if i < 0 {
		return kvPassword.ReplaceAllString(s, "${1}***")
	}
	head, rest := s[:i+3], s[i+3:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, hostAndRest := rest[:at], rest[at:]
		if name, _, ok := strings.Cut(user, ":"); ok {
			user = name + ":***"
		} else if sc := strings.ToLower(head); sc == "http://" || sc == "https://" {
			user = "***" // a token as user name
		}
		rest = user + hostAndRest
	}
	return head + queryPassword.ReplaceAllString(rest, "${1}***")
}
