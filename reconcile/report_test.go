package reconcile

import (
	"strings"
	"testing"
)

// TestWriteTextRepair: the terminal report says a table was repaired, how,
// and what the comparison after found.
func TestWriteTextRepair(t *testing.T) {
	fixed := &TableReport{Table: "public.a", Iceberg: "cdc.a", Rows: 10, MissingCount: 1,
		Repaired: &Repaired{RepairPlan: RepairPlan{Keys: 1, Where: `("id") IN ((E'5'::integer))`}, After: &TableReport{Rows: 1}}}
	left := &TableReport{Table: "public.b", Iceberg: "cdc.b", Rows: 10, ExtraCount: 1,
		Repaired: &Repaired{RepairPlan: RepairPlan{Keys: 1, Replace: true, Why: "keys in Iceberg only"},
			After: &TableReport{Rows: 9, MissingCount: 1, Missing: []KeyDiff{{Key: map[string]string{"id": "7"}}}}}}
	failed := &TableReport{Table: "public.c", Iceberg: "cdc.c", DifferCount: 1,
		Repaired: &Repaired{RepairPlan: RepairPlan{Keys: 1}, Error: "the daemon does not answer"}}
	var b strings.Builder
	WriteText(&b, []*TableReport{fixed, left, failed})
	out := b.String()
	for _, want := range []string{
		"cdc.a  repaired",
		"cdc.a: repaired by cdcd snapshot --where on the 1 keys found; compared again: equal (1 rows)",
		"cdc.b  DIFFERS",
		"cdc.b: repaired by cdcd snapshot --replace of the whole table (keys in Iceberg only); compared again, it still differs:\n  missing in Iceberg: id=7",
		"cdc.c  DIFFERS",
		"cdc.c: repair by cdcd snapshot --where on the 1 keys found failed: the daemon does not answer",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the report does not say %q:\n%s", want, out)
		}
	}
}
