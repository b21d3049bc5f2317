package config

import (
	"fmt"
	"regexp"
	"strings"
)

// expandEnv expands ${NAME} in a string value, recording every unset or
// malformed reference at the value's key. The values of URL and DSN keys
// (secret:"true") are escaped into their place (see dsnEscaper).
func (d *decoder) expandEnv(path string, at position, s string) (string, bool) {
	if path == "outbox.topic" {
		s = topicTemplateLiteral(s) // the template's own variables, not the environment's
	}
	var escape escaper
	if d.dsnKeys[path] {
		escape = dsnEscaper(s)
	}
	out, problems := expandEnvEscaped(s, d.lookup, escape)
	for _, p := range problems {
		d.errorf(at, path, ErrEnv, "%s", p)
	}
	return out, len(problems) == 0
}

// escaper returns how a value expanded for the reference s[start:end] of a
// template is written into the result.
type escaper func(start, end int, val string) string

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces each ${NAME} in s with lookup(NAME); $${ is a literal
// ${. Any other $ is kept as is, so passwords may contain $. It returns one
// message per problem.
func expandEnv(s string, lookup func(string) (string, bool)) (string, []string) {
	return expandEnvEscaped(s, lookup, nil)
}

// expandEnvEscaped is expandEnv writing each value through escape (nil:
// as it is).
func expandEnvEscaped(s string, lookup func(string) (string, bool), escape escaper) (string, []string) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	var b strings.Builder
	var problems []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				problems = append(problems, "unterminated ${: write ${NAME}, or $${ for a literal ${")
				return s, problems
			}
			name := s[i+2 : i+2+end]
			start := i
			i += end + 3
			val, problem := lookupEnv(name, lookup)
			if problem != "" {
				problems = append(problems, problem)
			}
			if escape != nil {
				val = escape(start, i, val)
			}
			b.WriteString(val)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), problems
}

func lookupEnv(name string, lookup func(string) (string, bool)) (string, string) {
	if !envName.MatchString(name) {
		return "", fmt.Sprintf("invalid reference ${%s}: write ${NAME} with letters, digits and _ (defaults like ${A:-b} are not supported), or $${ for a literal ${",
			strings.Trim(fmt.Sprintf("%q", name), `"`))
	}
	val, ok := lookup(name)
	if !ok {
		return "", fmt.Sprintf("environment variable %s is not set (referenced as ${%s})", name, name)
	}
	return val, ""
}
