package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// str decodes a string value, refusing YAML 1.1 traps, and expands ${NAME}.
func (d *decoder) str(path string, at position, n ast.Node, asString bool) (string, bool) {
	raw, ok := d.rawString(path, at, n, asString)
	if !ok {
		return "", false
	}
	return d.expandEnv(path, at, raw)
}

func (d *decoder) rawString(path string, at position, n ast.Node, asString bool) (string, bool) {
	if asString {
		return scalarText(n), true
	}
	switch x := n.(type) {
	case *ast.StringNode:
		if isPlain(x) && yaml11Bool(x.Value) {
			d.errorf(at, path, ErrAmbiguous,
				"unquoted %s is a boolean to YAML 1.1 parsers: quote it (%q) if you mean the text", x.Value, x.Value)
			return "", false
		}
		if isPlain(x) && looksNumeric(x.Value) {
			d.errorf(at, path, ErrAmbiguous,
				"unquoted %s reads as a number to other YAML parsers: quote it (%q) if you mean the text", x.Value, x.Value)
			return "", false
		}
		return x.Value, true
	case *ast.LiteralNode:
		return scalarText(x), true
	case *ast.BoolNode:
		t := tokenText(x)
		d.errorf(at, path, ErrAmbiguous, "expected a string, got the unquoted boolean %s: quote it (%q) if you mean the text", t, t)
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		t := tokenText(x)
		d.errorf(at, path, ErrType, "expected a string, got the number %s: quote it (%q) if you mean the text", t, t)
	default:
		d.typeError(path, at, n, "a string")
	}
	return "", false
}

// scalarText returns the text of a scalar as a string (for !!str values and
// block scalars).
func scalarText(n ast.Node) string {
	switch x := n.(type) {
	case nil, *ast.NullNode:
		return ""
	case *ast.StringNode:
		return x.Value
	case *ast.LiteralNode:
		if x.Value == nil {
			return ""
		}
		return x.Value.Value
	}
	return tokenText(n)
}

// isPlain reports whether a string was written without quotes.
func isPlain(n *ast.StringNode) bool {
	return n.Token != nil && n.Token.Type == token.StringType
}

// yaml11Bool reports whether an unquoted word is a boolean in YAML 1.1.
func yaml11Bool(s string) bool {
	switch strings.ToLower(s) {
	case "y", "n", "yes", "no", "on", "off", "true", "false":
		return true
	}
	return false
}

