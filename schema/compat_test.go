package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

// rec builds a record schema "ns.R" with the given field JSON.
func rec(fields ...string) string {
	return `{"type":"record","name":"R","namespace":"ns","fields":[` + strings.Join(fields, ",") + `]}`
}

// fieldOf is the single-field record {"f": typ}.
func fieldOf(typ string) string { return rec(`{"name":"f","type":` + typ + `}`) }

const (
	decimal12_2 = `{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}`
	decimal14_2 = `{"type":"bytes","logicalType":"decimal","precision":14,"scale":2}`
	decimal10_2 = `{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}`
	decimal12_3 = `{"type":"bytes","logicalType":"decimal","precision":12,"scale":3}`
	colorEnum   = `{"type":"enum","name":"Color","symbols":["RED","GREEN"]}`
	colorEnum3  = `{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE"]}`
	colorEnum1  = `{"type":"enum","name":"Color","symbols":["RED"]}`
	colorEnumD  = `{"type":"enum","name":"Color","symbols":["RED","GREEN","OTHER"],"default":"OTHER"}`
	colorEnum3D = `{"type":"enum","name":"Color","symbols":["RED","GREEN","BLUE","OTHER"],"default":"OTHER"}`
)

func nested(fields ...string) string {
	return `{"type":"record","name":"Inner","fields":[` + strings.Join(fields, ",") + `]}`
}

// compatCase is one schema change. back: the new schema reads data written
// with the old one; fwd: the old schema reads data written with the new one.
// spec: the verdicts are the Avro specification's own (no cdcd rule
// involved), so hamba/avro's checker, which follows the specification
// without logical types, must agree.
type compatCase struct {
	name      string
	old, new  string
	back, fwd bool
	spec      bool
}

