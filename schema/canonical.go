package schema

import (
	"bytes"
	"encoding/json"
	"strings"
)

// canonical is the form in which the registry compares schemas, as
// Confluent's does (it compares Avro's own rendering of the parsed schema):
// whitespace, the order of a JSON object's attributes and the long form of
// a primitive type ({"type":"string"} for "string") do not make another
// schema. Attributes are kept (unlike Avro's Parsing Canonical Form, which
// drops doc, default and properties that matter to consumers); the order
// of a record's fields and of a union's branches matters, as in Avro. Text
// that is not JSON is returned as is (parsing reports it).
func canonical(schema string) string {
	dec := json.NewDecoder(strings.NewReader(schema))
	dec.UseNumber() // numbers (a long's default) keep every digit
	var v any
	if err := dec.Decode(&v); err != nil {
		return schema
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(canonicalValue(v)); err != nil {
		return schema
	}
	return strings.TrimSuffix(b.String(), "\n")
}

var avroPrimitives = map[string]bool{"null": true, "boolean": true, "int": true, "long": true,
	"float": true, "double": true, "bytes": true, "string": true}

// canonicalValue shortens primitive types to their name; encoding/json
// writes an object's keys sorted.
func canonicalValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if t, ok := x["type"].(string); ok && len(x) == 1 && avroPrimitives[t] {
			return t
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "default" { // a value, not a schema: kept as written
				out[k] = e
				continue
			}
			out[k] = canonicalValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = canonicalValue(e)
		}
		return out
	}
	return v
}
