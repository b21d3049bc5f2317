package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

// Option changes how Load and Parse read a file.
type Option func(*options)

type options struct {
	lookupEnv func(name string) (string, bool)
}

// WithLookupEnv sets how ${NAME} references are resolved; the default is
// os.LookupEnv. Tests use it to avoid touching the process environment.
func WithLookupEnv(lookup func(name string) (value string, ok bool)) Option {
	return func(o *options) { o.lookupEnv = lookup }
}

// Load reads the config file at path; see Parse.
//
// A file that cannot be read is reported as a wrapped os error (so
// errors.Is(err, fs.ErrNotExist) works); everything else as Errors.
func Load(path string, opts ...Option) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path, opts...)
}

// Parse decodes a YAML config, expands ${NAME} references, applies the
// defaults and validates the result. filename only names the source in
// error messages.
//
// On any problem it returns a nil Config and an Errors value listing every
// problem found, each with file, line, column and key path.
func Parse(data []byte, filename string, opts ...Option) (*Config, error) {
	o := options{lookupEnv: os.LookupEnv}
	for _, opt := range opts {
		opt(&o)
	}
	d := newDecoder(filename, o.lookupEnv)
	c := &Config{origin: &origin{file: filename, pos: d.pos}}
	root := d.document(data)
	if root == nil {
		return nil, d.errs.err()
	}
	d.pos[""] = nodePos(root)
	d.decode("", nodePos(root), root, reflectValue(c))
	c.applyDefaults(func(path string) bool { return d.explicit[path] })
	errs := append(d.errs, d.relevant(c.validate())...)
	if err := errs.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// document parses data and returns the top-level mapping, or nil after
// recording why there is none.
func (d *decoder) document(data []byte) ast.Node {
	data = bytes.TrimPrefix(data, utf8BOM)
	if at, msg, bad := encodingProblem(data); bad {
		d.errorf(at, "", ErrSyntax, "%s", msg)
		return nil
	}
	if at, deep := tooDeep(data); deep {
		d.errorf(at, "", ErrSyntax, "[ and { nest deeper than %d levels; a cdcd config needs a handful", maxFlowDepth)
		return nil
	}
	f, err := parseYAML(data)
	if err != nil {
		d.syntaxError(err)
		return nil
	}
	var body ast.Node
	for i, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if i > 0 {
			d.errorf(nodePos(doc.Body), "", ErrSyntax,
				"a second YAML document starts here; a config file holds exactly one (remove the ---)")
			return nil
		}
		body = doc.Body
	}
	d.collectAnchors(body)
	body, _, ok := d.resolve("", position{1, 1}, body)
	if !ok {
		return nil
	}
	if isNull(body) {
		d.errorf(position{1, 1}, "", ErrEmpty,
			"the file is empty: expected a mapping with at least pipeline, source and sink")
		return nil
	}
	if _, ok := mappingEntries(body); !ok {
		d.errorf(nodePos(body), "", ErrType,
			"the top level must be a mapping of keys (pipeline: ..., source: ...), got %s", describe(body))
		return nil
	}
	return body
}

// parseYAML runs goccy's parser, turning a panic inside it into a syntax
// error: a config file must never crash the daemon.
func parseYAML(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, fmt.Errorf("the YAML parser failed: %v", r)
		}
	}()
	return parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
}

// utf8BOM is the byte order mark some editors (Notepad) write at the start
// of a UTF-8 file; Parse ignores it.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// encodingProblem finds where data stops being UTF-8 (a config file is
// UTF-8 text) and says what to do.
func encodingProblem(data []byte) (position, string, bool) {
	if bytes.HasPrefix(data, []byte{0xFF, 0xFE}) || bytes.HasPrefix(data, []byte{0xFE, 0xFF}) {
		return position{1, 1}, "the file is UTF-16 (it starts with a UTF-16 byte order mark): save it as UTF-8", true
	}
	if utf8.Valid(data) {
		return position{}, "", false
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			return position{line, col}, fmt.Sprintf("invalid UTF-8 (byte 0x%02X): a config file must be UTF-8 text; re-save it as UTF-8 or remove the byte", data[i]), true
		}
		if r == '\n' {
			line, col = line+1, 0
		}
		col++
		i += size
	}
	return position{}, "", false // unreachable: data is not valid UTF-8
}

// maxFlowDepth bounds the nesting of [ and { before goccy's parser sees the
// file: its time grows faster than linearly with nesting (100,000 levels
// take minutes), and a config is at most four levels deep.
const maxFlowDepth = 64

// tooDeep reports the position where flow collections nest deeper than
// maxFlowDepth, skipping quoted text and comments.
func tooDeep(data []byte) (position, bool) {
	depth, line, col := 0, 1, 0
	var quote byte
	comment := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		col++
		switch {
		case c == '\n':
			line, col, comment = line+1, 0, false // quoted text may span lines
		case comment:
		case quote == '"' && c == '\\':
			i++
			col++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || data[i-1] == ' ' || data[i-1] == '\t'):
			comment = true
		case c == '[' || c == '{':
			if depth++; depth > maxFlowDepth {
				return position{line, col}, true
			}
		case c == ']' || c == '}':
			depth = max(0, depth-1)
		}
	}
	return position{}, false
}

// syntaxError records a parser error with the position of its token.
func (d *decoder) syntaxError(err error) {
	var ye interface {
		GetToken() *token.Token
		GetMessage() string
	}
	at, msg := position{}, err.Error()
	if errors.As(err, &ye) {
		at, msg = tokenPos(ye.GetToken()), ye.GetMessage()
	}
	if strings.Contains(msg, "'\t'") {
		msg += " (indent YAML with spaces, not tabs)"
	}
	d.errorf(at, "", ErrSyntax, "invalid YAML: %s", oneLine(msg))
}

// oneLine keeps a message on one line: Errors prints one problem per line.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", `\t`).Replace(s)
}