var compatCases = []compatCase{
	{"identical", fieldOf(`"int"`), fieldOf(`"int"`), true, true, true},
	{"field added with default", fieldOf(`"int"`), rec(`{"name":"f","type":"int"}`, `{"name":"g","type":"string","default":""}`), true, true, true},
	{"nullable field added with default null", fieldOf(`"int"`), rec(`{"name":"f","type":"int"}`, `{"name":"g","type":["null","string"],"default":null}`), true, true, true},
	{"field added without default", fieldOf(`"int"`), rec(`{"name":"f","type":"int"}`, `{"name":"g","type":"string"}`), false, true, true},
	{"field removed that had a default", rec(`{"name":"f","type":"int"}`, `{"name":"g","type":"string","default":""}`), fieldOf(`"int"`), true, true, true},
	{"field removed without default", rec(`{"name":"f","type":"int"}`, `{"name":"g","type":"string"}`), fieldOf(`"int"`), true, false, true},
	{"field renamed, new name aliases old", fieldOf(`"int"`), rec(`{"name":"g","type":"int","aliases":["f"]}`), true, false, true},
	{"int to long", fieldOf(`"int"`), fieldOf(`"long"`), true, false, true},
	{"int to float", fieldOf(`"int"`), fieldOf(`"float"`), true, false, true},
	{"int to double", fieldOf(`"int"`), fieldOf(`"double"`), true, false, true},
	{"long to float", fieldOf(`"long"`), fieldOf(`"float"`), true, false, true},
	{"long to double", fieldOf(`"long"`), fieldOf(`"double"`), true, false, true},
	{"float to double", fieldOf(`"float"`), fieldOf(`"double"`), true, false, true},
	{"long to int (narrowing)", fieldOf(`"long"`), fieldOf(`"int"`), false, true, true},
	{"double to float (narrowing)", fieldOf(`"double"`), fieldOf(`"float"`), false, true, true},
	{"string to bytes", fieldOf(`"string"`), fieldOf(`"bytes"`), true, true, true},
	{"bytes to string", fieldOf(`"bytes"`), fieldOf(`"string"`), true, true, true},
	{"int to string", fieldOf(`"int"`), fieldOf(`"string"`), false, false, true},
	{"boolean to int", fieldOf(`"boolean"`), fieldOf(`"int"`), false, false, true},
	{"enum symbol added", fieldOf(colorEnum), fieldOf(colorEnum3), true, false, true},
	{"enum symbol removed", fieldOf(colorEnum), fieldOf(colorEnum1), false, true, true},
	{"enum symbol added, both with default", fieldOf(colorEnumD), fieldOf(colorEnum3D), true, true, true},
	{"enum renamed", fieldOf(colorEnum), fieldOf(`{"type":"enum","name":"Colour","symbols":["RED","GREEN"]}`), false, false, true},
	{"union widened", fieldOf(`["null","int"]`), fieldOf(`["null","int","string"]`), true, false, true},
	{"union narrowed", fieldOf(`["null","int","string"]`), fieldOf(`["null","int"]`), false, true, true},
	{"union branch promoted", fieldOf(`["null","int"]`), fieldOf(`["null","long"]`), true, false, true},
	{"made nullable", fieldOf(`"int"`), fieldOf(`["null","int"]`), true, false, true},
	{"made not nullable", fieldOf(`["null","int"]`), fieldOf(`"int"`), false, true, true},
	{"record renamed", fieldOf(`"int"`), strings.Replace(fieldOf(`"int"`), `"name":"R"`, `"name":"S"`, 1), false, false, true},
	{"record renamed, new aliases old", fieldOf(`"int"`), strings.Replace(fieldOf(`"int"`), `"name":"R"`, `"name":"S","aliases":["ns.R"]`, 1), true, false, true},
	{"namespace changed (names compare unqualified)", fieldOf(`"int"`), strings.Replace(fieldOf(`"int"`), `"namespace":"ns"`, `"namespace":"other"`, 1), true, true, true},
	{"nested record field promoted", fieldOf(nested(`{"name":"x","type":"int"}`)), fieldOf(nested(`{"name":"x","type":"long"}`)), true, false, true},
	{"nested record field added without default", fieldOf(nested(`{"name":"x","type":"int"}`)), fieldOf(nested(`{"name":"x","type":"int"}`, `{"name":"y","type":"int"}`)), false, true, true},
	{"nested record field changed type", fieldOf(nested(`{"name":"x","type":"int"}`)), fieldOf(nested(`{"name":"x","type":"string"}`)), false, false, true},
	{"array items promoted", fieldOf(`{"type":"array","items":"int"}`), fieldOf(`{"type":"array","items":"long"}`), true, false, true},
	{"array items changed", fieldOf(`{"type":"array","items":"int"}`), fieldOf(`{"type":"array","items":"string"}`), false, false, true},
	{"array of records, field added with default", fieldOf(`{"type":"array","items":` + nested(`{"name":"x","type":"int"}`) + `}`),
		fieldOf(`{"type":"array","items":` + nested(`{"name":"x","type":"int"}`, `{"name":"y","type":"int","default":0}`) + `}`), true, true, true},
	{"map values promoted", fieldOf(`{"type":"map","values":"float"}`), fieldOf(`{"type":"map","values":"double"}`), true, false, true},
	{"map values changed", fieldOf(`{"type":"map","values":"string"}`), fieldOf(`{"type":"map","values":"int"}`), false, false, true},
	{"array to map", fieldOf(`{"type":"array","items":"int"}`), fieldOf(`{"type":"map","values":"int"}`), false, false, true},
	{"fixed size changed", fieldOf(`{"type":"fixed","name":"F","size":8}`), fieldOf(`{"type":"fixed","name":"F","size":16}`), false, false, true},
	// Logical types: cdcd's rule (see compat.go).
	{"decimal precision widened", fieldOf(decimal12_2), fieldOf(decimal14_2), true, false, false},
	{"decimal precision narrowed", fieldOf(decimal12_2), fieldOf(decimal10_2), false, true, false},
	{"decimal scale changed", fieldOf(decimal12_2), fieldOf(decimal12_3), false, false, false},
	{"nullable decimal precision widened", fieldOf(`["null",` + decimal12_2 + `]`), fieldOf(`["null",` + decimal14_2 + `]`), true, false, false},
	{"decimal to plain bytes", fieldOf(decimal12_2), fieldOf(`"bytes"`), false, false, false},
	{"decimal to string", fieldOf(decimal12_2), fieldOf(`"string"`), false, false, false},
	{"date to int", fieldOf(`{"type":"int","logicalType":"date"}`), fieldOf(`"int"`), false, false, false},
	{"date to timestamp-micros", fieldOf(`{"type":"int","logicalType":"date"}`), fieldOf(`{"type":"long","logicalType":"timestamp-micros"}`), false, false, false},
	{"timestamp-millis to timestamp-micros", fieldOf(`{"type":"long","logicalType":"timestamp-millis"}`), fieldOf(`{"type":"long","logicalType":"timestamp-micros"}`), false, false, false},
	{"timestamp-micros to local-timestamp-micros", fieldOf(`{"type":"long","logicalType":"timestamp-micros"}`), fieldOf(`{"type":"long","logicalType":"local-timestamp-micros"}`), false, false, false},
	{"unknown logical type is ignored", fieldOf(`{"type":"string","logicalType":"zip-code"}`), fieldOf(`"string"`), true, true, true},
	{"props are ignored", fieldOf(`{"type":"string","connect.name":"io.debezium.data.Json"}`), fieldOf(`"string"`), true, true, true},
	// cdcd's key rule.
	{"cdcd.key changed", strings.Replace(fieldOf(`"int"`), `]}`, `],"cdcd.key":["f"]}`, 1), strings.Replace(fieldOf(`"int"`), `]}`, `],"cdcd.key":["f","g"]}`, 1), false, false, false},
	// Top-level non-record schemas.
	{"top-level int to long", `"int"`, `"long"`, true, false, true},
	{"top-level string to int", `"string"`, `"int"`, false, false, true},
}

