package config

import (
	"errors"
	"slices"
	"strconv"
	"strings"
)

// The classes of config problems. Every *Error wraps exactly one of them, so
// callers can ask errors.Is(err, config.ErrUnknownKey) of a single *Error or
// of a whole Errors list.
var (
	// ErrSyntax: the file is not valid YAML, or holds more than one document.
	ErrSyntax = errors.New("config: YAML syntax error")
	// ErrEmpty: the file holds no document, or only null.
	ErrEmpty = errors.New("config: empty file")
	// ErrUnknownKey: a key the config does not have (often a typo).
	ErrUnknownKey = errors.New("config: unknown key")
	// ErrDuplicateKey: a key set twice in one mapping.
	ErrDuplicateKey = errors.New("config: duplicate key")
	// ErrType: a value of the wrong kind (a mapping where a string belongs,
	// a string where an integer belongs, a top level that is not a mapping).
	ErrType = errors.New("config: wrong type")
	// ErrAmbiguous: a YAML 1.1 trap (unquoted yes/no/on/off, octal-looking
	// or underscored integers) that parsers read differently.
	ErrAmbiguous = errors.New("config: ambiguous YAML value")
	// ErrEnv: a ${NAME} reference to an unset variable, or a malformed one.
	ErrEnv = errors.New("config: environment variable")
	// ErrInvalid: a well-typed value that is not allowed, or values that
	// contradict each other.
	ErrInvalid = errors.New("config: invalid value")
	// ErrNotAvailable: a setting the config language has but this build
	// cannot run yet (see notyet.go).
	ErrNotAvailable = errors.New("config: not available yet")
)

// Error is one problem in a config, with where it is.
type Error struct {
	// File is the file name given to Load or Parse; "" for a Config built in Go.
	File string
	// Line and Column are 1-based; 0 when unknown (a Config built in Go).
	// For a key's problem they point at the key; for a missing key, at the
	// mapping that should hold it.
	Line, Column int
	// Path is the key path, e.g. "sink.iceberg.commit_interval" or
	// "source.postgres.tables[1]"; "" for problems of the whole file.
	Path string
	// Msg says what is wrong and what to do. It is a single line.
	Msg string
	// Err is the class: one of the Err* variables of this package.
	Err error
}

// Error formats the problem as "file:line:col: path: msg", leaving out the
// parts that are unknown.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		if e.File != "" {
			b.WriteByte(':')
		}
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the problem's class.
func (e *Error) Unwrap() error { return e.Err }

// Errors is every problem found in one config, sorted by line and column.
// Load, Parse and Validate return it (never an empty one) as their error.
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sort orders problems by position; problems without one keep their order.
func (es Errors) sort() {
	slices.SortStableFunc(es, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
}

// err returns es as an error, or a true nil when there are no problems.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	es.sort()
	return es
}
