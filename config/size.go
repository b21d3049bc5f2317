package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// ByteSize is a size in bytes. In YAML it is an integer (bytes) or a
// number with a unit: kB, MB, GB, TB as PostgreSQL reads them (powers of
// 1024, so they match settings such as max_slot_wal_keep_size), or KiB,
// MiB, GiB, TiB, which mean the same; B for bytes.
type ByteSize int64

var byteSizeType = reflect.TypeFor[ByteSize]()

// sizeUnits are the accepted units, longest first so "MiB" wins over "B".
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"kB", 1 << 10}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
	{"B", 1},
}

// ParseByteSize reads "512MB", "1GiB", "64 kB" or "1024".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.name); ok {
			t, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s is not a size: write bytes or a whole number with a unit, such as 512MB or 1GiB (kB, MB, GB, TB are powers of 1024, as in PostgreSQL)", shortQuote(s))
	}
	if n > (1<<63-1)/mult {
		return 0, fmt.Errorf("%s is out of range", shortQuote(s))
	}
	return ByteSize(n * mult), nil
}

// String writes the size in its largest whole binary unit: 1GiB, 48MiB.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.mult == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.mult, u.name)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// byteSize decodes an integer (bytes) or a string with a unit.
func (d *decoder) byteSize(path string, at position, n ast.Node, asString bool, v reflect.Value) {
	var text string
	switch x := n.(type) {
	case *ast.IntegerNode:
		text = tokenText(x)
		if msg, class := intProblem(text); msg != "" {
			d.errorf(at, path, class, "%s", msg)
			return
		}
	case *ast.StringNode, *ast.LiteralNode:
		text = scalarText(x)
	default:
		d.typeError(path, at, n, `a size such as "512MB"`)
		return
	}
	text, ok := d.expandEnv(path, at, text)
	if !ok {
		return
	}
	size, err := ParseByteSize(text)
	if err != nil {
		d.errorf(at, path, ErrInvalid, "%v", err)
		return
	}
	v.SetInt(int64(size))
}