var allLevels = []Compatibility{Backward, BackwardTransitive, Forward, ForwardTransitive, Full, FullTransitive, None}

func wantVerdict(level Compatibility, back, fwd bool) bool {
	switch level {
	case None:
		return true
	case Backward, BackwardTransitive:
		return back
	case Forward, ForwardTransitive:
		return fwd
	}
	return back && fwd
}

// TestCompatibilityMatrix checks every change under every level, first
// between two schemas, then through a registry holding three versions
// (old, old plus an unrelated defaulted field, new), so the transitive
// levels check against both earlier versions.
func TestCompatibilityMatrix(t *testing.T) {
	ctx := context.Background()
	for _, tc := range compatCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, level := range allLevels {
				want := wantVerdict(level, tc.back, tc.fwd)
				err := CheckCompatibility(tc.old, tc.new, level)
				if (err == nil) != want {
					t.Errorf("%s: CheckCompatibility = %v, want compatible=%v", level, err, want)
				}
				var ierr *IncompatibleError
				if err != nil && (!errors.As(err, &ierr) || len(ierr.Problems) == 0 || !errors.Is(err, ErrIncompatible)) {
					t.Errorf("%s: error %v is not an IncompatibleError with problems", level, err)
				}

				if !strings.HasPrefix(tc.old, `{"type":"record"`) {
					continue
				}
				reg, err := OpenRegistry(ctx, &testStore{})
				if err != nil {
					t.Fatal(err)
				}
				if err := reg.SetCompatibility(ctx, "", level); err != nil {
					t.Fatal(err)
				}
				padded := strings.Replace(tc.old, `"fields":[`, `"fields":[{"name":"zz_pad","type":["null","string"],"default":null},`, 1)
				for i, s := range []string{tc.old, padded} {
					if _, err := reg.Register(ctx, "s", s); err != nil {
						t.Fatalf("%s: v%d: %v", level, i+1, err)
					}
				}
				_, err = reg.Register(ctx, "s", tc.new)
				if (err == nil) != want {
					t.Errorf("%s: registering v3 = %v, want compatible=%v", level, err, want)
				}
			}
		})
	}
}

// TestHambaAgreesOnSpecCases cross-checks the specification's verdicts
// with hamba/avro's SchemaCompatibility (which ignores logical types and
// reports no places, which is why cdcd has its own checker).
func TestHambaAgreesOnSpecCases(t *testing.T) {
	for _, tc := range compatCases {
		if !tc.spec {
			continue
		}
		old, nw := avro.MustParse(tc.old), avro.MustParse(tc.new)
		back := avro.NewSchemaCompatibility().Compatible(nw, old) == nil
		fwd := avro.NewSchemaCompatibility().Compatible(old, nw) == nil
		if back != tc.back || fwd != tc.fwd {
			t.Errorf("%s: hamba says backward=%v forward=%v, the matrix says %v %v", tc.name, back, fwd, tc.back, tc.fwd)
		}
	}
}

// TestTransitiveLevels: three versions where the third is compatible with
// the second but not the first; only the transitive level notices.
func TestTransitiveLevels(t *testing.T) {
	ctx := context.Background()
	chains := []struct {
		plain, transitive Compatibility
		versions          [3]string
	}{
		{Backward, BackwardTransitive, [3]string{fieldOf(`"string"`), rec(), rec(`{"name":"f","type":"int","default":0}`)}},
		{Forward, ForwardTransitive, [3]string{rec(`{"name":"f","type":"int","default":0}`), rec(), fieldOf(`"string"`)}},
		{Full, FullTransitive, [3]string{rec(`{"name":"f","type":"int","default":0}`), rec(), rec(`{"name":"f","type":"string","default":""}`)}},
	}
	for _, c := range chains {
		for _, level := range []Compatibility{c.plain, c.transitive} {
			reg, _ := OpenRegistry(ctx, &testStore{})
			if err := reg.SetCompatibility(ctx, "s", level); err != nil {
				t.Fatal(err)
			}
			for i, s := range c.versions[:2] {
				if _, err := reg.Register(ctx, "s", s); err != nil {
					t.Fatalf("%s v%d: %v", level, i+1, err)
				}
			}
			_, err := reg.Register(ctx, "s", c.versions[2])
			if level == c.plain && err != nil {
				t.Errorf("%s rejected v3: %v", level, err)
			}
			var ierr *IncompatibleError
			if level == c.transitive && (!errors.As(err, &ierr) || ierr.Version != 1 || ierr.Level != level) {
				t.Errorf("%s: err = %v, want an IncompatibleError against version 1", level, err)
			}
		}
	}
}

