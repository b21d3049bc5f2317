package pgident

import (
	"errors"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		in, schema, table, canonical string
	}{
		{"orders", "public", "orders", "public.orders"},
		{"sales.Orders", "sales", "Orders", `sales."Orders"`},
		{`public."Order Items"`, "public", "Order Items", `public."Order Items"`},
		{`"Order Items"`, "public", "Order Items", `public."Order Items"`},
		{`"My Schema"."a.b"`, "My Schema", "a.b", `"My Schema"."a.b"`},
		{`public."say ""hi"""`, "public", `say "hi"`, `public."say ""hi"""`},
		{`"Größe"`, "public", "Größe", `public."Größe"`},
		{"a$b._x1", "a$b", "_x1", "a$b._x1"},
	} {
		s, tb, err := Split(c.in)
		if err != nil || s != c.schema || tb != c.table {
			t.Errorf("Split(%q) = %q, %q, %v; want %q, %q", c.in, s, tb, err, c.schema, c.table)
			continue
		}
		if got := Canonical(s, tb); got != c.canonical {
			t.Errorf("Canonical of %q = %q, want %q", c.in, got, c.canonical)
		}
		if s2, t2, err := Split(c.canonical); err != nil || s2 != s || t2 != tb {
			t.Errorf("the canonical form %q does not read back: %q %q %v", c.canonical, s2, t2, err)
		}
	}
	for _, bad := range []string{"", "a.b.c", "Order Items", `public."open`, `"".t`, "1abc", "a..b", `a."b"c`, "a.", `"x` + "\x00" + `"`,
		"a234567890123456789012345678901234567890123456789012345678901234"} {
		if _, _, err := Split(bad); !errors.Is(err, ErrSyntax) {
			t.Errorf("Split(%q) = %v, want ErrSyntax", bad, err)
		}
	}
}

func TestTargetParts(t *testing.T) {
	for _, c := range []struct{ in, topic, iceberg string }{
		{"orders", "orders", "orders"},
		{"Order Items", "Order_Items", "Order_Items"},
		{"Größe", "Gr__e", "Größe"},
		{"a.b-c$d", "a_b-c$d", "a_b_c$d"},
	} {
		if got := TopicPart(c.in); got != c.topic {
			t.Errorf("TopicPart(%q) = %q, want %q", c.in, got, c.topic)
		}
		if got := IcebergPart(c.in); got != c.iceberg {
			t.Errorf("IcebergPart(%q) = %q, want %q", c.in, got, c.iceberg)
		}
	}
}