// looksNumeric reports whether some YAML parser would read s as a number:
// decimal, float, 0x/0o/0b forms and digits with _ separators.
func looksNumeric(s string) bool {
	t := strings.TrimLeft(s, "+-")
	if t == "" || !(isDigit(t[0]) || t[0] == '.' && len(t) > 1 && isDigit(t[1])) {
		return false
	}
	clean := strings.ReplaceAll(s, "_", "")
	if _, err := strconv.ParseFloat(clean, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return true
	}
	_, err := strconv.ParseInt(clean, 0, 64)
	return err == nil || errors.Is(err, strconv.ErrRange)
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

var decimalInt = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// integer decodes an integer, refusing octal-looking, hex, binary and
// underscored forms that YAML versions read differently, and floats.
func (d *decoder) integer(path string, at position, n ast.Node, asString bool, v reflect.Value) {
	var text string
	switch x := n.(type) {
	case *ast.IntegerNode:
		text = tokenText(x)
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		d.errorf(at, path, ErrType, "expected an integer, got the number %s", tokenText(x))
		return
	case *ast.StringNode:
		if asString || !isPlain(x) {
			d.errorf(at, path, ErrType, "expected an integer, got the quoted string %s: write the number without quotes", shortQuote(x.Value))
			return
		}
		if !looksNumeric(x.Value) {
			d.typeError(path, at, n, "an integer")
			return
		}
		text = x.Value
	default:
		d.typeError(path, at, n, "an integer")
		return
	}
	if msg, class := intProblem(text); msg != "" {
		d.errorf(at, path, class, "%s", msg)
		return
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil || v.OverflowInt(i) {
		d.errorf(at, path, ErrInvalid, "%s is out of range", text)
		return
	}
	v.SetInt(i)
}

// intProblem explains why text is not a plain decimal integer, with the
// problem's class; msg is "" when text is fine.
func intProblem(text string) (msg string, class error) {
	if decimalInt.MatchString(text) {
		return "", nil
	}
	t := strings.TrimLeft(text, "+-")
	sign := text[:len(text)-len(t)]
	lower := strings.ToLower(t)
	val, err := strconv.ParseInt(sign+strings.ReplaceAll(t, "_", ""), 0, 64)
	switch {
	case strings.Contains(t, "_") && err == nil:
		return fmt.Sprintf("%s is ambiguous: YAML 1.1 reads _ as a digit separator, YAML 1.2 reads a string; write %d", text, val), ErrAmbiguous
	case strings.HasPrefix(lower, "0x") && err == nil:
		return fmt.Sprintf("hexadecimal %s is ambiguous between YAML versions; write the decimal %d", text, val), ErrAmbiguous
	case strings.HasPrefix(lower, "0o") && err == nil:
		return fmt.Sprintf("octal %s is a string to YAML 1.1 parsers; write the decimal %d", text, val), ErrAmbiguous
	case strings.HasPrefix(lower, "0b") && err == nil:
		return fmt.Sprintf("binary %s is ambiguous between YAML versions; write the decimal %d", text, val), ErrAmbiguous
	case len(t) > 1 && t[0] == '0' && strings.Trim(t, "0123456789") == "":
		return leadingZero(text, sign, t), ErrAmbiguous
	case looksNumeric(text):
		return fmt.Sprintf("expected an integer, got the number %s", text), ErrType
	}
	return fmt.Sprintf("expected an integer, got %s", shortQuote(text)), ErrType
}

// leadingZero explains "010": octal 8 to YAML 1.1, decimal 10 to YAML 1.2.
func leadingZero(text, sign, digits string) string {
	dec := strings.TrimLeft(digits, "0")
	if dec == "" {
		dec = "0"
	}
	if oct, err := strconv.ParseInt(digits, 8, 64); err == nil {
		return fmt.Sprintf("%s is ambiguous: YAML 1.1 reads a leading zero as octal (%s%d), YAML 1.2 as decimal %s%s; write %s%s (or %s%d if you meant octal)",
			text, sign, oct, sign, dec, sign, dec, sign, oct)
	}
	return fmt.Sprintf("%s has a leading zero, which some YAML parsers read as octal; write %s%s", text, sign, dec)
}

// duration decodes a Go duration string such as "10s" or "168h".
func (d *decoder) duration(path string, at position, n ast.Node, asString bool, v reflect.Value) {
	var text string
	switch x := n.(type) {
	case *ast.IntegerNode, *ast.FloatNode:
		if !asString {
			d.errorf(at, path, ErrType, "%s", bareNumber(tokenText(x)))
			return
		}
		text = tokenText(x)
	case *ast.StringNode, *ast.LiteralNode:
		text = scalarText(x)
	default:
		d.typeError(path, at, n, `a duration such as "10s"`)
		return
	}
	text, ok := d.expandEnv(path, at, text)
	if !ok {
		return
	}
	dur, err := time.ParseDuration(text)
	if err != nil {
		msg, class := durationProblem(text)
		d.errorf(at, path, class, "%s", msg)
		return
	}
	v.SetInt(int64(dur))
}

func bareNumber(t string) string {
	return fmt.Sprintf("a bare number is not a duration: write %q (or %q, %q); units are ns, us, ms, s, m, h", t+"s", t+"m", t+"h")
}

// durationProblem explains an invalid duration and suggests the fix.
func durationProblem(text string) (msg string, class error) {
	if looksNumeric(text) {
		return bareNumber(text), ErrType
	}
	if days, ok := strings.CutSuffix(text, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n < 1<<20 {
			return fmt.Sprintf("Go durations have no d unit: write %q for %s days", fmt.Sprintf("%dh", n*24), days), ErrInvalid
		}
	}
	return fmt.Sprintf("%s is not a duration: write a Go duration such as 10s, 5m or 168h (units ns, us, ms, s, m, h)", shortQuote(text)), ErrInvalid
}

// boolean decodes true or false, refusing the YAML 1.1 spellings.
func (d *decoder) boolean(path string, at position, n ast.Node, asString bool, v reflect.Value) {
	switch x := n.(type) {
	case *ast.BoolNode:
		if !asString {
			v.SetBool(x.Value)
			return
		}
	case *ast.StringNode:
		if isPlain(x) && yaml11Bool(x.Value) {
			d.errorf(at, path, ErrAmbiguous, "%s is a boolean only to YAML 1.1 parsers: write true or false", x.Value)
			return
		}
	}
	d.typeError(path, at, n, "true or false")
}