func TestIncompatibilityMessages(t *testing.T) {
	for _, tc := range []struct {
		old, new string
		level    Compatibility
		want     Incompatibility
	}{
		{fieldOf(`["null","int"]`), fieldOf(`["null","string"]`), Backward, Incompatibility{Path: "f", Field: "f", Old: "int", New: "string",
			Reason: "type changed from int to string: the new schema cannot read data written with the old one"}},
		{fieldOf(`["null",` + decimal12_2 + `]`), fieldOf(`["null",` + decimal10_2 + `]`), Backward, Incompatibility{Path: "f", Field: "f", Old: "decimal(12,2)", New: "decimal(10,2)",
			Reason: "type changed from decimal(12,2) to decimal(10,2) (values of precision 12 do not fit precision 10): the new schema cannot read data written with the old one"}},
		{fieldOf(decimal12_2), fieldOf(decimal14_2), Forward, Incompatibility{Path: "f", Field: "f", Old: "decimal(12,2)", New: "decimal(14,2)",
			Reason: "type changed from decimal(12,2) to decimal(14,2) (values of precision 14 do not fit precision 12): readers of the old schema cannot read data written with the new one"}},
		{fieldOf(`"int"`), rec(`{"name":"f","type":"int"}`, `{"name":"g","type":"string","cdcd.column":"g-col"}`), Backward, Incompatibility{Path: "g", Field: "g-col", Old: "absent", New: "string",
			Reason: "field added without a default (string): data written with the old schema has no value for it"}},
		{fieldOf(nested(`{"name":"x","type":"int"}`)), fieldOf(nested(`{"name":"x","type":"boolean"}`)), Full, Incompatibility{Path: "f.x", Field: "x", Old: "int", New: "boolean",
			Reason: "type changed from int to boolean: the new schema cannot read data written with the old one"}},
		{fieldOf(`["null","int"]`), fieldOf(`"int"`), Backward, Incompatibility{Path: "f", Field: "f", Old: "int or null", New: "int",
			Reason: "type changed from int or null to int: the new schema cannot read data written with the old one"}},
		{fieldOf(colorEnum), fieldOf(colorEnum1), Backward, Incompatibility{Path: "f", Field: "f", Old: "enum Color", New: "enum Color",
			Reason: "type changed from enum Color to enum Color (symbols GREEN were removed and the enum has no default): the new schema cannot read data written with the old one"}},
		{`"int"`, `"string"`, Backward, Incompatibility{Old: "int", New: "string",
			Reason: "type changed from int to string: the new schema cannot read data written with the old one"}},
	} {
		err := CheckCompatibility(tc.old, tc.new, tc.level)
		var ierr *IncompatibleError
		if !errors.As(err, &ierr) {
			t.Fatalf("%s -> %s: %v", tc.old, tc.new, err)
		}
		if ierr.Problems[0] != tc.want {
			t.Errorf("%s -> %s:\n got %#v\nwant %#v", tc.old, tc.new, ierr.Problems[0], tc.want)
		}
	}
}

func TestRecursiveSchemas(t *testing.T) {
	list := func(extra string) string {
		return `{"type":"record","name":"Node","fields":[{"name":"v","type":"int"},{"name":"next","type":["null","Node"],"default":null}` + extra + `]}`
	}
	if err := CheckCompatibility(list(""), list(`,{"name":"w","type":"long","default":0}`), FullTransitive); err != nil {
		t.Fatal(err)
	}
	if err := CheckCompatibility(list(""), list(`,{"name":"w","type":"long"}`), Backward); err == nil {
		t.Fatal("a field without default in a recursive record was accepted")
	}
}

func TestCheckCompatibilityRejectsInvalidSchemas(t *testing.T) {
	for _, s := range []string{`{"type":"record"}`, `not json`, `{"type":"record","name":"R","fields":[{"name":"f","type":"Missing"}]}`,
		`{"type":"record","name":"R","fields":[{"name":"f","type":["null","int"],"default":5}]}`} {
		if err := CheckCompatibility(`"int"`, s, Backward); !errors.Is(err, ErrInvalidSchema) {
			t.Errorf("%s: %v, want ErrInvalidSchema", s, err)
		}
	}
}

func TestParseCompatibility(t *testing.T) {
	for _, l := range allLevels {
		got, err := ParseCompatibility(strings.ToLower(l.String()))
		if err != nil || got != l {
			t.Errorf("%s: %v %v", l, got, err)
		}
	}
	if _, err := ParseCompatibility("SIDEWAYS"); !errors.Is(err, ErrInvalidCompatibility) {
		t.Error(err)
	}
	if fmt.Sprint(Compatibility(0)) != "BACKWARD" {
		t.Error("the zero level must be BACKWARD")
	}
}
