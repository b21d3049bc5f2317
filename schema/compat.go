package schema

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/hamba/avro/v2"
)

// Schema compatibility.
//
// A level says which registered versions a new schema is checked against
// and in which direction (Confluent's levels):
//
//	BACKWARD             the new schema reads data written with the latest version (default)
//	BACKWARD_TRANSITIVE  ... with every version
//	FORWARD              the latest version reads data written with the new schema
//	FORWARD_TRANSITIVE   every version reads data written with the new schema
//	FULL                 both BACKWARD and FORWARD
//	FULL_TRANSITIVE      both, against every version
//	NONE                 no check
//
// "Reads" follows the Avro specification's schema resolution: a writer
// schema W can be read with a reader schema R when
//
//   - both are the same primitive, or W promotes to R: int to long, float or
//     double; long to float or double; float to double; string to bytes and
//     bytes to string;
//   - both are records with the same unqualified name (or R aliases W's full
//     name); every field of W that R has (by name or R's field aliases) is
//     readable, fields only W has are skipped, and every field only R has
//     carries a default;
//   - both are enums with the same name, and every symbol of W is a symbol of
//     R or R has a default;
//   - both are fixed with the same name and size;
//   - both are arrays (maps) whose items (values) are readable;
//   - W is a union and each of its branches is readable with R;
//   - R is a union (W is not) and the first branch of R that matches W
//     (same kind and name, or a promotion) reads W.
//
// Logical types are part of the type, a deliberate tightening: the
// specification lets readers ignore them, which silently turns days into
// microseconds or a decimal's two's-complement bytes into text. Where both
// sides carry a logical type the specification recognizes (hamba/avro's
// list: decimal, uuid, date, time-*, timestamp-*, local-timestamp-*,
// duration), they must be the same one, and a logical type may not appear
// or disappear. For decimal, the specification asks precision and scale to
// match; cdcd requires the same scale and lets the precision grow: the
// encoding (the unscaled integer in two's complement) does not depend on
// the precision, so every value written at decimal(p,s) is a valid
// decimal(p',s) for p' >= p. Widening numeric(12,2) to numeric(14,2) is
// therefore BACKWARD compatible and, like int to long, not FORWARD
// compatible. Scale changes and changes to or from unconstrained numeric
// (a string) are incompatible at every level but NONE.
//
// One cdcd rule beyond Avro: records that both carry "cdcd.key" (the row
// record of cdcd's value schemas) must name the same key columns, because
// a table's identity, partitioning and upserts follow its key.
//
// How the schemas of KeySchema and ValueSchema evolve under the default
// level (BACKWARD), DDL by DDL (TestTableEvolutionVerdicts proves each):
//
//	ADD COLUMN (any type, NULL or NOT NULL)   compatible: a nullable field defaults to null, a NOT NULL one
//	                                          to its type's zero
//	DROP COLUMN; RENAME (a drop plus an add)  compatible (a renamed column's old values are not carried over)
//	DROP NOT NULL; varchar(n) -> text         compatible
//	SET NOT NULL                              refused: the field becomes required, and records written
//	                                          before may hold null (as with Debezium's schemas)
//	int2 <-> int4 (both Avro int)             compatible
//	int -> bigint, real -> double precision   compatible (Avro promotions; also for key columns)
//	numeric(p,s) -> numeric(p',s), p' > p     compatible (cdcd's decimal rule)
//	bigint -> int, double -> real, p' < p     refused: narrowing
//	numeric scale change; numeric(p,s) <-> numeric; timestamptz <-> timestamp; int -> text
//	                                          refused: the encoding or the meaning changes
//	PRIMARY KEY change                        refused: by cdcd.key on the value subject, and on the key
//	                                          subject too when a key column is added or changes type
//
// A refusal is an *IncompatibleError whose problems name the field (the
// column), its old and new type and the reason.

// Compatibility is a compatibility level.
type Compatibility uint8

// Compatibility levels; the zero value is BACKWARD, the default.
const (
	Backward Compatibility = iota
	BackwardTransitive
	Forward
	ForwardTransitive
	Full
	FullTransitive
	None
)

var compatNames = [...]string{
	Backward: "BACKWARD", BackwardTransitive: "BACKWARD_TRANSITIVE", Forward: "FORWARD",
	ForwardTransitive: "FORWARD_TRANSITIVE", Full: "FULL", FullTransitive: "FULL_TRANSITIVE", None: "NONE",
}

