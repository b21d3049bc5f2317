package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// position is a 1-based line and column in the file; zero when unknown.
type position struct{ line, col int }

func (p position) before(q position) bool {
	return p.line < q.line || (p.line == q.line && p.col < q.col)
}

// origin remembers, for a Config parsed from a file, the file name and the
// position of every key path, so that Validate can point at lines.
type origin struct {
	file string
	pos  map[string]position
}

// at returns the position of path or, for a key that is not in the file,
// of its nearest ancestor that is.
func (o *origin) at(path string) position {
	if o == nil {
		return position{}
	}
	for {
		if p, ok := o.pos[path]; ok {
			return p
		}
		if path == "" {
			return position{}
		}
		path = parentPath(path)
	}
}

// parentPath returns "a.b" for "a.b.c" and "a.b" for "a.b[3]".
func parentPath(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// joinPath appends key to a key path, quoting keys that are not simple and
// cutting long ones (no key of the config is long; a long one is echoed
// only to say where it is).
func joinPath(parent, key string) string {
	if len(key) > maxKeyEcho || !simpleKey.MatchString(key) {
		return fmt.Sprintf("%s[%s]", parent, shortQuote(key))
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// decoder walks goccy's AST against the Config struct (by yaml tags),
// collecting every problem instead of stopping at the first.
type decoder struct {
	file     string
	lookup   func(string) (string, bool)
	anchors  map[string][]anchorDef
	pos      map[string]position // key path -> position of the key
	explicit map[string]bool     // key paths set to a non-null value
	dsnKeys  map[string]bool     // key paths of URLs and DSNs (secret:"true")
	errs     Errors
}

type anchorDef struct {
	at   position
	node ast.Node
}

func newDecoder(file string, lookup func(string) (string, bool)) *decoder {
	return &decoder{
		file:     file,
		lookup:   lookup,
		anchors:  make(map[string][]anchorDef),
		pos:      make(map[string]position),
		explicit: make(map[string]bool),
		dsnKeys:  make(map[string]bool),
	}
}

// errorf records a problem at a position.
func (d *decoder) errorf(at position, path string, class error, format string, args ...any) {
	d.errs = append(d.errs, &Error{
		File: d.file, Line: at.line, Column: at.col, Path: path,
		Msg: oneLine(fmt.Sprintf(format, args...)), Err: class,
	})
}

func (d *decoder) typeError(path string, at position, n ast.Node, want string) {
	d.errorf(at, path, ErrType, "expected %s, got %s", want, describe(n))
}

var durationType = reflect.TypeFor[time.Duration]()

func reflectValue(c *Config) reflect.Value { return reflect.ValueOf(c).Elem() }

// decode stores node n, the value of the key at path (the key is at at),
// into v. A null or absent value leaves v alone, so it takes its default.
func (d *decoder) decode(path string, at position, n ast.Node, v reflect.Value) {
	n, asString, ok := d.resolve(path, at, n)
	if !ok || isNull(n) && !asString {
		return
	}
	d.explicit[path] = true
	switch {
	case v.Type() == durationType:
		d.duration(path, at, n, asString, v)
	case v.Type() == byteSizeType:
		d.byteSize(path, at, n, asString, v)
	case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct:
		d.pointer(path, at, n, v)
	case v.Kind() == reflect.Struct:
		d.mapping(path, at, n, v)
	case v.Kind() == reflect.Slice:
		d.sequence(path, at, n, v)
	case v.Kind() == reflect.String:
		if s, ok := d.str(path, at, n, asString); ok {
			v.SetString(s)
		}
	case v.CanInt():
		d.integer(path, at, n, asString, v)
	case v.Kind() == reflect.Bool:
		d.boolean(path, at, n, asString, v)
	default:
		d.errorf(at, path, ErrType, "internal: the config field type %s cannot be decoded", v.Type())
	}
}

// isNull reports whether n is absent, "~", "null" or an empty value.
func isNull(n ast.Node) bool {
	return n == nil || n.Type() == ast.NullType
}

// pointer allocates an optional section when the file has a mapping for it.
func (d *decoder) pointer(path string, at position, n ast.Node, v reflect.Value) {
	if _, ok := mappingEntries(n); !ok {
		d.typeError(path, at, n, "a mapping")
		return
	}
	if v.IsNil() {
		v.Set(reflect.New(v.Type().Elem()))
	}
	d.mapping(path, at, n, v.Elem())
}

// mappingEntries returns the key/value pairs of a mapping node.
func mappingEntries(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch m := n.(type) {
	case *ast.MappingNode:
		return m.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{m}, true
	}
	return nil, false
}

// mapping decodes a YAML mapping into struct v.
func (d *decoder) mapping(path string, at position, n ast.Node, v reflect.Value) {
	entries, ok := mappingEntries(n)
	if !ok {
		d.typeError(path, at, n, "a mapping")
		return
	}
	fields := fieldIndex(v.Type())
	seen := make(map[string]position, len(entries))
	for _, e := range entries {
		key, kat, ok := d.key(path, e)
		if !ok {
			continue
		}
		kpath := joinPath(path, key)
		if first, dup := seen[key]; dup {
			d.errorf(kat, kpath, ErrDuplicateKey,
				"duplicate key: %s is already set at line %d, column %d; keep one of them",
				quoteKey(key), first.line, first.col)
			continue
		}
		seen[key] = kat
		d.pos[kpath] = kat
		i, known := fields[key]
		if !known {
			d.unknownKey(path, kpath, key, kat, v.Type())
			continue
		}
		if v.Type().Field(i).Tag.Get("secret") == "true" {
			d.dsnKeys[kpath] = true
		}
		d.decode(kpath, kat, e.Value, v.Field(i))
	}
}

// key returns the text and position of a mapping entry's key.
func (d *decoder) key(parent string, e *ast.MappingValueNode) (string, position, bool) {
	if e == nil || e.Key == nil {
		return "", position{}, false
	}
	var k ast.Node = e.Key
	at := nodePos(k)
	if mk, ok := k.(*ast.MappingKeyNode); ok {
		k = mk.Value
	}
	if _, ok := k.(*ast.MergeKeyNode); ok {
		d.errorf(at, joinPath(parent, "<<"), ErrSyntax,
			"merge keys (<<) are not supported: write the keys out")
		return "", at, false
	}
	k, _, ok := d.resolve(parent, at, k)
	if !ok {
		return "", at, false
	}
	switch x := k.(type) {
	case nil, *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode, *ast.LiteralNode:
		d.errorf(at, parent, ErrType, "a key must be a plain string, got %s", describe(k))
		return "", at, false
	case *ast.StringNode:
		return x.Value, at, true
	}
	if tk := k.GetToken(); tk != nil {
		return tk.Value, at, true
	}
	return "", at, false
}

// sequence decodes a YAML list into slice v.
func (d *decoder) sequence(path string, at position, n ast.Node, v reflect.Value) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		d.typeError(path, at, n, "a list")
		return
	}
	out := reflect.MakeSlice(v.Type(), len(seq.Values), len(seq.Values))
	for i, item := range seq.Values {
		ipath := fmt.Sprintf("%s[%d]", path, i)
		iat := nodePos(item)
		if iat.line == 0 {
			iat = at
		}
		d.pos[ipath] = iat
		d.decode(ipath, iat, item, out.Index(i))
	}
	v.Set(out)
}

// maxAliasHops bounds alias chains, which may loop (&a *a).
const maxAliasHops = 64

// resolve looks through anchors, aliases and tags. asString is true for a
// value tagged !!str. ok is false after a problem has been recorded.
func (d *decoder) resolve(path string, at position, n ast.Node) (_ ast.Node, asString, ok bool) {
	for range maxAliasHops {
		switch x := n.(type) {
		case *ast.AnchorNode:
			n = x.Value
		case *ast.AliasNode:
			target, name, found := d.alias(x)
			if !found {
				d.errorf(at, path, ErrSyntax, "alias *%s refers to no anchor &%s defined before it", name, name)
				return nil, false, false
			}
			n = target
		case *ast.TagNode:
			tag := tokenText(x)
			if tag != "!!str" {
				d.errorf(at, path, ErrType, "YAML tags such as %s are not supported: remove the tag", tag)
				return nil, false, false
			}
			asString, n = true, x.Value
		default:
			return n, asString, true
		}
	}
	d.errorf(at, path, ErrSyntax, "aliases refer to each other in a loop")
	return nil, false, false
}

// alias finds the node of the latest anchor defined before the alias.
func (d *decoder) alias(a *ast.AliasNode) (ast.Node, string, bool) {
	name := tokenText(a.Value)
	at := tokenPos(a.GetToken())
	var target ast.Node
	found := false
	for _, def := range d.anchors[name] {
		if def.at.before(at) {
			target, found = def.node, true
		}
	}
	return target, name, found
}

// collectAnchors indexes every anchor of the document, including those in
// parts the decoder skips (unknown keys), so aliases to them resolve.
func (d *decoder) collectAnchors(n ast.Node) {
	switch x := n.(type) {
	case *ast.AnchorNode:
		name := tokenText(x.Name)
		d.anchors[name] = append(d.anchors[name], anchorDef{tokenPos(x.GetToken()), x.Value})
		d.collectAnchors(x.Value)
	case *ast.MappingNode:
		for _, e := range x.Values {
			d.collectAnchors(e)
		}
	case *ast.MappingValueNode:
		if x != nil {
			d.collectAnchors(x.Key)
			d.collectAnchors(x.Value)
		}
	case *ast.MappingKeyNode:
		d.collectAnchors(x.Value)
	case *ast.SequenceNode:
		for _, e := range x.Values {
			d.collectAnchors(e)
		}
	case *ast.TagNode:
		d.collectAnchors(x.Value)
	}
}

// relevant drops validation problems about values whose decoding already
// failed: "pipeline: required" adds nothing to "pipeline: expected a string".
func (d *decoder) relevant(verrs Errors) Errors {
	var out Errors
	for _, v := range verrs {
		if !d.decodeFailed(v.Path) {
			out = append(out, v)
		}
	}
	return out
}

func (d *decoder) decodeFailed(path string) bool {
	for _, e := range d.errs {
		switch e.Err {
		case ErrUnknownKey, ErrDuplicateKey, ErrNotAvailable:
			continue // the key's own value is still sound
		}
		if e.Path == path || isUnder(path, e.Path) || isUnder(e.Path, path) {
			return true
		}
	}
	return false
}

// isUnder reports whether path lies strictly inside the section anc.
func isUnder(path, anc string) bool {
	return anc != "" && len(path) > len(anc) && strings.HasPrefix(path, anc) &&
		(path[len(anc)] == '.' || path[len(anc)] == '[')
}

// nodePos returns where a node starts; for a mapping, its first key.
func nodePos(n ast.Node) position {
	switch x := n.(type) {
	case nil:
		return position{}
	case *ast.MappingNode:
		if len(x.Values) > 0 && x.Values[0] != nil {
			return nodePos(x.Values[0])
		}
	case *ast.MappingValueNode:
		if x.Key != nil {
			return nodePos(x.Key)
		}
	}
	return tokenPos(n.GetToken())
}

func tokenPos(tk *token.Token) position {
	if tk == nil || tk.Position == nil {
		return position{}
	}
	return position{tk.Position.Line, tk.Position.Column}
}

// tokenText returns the source text of a node's token.
func tokenText(n ast.Node) string {
	if n == nil {
		return ""
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// describe names a node's kind for messages, with short scalars quoted.
func describe(n ast.Node) string {
	switch x := n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.BoolNode:
		return "the boolean " + tokenText(x)
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "the number " + tokenText(x)
	case *ast.StringNode:
		return "the string " + shortQuote(x.Value)
	case *ast.LiteralNode:
		return "a block string"
	}
	return "a YAML " + n.Type().String()
}

// shortQuote quotes s for a message, cut to a readable length (with its
// length in bytes when cut).
func shortQuote(s string) string {
	const max = 40
	runes := 0
	for i := range s {
		if runes == max {
			return fmt.Sprintf("%q… (%d bytes)", s[:i], len(s))
		}
		runes++
	}
	return fmt.Sprintf("%q", s)
}

// maxKeyEcho is the longest key a message echoes whole.
const maxKeyEcho = 64

// quoteKey shows a key as typed when simple and short, quoted (and cut
// when long) otherwise.
func quoteKey(key string) string {
	if len(key) <= maxKeyEcho && simpleKey.MatchString(key) {
		return key
	}
	return shortQuote(key)
}
