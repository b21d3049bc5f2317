package mask

import (
	"errors"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

func people() *schema.Table {
	return &schema.Table{Namespace: "public", Name: "people", Columns: []schema.Column{
		{Name: "id", Kind: schema.Int64, SourceType: "bigint"},
		{Name: "email", Kind: schema.String, Nullable: true, SourceType: "text"},
		{Name: "ssn", Kind: schema.String, Nullable: true, SourceType: "text"},
		{Name: "salary", Kind: schema.Decimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
		{Name: "note", Kind: schema.String, Nullable: true, SourceType: "text"},
	}, Key: []int{0}}
}

var salt = []byte("0123456789abcdef")

func TestMaskChange(t *testing.T) {
	m := New(salt, map[string]Rules{"public.people": {Exclude: []string{"ssn"}, Hash: []string{"email"}, Redact: []string{"salary"}}})
	tbl := people()
	in := source.Change{Table: tbl, Op: source.OpUpdate,
		Before: []any{int64(7), nil, nil, nil, nil},
		After:  []any{int64(7), "ann@example.com", "123-45-6789", "1000.00", schema.Unchanged}}
	out, err := m.Change(&in)
	if err != nil {
		t.Fatal(err)
	}
	if in.After[2] != "123-45-6789" || in.Table != tbl {
		t.Fatal("the input change was modified")
	}
	mt := out.Table
	if got := mt.String(); got != "public.people(id int64 key, email string null, salary string null, note string null)" {
		t.Errorf("masked table %s", got)
	}
	if mt.Columns[1].SourceType != "hmac_sha256(text)" || mt.Columns[2].SourceType != "redacted(numeric(12,2))" {
		t.Errorf("source types %+v", mt.Columns)
	}
	want := []any{int64(7), Hash(salt, []byte("ann@example.com")), Redacted, schema.Unchanged}
	for i := range want {
		if out.After[i] != want[i] {
			t.Errorf("after[%d] = %v, want %v", i, out.After[i], want[i])
		}
	}
	if len(out.Before) != 4 || out.Before[1] != nil || out.Before[2] != nil {
		t.Errorf("before %v: NULLs stay NULL", out.Before)
	}
	// One masked version per table version: a stable pointer.
	again, _ := m.Change(&in)
	if again.Table != mt {
		t.Error("the masked version changed between changes")
	}
	// The Avro value schema describes the masked columns.
	vs, err := schema.ValueSchema(mt, "p.public.people")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(vs, `"ssn"`) || !strings.Contains(vs, `hmac_sha256(text)`) {
		t.Errorf("value schema: %s", vs)
	}
	// Unmasked tables pass through untouched.
	other := &schema.Table{Namespace: "public", Name: "orders", Columns: tbl.Columns, Key: []int{0}}
	c := source.Change{Table: other, After: []any{int64(1), "x", "y", "1.00", "n"}}
	if got, _ := m.Change(&c); got != &c {
		t.Error("an unmasked change was copied")
	}
}

func TestHashedKey(t *testing.T) {
	m := New(salt, map[string]Rules{"public.people": {Hash: []string{"id", "email"}}})
	out, err := m.Change(&source.Change{Table: people(), After: []any{int64(42), "b@x", nil, nil, nil}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Table.Key[0] != 0 || out.Table.Columns[0].Kind != schema.String || out.After[0] != Hash(salt, []byte("42")) {
		t.Errorf("hashed key: %s %v", out.Table, out.After)
	}
	if out.After[0] == Hash([]byte("another salt...."), []byte("42")) {
		t.Error("the salt does not matter")
	}
}

func TestRuleErrors(t *testing.T) {
	for name, r := range map[string]Rules{
		`has no column "mail"`:           {Hash: []string{"mail"}},
		`key column "id" cannot be excl`: {Exclude: []string{"id"}},
		`key column "id" cannot be reda`: {Redact: []string{"id"}},
	} {
		m := New(salt, map[string]Rules{"public.people": r})
		_, err := m.Change(&source.Change{Table: people(), After: make([]any, 5)})
		if !errors.Is(err, ErrRule) || !strings.Contains(err.Error(), name) {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

func TestText(t *testing.T) {
	u := [16]byte{0x12, 0x34}
	for _, c := range []struct {
		v    any
		want string
	}{{"x", "x"}, {int64(-3), "-3"}, {1.5, "1.5"}, {float32(0.1), "0.1"}, {true, "true"}, {u, "12340000-0000-0000-0000-000000000000"}} {
		if got := Text(c.v); got != c.want {
			t.Errorf("Text(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	m := New(salt, map[string]Rules{"public.people": {Hash: []string{"note"}}})
	tbl := &schema.Table{Namespace: "public", Name: "people", Columns: []schema.Column{{Name: "id", Kind: schema.Int64}, {Name: "note", Kind: schema.Bytes}}, Key: []int{0}}
	out, _ := m.Change(&source.Change{Table: tbl, After: []any{int64(1), []byte{0xff, 0}}})
	if out.After[1] != Hash(salt, []byte{0xff, 0}) {
		t.Error("bytes are hashed raw")
	}
}
