package schema

import (
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// TestCanonicalForm: as Confluent's registry does, a schema is the same
// whatever its whitespace, attribute order or primitive shorthand: it gets
// the id and version it has, and a lookup finds it. Attributes that differ
// in value (a doc, a default, a field order) make another schema.
func TestCanonicalForm(t *testing.T) {
	cl, _, _ := serve(t, &testStore{})
	ctx := t.Context()
	reg := func(subject, text string) sr.SubjectSchema {
		t.Helper()
		ss, err := cl.CreateSchema(ctx, subject, sr.Schema{Schema: text})
		if err != nil {
			t.Fatalf("register %s: %v", text, err)
		}
		return ss
	}
	a := reg("s", `"string"`)
	if b := reg("s", `{"type":"string"}`); b.ID != a.ID || b.Version != a.Version {
		t.Errorf(`{"type":"string"} after "string": id %d version %d, want %d %d`, b.ID, b.Version, a.ID, a.Version)
	}
	rec := `{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"long","default":9007199254740993},{"name":"b","type":["null","string"],"default":null}]}`
	reordered := `{"fields":[{"default":9007199254740993,"type":{"type":"long"},"name":"a"},{"type":["null",{"type":"string"}],"name":"b","default":null}],
		"namespace":"n", "name":"R", "type":"record"}`
	r1 := reg("r", rec)
	if r2 := reg("r", reordered); r2.ID != r1.ID || r2.Version != r1.Version {
		t.Errorf("the record with attributes in another order: id %d version %d, want %d %d", r2.ID, r2.Version, r1.ID, r1.Version)
	}
	if got, err := cl.LookupSchema(ctx, "r", sr.Schema{Schema: reordered}); err != nil || got.ID != r1.ID {
		t.Errorf("lookup of the reordered record: %+v, %v", got, err)
	}
	if got := reg("other", reordered); got.ID != r1.ID {
		t.Errorf("the same schema under another subject: id %d, want %d", got.ID, r1.ID)
	}
	for name, text := range map[string]string{
		"another default":     `{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"long","default":9007199254740992},{"name":"b","type":["null","string"],"default":null}]}`,
		"fields swapped":      `{"type":"record","name":"R","namespace":"n","fields":[{"name":"b","type":["null","string"],"default":null},{"name":"a","type":"long","default":9007199254740993}]}`,
		"a doc":               `{"type":"record","name":"R","namespace":"n","doc":"d","fields":[{"name":"a","type":"long","default":9007199254740993},{"name":"b","type":["null","string"],"default":null}]}`,
		"union order swapped": `{"type":"record","name":"R","namespace":"n","fields":[{"name":"a","type":"long","default":9007199254740993},{"name":"b","type":["string","null"],"default":"x"}]}`,
	} {
		if canonical(text) == canonical(rec) {
			t.Errorf("%s: same canonical form as the record", name)
		}
	}
}