func (c Compatibility) String() string {
	if int(c) < len(compatNames) {
		return compatNames[c]
	}
	return fmt.Sprintf("compatibility(%d)", uint8(c))
}

// ParseCompatibility parses a level name, case-insensitively.
func ParseCompatibility(s string) (Compatibility, error) {
	for c, n := range compatNames {
		if strings.EqualFold(n, s) {
			return Compatibility(c), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (one of %s)", ErrInvalidCompatibility, s, strings.Join(compatNames[:], ", "))
}

// backward reports whether the new schema must read older data.
func (c Compatibility) backward() bool {
	return c == Backward || c == BackwardTransitive || c == Full || c == FullTransitive
}

// forward reports whether older schemas must read new data.
func (c Compatibility) forward() bool {
	return c == Forward || c == ForwardTransitive || c == Full || c == FullTransitive
}

// transitive reports whether every version is checked, not only the latest.
func (c Compatibility) transitive() bool {
	return c == BackwardTransitive || c == ForwardTransitive || c == FullTransitive
}

// Incompatibility is one reason a schema cannot replace another.
type Incompatibility struct {
	// Path locates the problem by field names from the root record
	// ("before.amount"; "[]" steps into array items, "{}" into map values);
	// empty for the root.
	Path string
	// Field is the field the problem is about (the original column name
	// where cdcd sanitized it for Avro), or "" at the root.
	Field string
	// Old and New describe the type in the older and the newer schema
	// ("int", "decimal(12,2)", "record Value"); "absent" where the field is
	// missing on that side.
	Old, New string
	// Reason says what breaks, in a sentence.
	Reason string
}

func (p Incompatibility) String() string {
	if p.Path == "" {
		return p.Reason
	}
	return p.Path + ": " + p.Reason
}

// IncompatibleError is returned when a schema fails its subject's
// compatibility level. It unwraps to ErrIncompatible.
type IncompatibleError struct {
	Subject string
	Level   Compatibility
	// Version is the registered version the schema conflicts with (the
	// newest one, for transitive levels); 0 if unknown.
	Version int
	// Problems lists every reason found against Version, at least one.
	Problems []Incompatibility
}

// Messages renders the problems, one line each.
func (e *IncompatibleError) Messages() []string {
	m := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		m[i] = p.String()
	}
	return m
}

func (e *IncompatibleError) Error() string {
	v := ""
	if e.Version > 0 {
		v = fmt.Sprintf(" version %d of", e.Version)
	}
	return fmt.Sprintf("schema: incompatible with%s subject %s under %s: %s",
		v, e.Subject, e.Level, strings.Join(e.Messages(), "; "))
}

func (e *IncompatibleError) Unwrap() error { return ErrIncompatible }

// CheckCompatibility checks whether newer can follow older under level
// (the non-transitive meaning: older is the one version compared). Both
// are Avro schema texts. It returns nil, an error wrapping ErrInvalidSchema,
// or an *IncompatibleError (Subject and Version unset).
func CheckCompatibility(older, newer string, level Compatibility) error {
	o, err := parseAvro(older)
	if err != nil {
		return err
	}
	n, err := parseAvro(newer)
	if err != nil {
		return err
	}
	if p := problems(o, n, level); len(p) > 0 {
		return &IncompatibleError{Level: level, Problems: p}
	}
	return nil
}

// parseAvro parses and validates an Avro schema with a private name cache,
// so names defined by other schemas never leak in.
func parseAvro(s string) (avro.Schema, error) {
	parsed, err := avro.ParseWithCache(s, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSchema, err)
	}
	return parsed, nil
}

