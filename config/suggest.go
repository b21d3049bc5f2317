package config

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"
)

// fieldIndex maps the yaml keys of struct type t to field indexes.
func fieldIndex(t reflect.Type) map[string]int {
	out := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		if key, ok := yamlKey(t.Field(i)); ok {
			out[key] = i
		}
	}
	return out
}

// yamlKey returns a field's yaml key; ok is false for fields not in YAML.
func yamlKey(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if key == "-" {
		return "", false
	}
	if key == "" {
		key = strings.ToLower(f.Name)
	}
	return key, true
}

// keysOf lists the yaml keys of struct type t in declaration order.
func keysOf(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		if key, ok := yamlKey(t.Field(i)); ok {
			keys = append(keys, key)
		}
	}
	return keys
}

// unknownKey reports a key the struct at parent does not have, suggesting
// the nearest known key here, or the place where such a key belongs.
func (d *decoder) unknownKey(parent, kpath, key string, at position, t reflect.Type) {
	if msg, ok := plannedKeys[kpath]; ok {
		d.errorf(at, kpath, ErrNotAvailable, "%s", msg)
		return
	}
	known := keysOf(t)
	msg := "unknown key " + quoteKey(key)
	switch near, elsewhere := nearest(key, known), nearestPath(key, parent); {
	case near != "":
		msg += fmt.Sprintf("; did you mean %s?", near)
	case elsewhere != "":
		msg += fmt.Sprintf("; did you mean %s? (it belongs under %s)", elsewhere, parentPath(elsewhere))
	default:
		msg += "; known keys here: " + strings.Join(known, ", ")
	}
	d.errorf(at, kpath, ErrUnknownKey, "%s", msg)
}

// nearest returns the candidate closest to key, if it is close enough to
// be a typo.
func nearest(key string, candidates []string) string {
	best, bestDist := "", -1
	key = strings.ToLower(key)
	n := utf8.RuneCountInString(key)
	for _, c := range candidates {
		dist, ok := typoDistance(key, n, strings.ToLower(c))
		if ok && (bestDist < 0 || dist < bestDist) {
			best, bestDist = c, dist
		}
	}
	return best
}

// nearestPath returns the full path of a key elsewhere in the config that
// is the same as or close to key (commit_interval under sink instead of
// sink.iceberg), excluding keys directly under parent.
func nearestPath(key, parent string) string {
	best, bestDist := "", -1
	key = strings.ToLower(key)
	n := utf8.RuneCountInString(key)
	for _, p := range schemaPaths() {
		if parentPath(p) == parent {
			continue
		}
		dist, ok := typoDistance(key, n, p[strings.LastIndexByte(p, '.')+1:])
		if ok && (bestDist < 0 || dist < bestDist) {
			best, bestDist = p, dist
		}
	}
	return best
}

// typoDistance returns the edit distance of key (keyRunes long) from the
// known key word and whether it is small enough to be a typo. Lengths that
// differ by more than the budget are no typo, which keeps a huge key from
// costing len(key) × len(word) for every known key.
func typoDistance(key string, keyRunes int, word string) (int, bool) {
	budget := typoBudget(word)
	if d := keyRunes - utf8.RuneCountInString(word); d > budget || -d > budget {
		return 0, false
	}
	dist := editDistance(key, word)
	return dist, dist <= budget
}

// typoBudget is how many edits still count as a typo of word.
func typoBudget(word string) int {
	return max(1, min(3, len(word)/4))
}

// schemaPaths lists the path of every key of Config.
var schemaPaths = sync.OnceValue(func() []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			key, ok := yamlKey(f)
			if !ok {
				continue
			}
			p := joinPath(prefix, key)
			out = append(out, p)
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && ft != durationType {
				walk(p, ft)
			}
		}
	}
	walk("", reflect.TypeFor[Config]())
	return out
})

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and swaps of neighbours each cost one.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