// problems returns why newer cannot follow older under level (nil if it can).
func problems(older, newer avro.Schema, level Compatibility) []Incompatibility {
	var out []Incompatibility
	if level.backward() {
		c := checker{newIsReader: true}
		c.check(newer, older, "")
		out = append(out, c.problems...)
	}
	if level.forward() {
		c := checker{newIsReader: false}
		c.check(older, newer, "")
		for _, p := range c.problems {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// checker checks that data written with one schema can be read with
// another, collecting every problem with its place.
type checker struct {
	// newIsReader: the reader is the newer schema (a backward check).
	newIsReader bool
	// seen holds the reader/writer record pairs already checked (or being
	// checked), so recursive and repeated named types are visited once.
	seen     map[[2]string]bool
	problems []Incompatibility
}

func deref(s avro.Schema) avro.Schema {
	if r, ok := s.(*avro.RefSchema); ok {
		return r.Schema()
	}
	return s
}

// check reports whether data written with w is readable with r. Problems
// inside records are recorded by the record check; a mismatch at this
// level is returned as a reason for the caller to place. The root is
// placed here when path is "".
func (c *checker) check(r, w avro.Schema, path string) bool {
	before := len(c.problems)
	ok, why := c.compatible(r, w, path)
	if !ok && (why != "" || len(c.problems) == before) {
		c.add(Incompatibility{Path: path, Old: c.oldOf(r, w), New: c.newOf(r, w), Reason: c.changed(r, w, why)})
	}
	return ok
}

func (c *checker) compatible(r, w avro.Schema, path string) (bool, string) {
	r, w = deref(r), deref(w)
	if wu, ok := w.(*avro.UnionSchema); ok {
		all, reason := true, ""
		for _, wb := range wu.Types() {
			if ok, why := c.compatible(r, wb, path); !ok {
				all = false
				if reason == "" {
					reason = why
				}
			}
		}
		return all, reason
	}
	if ru, ok := r.(*avro.UnionSchema); ok {
		for _, rb := range ru.Types() {
			if matches(deref(rb), w) {
				return c.compatible(rb, w, path)
			}
		}
		if w.Type() == avro.Null {
			return false, "null is no longer allowed"
		}
		for _, rb := range ru.Types() { // a branch of the same primitive type: why it does not match
			if rb = deref(rb); isPrimitive(w.Type()) && promotes(w.Type(), rb.Type()) {
				return logicalReadable(logicalOf(rb), logicalOf(w))
			}
		}
		return false, ""
	}
	switch w.Type() {
	case avro.Record:
		rr, ok := r.(*avro.RecordSchema)
		if !ok {
			return false, ""
		}
		return c.record(rr, w.(*avro.RecordSchema), path)
	case avro.Enum:
		re, ok := r.(*avro.EnumSchema)
		if !ok {
			return false, ""
		}
		we := w.(*avro.EnumSchema)
		if !nameMatches(re, we) {
			return false, "the enum's name changed"
		}
		var missing []string
		for _, s := range we.Symbols() {
			if !slices.Contains(re.Symbols(), s) {
				missing = append(missing, s)
			}
		}
		if len(missing) > 0 && !re.HasDefault() {
			if c.newIsReader {
				return false, fmt.Sprintf("symbols %s were removed and the enum has no default", strings.Join(missing, ", "))
			}
			return false, fmt.Sprintf("symbols %s were added and the old enum has no default", strings.Join(missing, ", "))
		}
		return true, ""
	case avro.Fixed:
		rf, ok := r.(*avro.FixedSchema)
		if !ok {
			return false, ""
		}
		wf := w.(*avro.FixedSchema)
		if !nameMatches(rf, wf) {
			return false, "the fixed type's name changed"
		}
		if rf.Size() != wf.Size() {
			return false, "the fixed size changed"
		}
		return logicalReadable(rf.Logical(), wf.Logical())
	case avro.Array:
		ra, ok := r.(*avro.ArraySchema)
		if !ok {
			return false, ""
		}
		return c.compatible(ra.Items(), w.(*avro.ArraySchema).Items(), path+"[]")
	case avro.Map:
		rm, ok := r.(*avro.MapSchema)
		if !ok {
			return false, ""
		}
		return c.compatible(rm.Values(), w.(*avro.MapSchema).Values(), path+"{}")
	}
	if !promotes(w.Type(), r.Type()) {
		return false, ""
	}
	return logicalReadable(logicalOf(r), logicalOf(w))
}

func (c *checker) record(r, w *avro.RecordSchema, path string) (bool, string) {
	if !nameMatches(r, w) {
		return false, "the record's name changed"
	}
	key := [2]string{r.FullName(), w.FullName()}
	if c.seen[key] {
		return true, ""
	}
	if c.seen == nil {
		c.seen = map[[2]string]bool{}
	}
	c.seen[key] = true
	ok := true
	if rk, wk := r.Prop(propKey), w.Prop(propKey); rk != nil && wk != nil && !reflect.DeepEqual(rk, wk) {
		ok = false
		o, n := wk, rk
		if !c.newIsReader {
			o, n = rk, wk
		}
		c.add(Incompatibility{Path: path, Old: fmt.Sprint(o), New: fmt.Sprint(n),
			Reason: fmt.Sprintf("key columns changed from %v to %v", o, n)})
	}
	for _, rf := range r.Fields() {
		wf := fieldFor(w, rf)
		fp := joinPath(path, rf.Name())
		if wf == nil {
			if rf.HasDefault() {
				continue
			}
			ok = false
			p := Incompatibility{Path: fp, Field: columnName(rf)}
			if c.newIsReader {
				p.Old, p.New = "absent", describe(rf.Type())
				p.Reason = fmt.Sprintf("field added without a default (%s): data written with the old schema has no value for it", p.New)
			} else {
				p.Old, p.New = describe(rf.Type()), "absent"
				p.Reason = fmt.Sprintf("field removed (%s) but the old schema has no default for it: old readers cannot read new data", p.Old)
			}
			c.add(p)
			continue
		}
		before := len(c.problems)
		fok, why := c.compatible(rf.Type(), wf.Type(), fp)
		if fok {
			continue
		}
		ok = false
		if why == "" && len(c.problems) > before {
			continue // a nested record placed its own problems
		}
		c.add(Incompatibility{Path: fp, Field: columnName(rf),
			Old: c.oldOf(rf.Type(), wf.Type()), New: c.newOf(rf.Type(), wf.Type()),
			Reason: c.changed(rf.Type(), wf.Type(), why)})
	}
	return ok, ""
}

func (c *checker) add(p Incompatibility) {
	if !slices.Contains(c.problems, p) {
		c.problems = append(c.problems, p)
	}
}

func (c *checker) oldOf(r, w avro.Schema) string {
	o, n := c.oldNew(r, w)
	return describeField(o, n)
}

func (c *checker) newOf(r, w avro.Schema) string {
	o, n := c.oldNew(r, w)
	return describeField(n, o)
}

func (c *checker) oldNew(r, w avro.Schema) (older, newer avro.Schema) {
	if c.newIsReader {
		return w, r
	}
	return r, w
}

// changed phrases a type change between reader r and writer w.
func (c *checker) changed(r, w avro.Schema, why string) string {
	s := fmt.Sprintf("type changed from %s to %s", c.oldOf(r, w), c.newOf(r, w))
	if why != "" {
		s += " (" + why + ")"
	}
	if c.newIsReader {
		return s + ": the new schema cannot read data written with the old one"
	}
	return s + ": readers of the old schema cannot read data written with the new one"
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func columnName(f *avro.Field) string {
	if orig, ok := f.Prop(propColumn).(string); ok && orig != "" {
		return orig
	}
	return f.Name()
}

// fieldFor finds the writer field that reader field rf reads: the one with
// its name, or one named by its aliases.
func fieldFor(w *avro.RecordSchema, rf *avro.Field) *avro.Field {
	for _, wf := range w.Fields() {
		if wf.Name() == rf.Name() {
			return wf
		}
	}
	for _, wf := range w.Fields() {
		if slices.Contains(rf.Aliases(), wf.Name()) {
			return wf
		}
	}
	return nil
}

// nameMatches: the same unqualified name, or the reader aliases the
// writer's full name.
func nameMatches(r, w avro.NamedSchema) bool {
	return r.Name() == w.Name() || slices.Contains(r.Aliases(), w.FullName())
}

// matches is the specification's shallow "match" that picks the branch of
// a reader union resolving a writer schema.
func matches(r, w avro.Schema) bool {
	switch w.Type() {
	case avro.Record, avro.Enum:
		return r.Type() == w.Type() && nameMatches(r.(avro.NamedSchema), w.(avro.NamedSchema))
	case avro.Fixed:
		rf, ok := r.(*avro.FixedSchema)
		return ok && nameMatches(rf, w.(*avro.FixedSchema)) && rf.Size() == w.(*avro.FixedSchema).Size()
	case avro.Array:
		ra, ok := r.(*avro.ArraySchema)
		return ok && matches(deref(ra.Items()), deref(w.(*avro.ArraySchema).Items()))
	case avro.Map:
		rm, ok := r.(*avro.MapSchema)
		return ok && matches(deref(rm.Values()), deref(w.(*avro.MapSchema).Values()))
	case avro.Union:
		return true
	}
	if r.Type() == avro.Union {
		return true
	}
	if !promotes(w.Type(), r.Type()) {
		return false
	}
	ok, _ := logicalReadable(logicalOf(r), logicalOf(w))
	return ok
}

// promotes reports whether primitive values of type w are readable as r.
func promotes(w, r avro.Type) bool {
	if w == r {
		return true
	}
	switch w {
	case avro.Int:
		return r == avro.Long || r == avro.Float || r == avro.Double
	case avro.Long:
		return r == avro.Float || r == avro.Double
	case avro.Float:
		return r == avro.Double
	case avro.String:
		return r == avro.Bytes
	case avro.Bytes:
		return r == avro.String
	}
	return false
}

func logicalOf(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

// logicalReadable applies cdcd's logical-type rule (see the package notes
// above): the same logical type, and for decimals the same scale and a
// precision that does not shrink.
func logicalReadable(r, w avro.LogicalSchema) (bool, string) {
	switch {
	case r == nil && w == nil:
		return true, ""
	case r == nil || w == nil || r.Type() != w.Type():
		return false, fmt.Sprintf("logical types %s and %s differ", logicalName(w), logicalName(r))
	}
	rd, ok1 := r.(*avro.DecimalLogicalSchema)
	wd, ok2 := w.(*avro.DecimalLogicalSchema)
	if !ok1 || !ok2 {
		return true, ""
	}
	if rd.Scale() != wd.Scale() {
		return false, "decimal scales differ"
	}
	if rd.Precision() < wd.Precision() {
		return false, fmt.Sprintf("values of precision %d do not fit precision %d", wd.Precision(), rd.Precision())
	}
	return true, ""
}

func logicalName(l avro.LogicalSchema) string {
	if l == nil {
		return "none"
	}
	return string(l.Type())
}

// describeField describes s for a message; a nullable union is described
// by its non-null branch when other is nullable too, so messages about
// cdcd's row fields (all nullable) name the column types.
func describeField(s, other avro.Schema) string {
	if inner, ok := nullableInner(s); ok {
		if _, ok := nullableInner(other); ok {
			return describe(inner)
		}
		return describe(inner) + " or null"
	}
	return describe(s)
}

func nullableInner(s avro.Schema) (avro.Schema, bool) {
	u, ok := deref(s).(*avro.UnionSchema)
	if !ok || len(u.Types()) != 2 {
		return nil, false
	}
	a, b := u.Types()[0], u.Types()[1]
	switch {
	case a.Type() == avro.Null && b.Type() != avro.Null:
		return b, true
	case b.Type() == avro.Null && a.Type() != avro.Null:
		return a, true
	}
	return nil, false
}

// describe renders a type briefly: "int", "decimal(12,2)", "record Value",
// "array<string>", "union[null, int, string]".
func describe(s avro.Schema) string {
	s = deref(s)
	switch t := s.(type) {
	case *avro.RecordSchema:
		return "record " + t.Name()
	case *avro.EnumSchema:
		return "enum " + t.Name()
	case *avro.FixedSchema:
		if l := t.Logical(); l != nil {
			return fmt.Sprintf("fixed(%d) %s", t.Size(), describeLogical(l))
		}
		return fmt.Sprintf("fixed %s(%d)", t.Name(), t.Size())
	case *avro.ArraySchema:
		return "array<" + describe(t.Items()) + ">"
	case *avro.MapSchema:
		return "map<" + describe(t.Values()) + ">"
	case *avro.UnionSchema:
		parts := make([]string, len(t.Types()))
		for i, b := range t.Types() {
			parts[i] = describe(b)
		}
		return "union[" + strings.Join(parts, ", ") + "]"
	case *avro.PrimitiveSchema:
		if l := t.Logical(); l != nil {
			return describeLogical(l)
		}
	}
	return string(s.Type())
}

func describeLogical(l avro.LogicalSchema) string {
	if d, ok := l.(*avro.DecimalLogicalSchema); ok {
		return fmt.Sprintf("decimal(%d,%d)", d.Precision(), d.Scale())
	}
	return string(l.Type())
}

func isPrimitive(t avro.Type) bool {
	switch t {
	case avro.Null, avro.Boolean, avro.Int, avro.Long, avro.Float, avro.Double, avro.Bytes, avro.String:
		return true
	}
	return false
}
