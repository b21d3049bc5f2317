package schema

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// testStore is an in-memory Store that can compact itself like the log's
// compacted _schemas topic.
type testStore struct {
	mu           sync.Mutex
	keys, values [][]byte
	fail         error
}

func (s *testStore) Load(_ context.Context, fn func(k, v []byte) error) error {
	s.mu.Lock()
	keys, values := append([][]byte(nil), s.keys...), append([][]byte(nil), s.values...)
	s.mu.Unlock()
	for i := range keys {
		if err := fn(keys[i], values[i]); err != nil {
			return err
		}
	}
	return nil
}

func (s *testStore) Append(_ context.Context, k, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.keys, s.values = append(s.keys, k), append(s.values, v)
	return nil
}

// compact keeps the newest record of each key, in their order, and drops
// tombstones (what the log's cleaner does once they are old enough).
func (s *testStore) compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	last := map[string]int{}
	for i, k := range s.keys {
		last[string(k)] = i
	}
	var keys, values [][]byte
	for i, k := range s.keys {
		if last[string(k)] == i && s.values[i] != nil {
			keys, values = append(keys, k), append(values, s.values[i])
		}
	}
	s.keys, s.values = keys, values
}

// registryState is everything observable about a registry.
type registryState struct {
	Subjects []string
	Versions map[string][]SubjectVersion
	Levels   map[string]Compatibility
	Own      map[string]bool
}

func stateOf(t *testing.T, r *Registry, subjects ...string) registryState {
	t.Helper()
	st := registryState{Subjects: r.Subjects(), Versions: map[string][]SubjectVersion{}, Levels: map[string]Compatibility{}, Own: map[string]bool{}}
	for _, s := range append(subjects, "") {
		st.Levels[s], st.Own[s] = r.Compatibility(s)
		if s != "" {
			st.Versions[s], _ = r.Versions(s)
		}
	}
	return st
}

func TestRegistrySurvivesRestartAndCompaction(t *testing.T) {
	ctx := context.Background()
	st := &testStore{}
	r, err := OpenRegistry(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	mustRegister := func(subject, schema string) uint32 {
		t.Helper()
		id, err := r.Register(ctx, subject, schema)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	a1 := mustRegister("a-value", fieldOf(`"int"`))
	a2 := mustRegister("a-value", fieldOf(`"long"`))
	if again := mustRegister("a-value", "\n"+fieldOf(`"int"`)+"  "); again != a1 {
		t.Fatalf("re-registering v1 (with whitespace) gave id %d, want %d", again, a1)
	}
	b1 := mustRegister("b-value", fieldOf(`"int"`)) // same text: same id
	if b1 != a1 {
		t.Fatalf("same schema under another subject: id %d, want shared id %d", b1, a1)
	}
	if err := r.SetCompatibility(ctx, "", Full); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCompatibility(ctx, "a-value", None); err != nil {
		t.Fatal(err)
	}
	if err := r.SetCompatibility(ctx, "c-value", Forward); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ResetCompatibility(ctx, "c-value"); err != nil {
		t.Fatal(err)
	}
	a3 := mustRegister("a-value", fieldOf(`"string"`)) // NONE lets it in
	if v, err := r.DeleteVersion(ctx, "a-value", 2); err != nil || v != 2 {
		t.Fatalf("delete: %d %v", v, err)
	}
	a4 := mustRegister("a-value", fieldOf(`"bytes"`))
	if a1 != 1 || a2 != 2 || a3 != 3 || a4 != 4 {
		t.Fatalf("ids %d %d %d %d", a1, a2, a3, a4)
	}
	want := stateOf(t, r, "a-value", "b-value", "c-value")
	if vs := want.Versions["a-value"]; len(vs) != 3 || vs[0].Version != 1 || vs[1].Version != 3 || vs[2].Version != 4 {
		t.Fatalf("a-value versions %+v", vs)
	}

	for _, compacted := range []bool{false, true} {
		if compacted {
			st.compact()
		}
		r2, err := OpenRegistry(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		got := stateOf(t, r2, "a-value", "b-value", "c-value")
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("compacted=%v: after reopening\n got %+v\nwant %+v", compacted, got, want)
		}
		if s, err := r2.SchemaByID(2); err != nil || s != fieldOf(`"long"`) {
			t.Fatalf("deleted version's id must still resolve: %q %v", s, err)
		}
		if id, err := r2.Register(ctx, "d-value", `"float"`); err != nil || id != 5 {
			t.Fatalf("next id after reopening = %d %v, want 5", id, err)
		}
		if sv, err := r2.Version("a-value", LatestVersion); err != nil || sv.Version != 4 {
			t.Fatalf("latest %+v %v", sv, err)
		}
		// A new version continues after the deleted ones.
		if _, err := r2.Register(ctx, "a-value", fieldOf(`"double"`)); err != nil {
			t.Fatal(err)
		}
		if sv, _ := r2.Version("a-value", LatestVersion); sv.Version != 5 {
			t.Fatalf("version after reopening = %d, want 5", sv.Version)
		}
		st.keys, st.values = st.keys[:len(st.keys)-2], st.values[:len(st.values)-2]
	}
}

// TestStoreLayout pins the records to Confluent's _schemas layout.
func TestStoreLayout(t *testing.T) {
	ctx := context.Background()
	st := &testStore{}
	r, _ := OpenRegistry(ctx, st)
	if _, err := r.Register(ctx, "t-value", `"string"`); err != nil {
		t.Fatal(err)
	}
	_ = r.SetCompatibility(ctx, "", FullTransitive)
	_ = r.SetCompatibility(ctx, "t-value", None)
	_, _ = r.ResetCompatibility(ctx, "t-value")
	_, _ = r.DeleteVersion(ctx, "t-value", 1)
	want := [][2]string{
		{`{"keytype":"SCHEMA","subject":"t-value","version":1,"magic":1}`, `{"subject":"t-value","version":1,"id":1,"schema":"\"string\"","deleted":false}`},
		{`{"keytype":"CONFIG","subject":null,"magic":0}`, `{"compatibilityLevel":"FULL_TRANSITIVE"}`},
		{`{"keytype":"CONFIG","subject":"t-value","magic":0}`, `{"compatibilityLevel":"NONE"}`},
		{`{"keytype":"CONFIG","subject":"t-value","magic":0}`, ``},
		{`{"keytype":"SCHEMA","subject":"t-value","version":1,"magic":1}`, `{"subject":"t-value","version":1,"id":1,"schema":"\"string\"","deleted":true}`},
	}
	if len(st.keys) != len(want) {
		t.Fatalf("%d records, want %d", len(st.keys), len(want))
	}
	for i, w := range want {
		if string(st.keys[i]) != w[0] || string(st.values[i]) != w[1] {
			t.Errorf("record %d:\n got %s %s\nwant %s %s", i, st.keys[i], st.values[i], w[0], w[1])
		}
	}
}

// TestLoadsConfluentRecords reads records a Confluent registry writes
// that cdcd itself doesn't (DELETE_SUBJECT, CLEAR_SUBJECT, MODE, NOOP).
func TestLoadsConfluentRecords(t *testing.T) {
	ctx := context.Background()
	st := &testStore{}
	add := func(k, v string) {
		var vb []byte
		if v != "" {
			vb = []byte(v)
		}
		_ = st.Append(ctx, []byte(k), vb)
	}
	add(`{"keytype":"NOOP","magic":0}`, `{}`)
	add(`{"keytype":"MODE","subject":null,"magic":0}`, `{"mode":"READWRITE"}`)
	for i, s := range []string{`"int"`, `"long"`, `"float"`} {
		add(`{"keytype":"SCHEMA","subject":"x","version":`+string(rune('1'+i))+`,"magic":1}`,
			`{"subject":"x","version":`+string(rune('1'+i))+`,"id":`+string(rune('7'+i))+`,"schema":`+quote(s)+`,"deleted":false,"schemaType":"AVRO"}`)
	}
	add(`{"keytype":"DELETE_SUBJECT","subject":"x","magic":0}`, `{"subject":"x","version":2}`)
	add(`{"keytype":"SCHEMA","subject":"y","version":1,"magic":1}`, `{"subject":"y","version":1,"id":7,"schema":"\"int\"","deleted":false}`)
	add(`{"keytype":"CLEAR_SUBJECT","subject":"y","magic":0}`, `{"subject":"y","version":1}`)
	add(`{"keytype":"CONFIG","subject":"x","magic":0}`, `{"compatibilityLevel":"FORWARD","normalize":false}`)
	r, err := OpenRegistry(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := r.Versions("x")
	if err != nil || len(vs) != 1 || vs[0].Version != 3 || vs[0].ID != 9 {
		t.Fatalf("x versions %+v %v", vs, err)
	}
	if _, err := r.Versions("y"); !errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("cleared subject y: %v", err)
	}
	if l, own := r.Compatibility("x"); l != Forward || !own {
		t.Fatalf("x level %s %v", l, own)
	}
	if id, _ := r.Register(ctx, "z", `"bytes"`); id != 10 {
		t.Fatalf("next id %d, want 10", id)
	}
	add(`{"keytype":"CONFIG","subject":"x","magic":0}`, `{"compatibilityLevel":"SIDEWAYS"}`)
	if _, err := OpenRegistry(ctx, st); !errors.Is(err, ErrInvalidCompatibility) {
		t.Fatalf("a bad stored level must fail the open, naming it: %v", err)
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func TestRegisterRejectsAndAccepts(t *testing.T) {
	ctx := context.Background()
	r, _ := OpenRegistry(ctx, &testStore{})
	if _, err := r.Register(ctx, "s", fieldOf(`"long"`)); err != nil {
		t.Fatal(err)
	}
	_, err := r.Register(ctx, "s", fieldOf(`"int"`))
	var ierr *IncompatibleError
	if !errors.As(err, &ierr) || ierr.Subject != "s" || ierr.Level != Backward || ierr.Version != 1 {
		t.Fatalf("narrowing: %v", err)
	}
	if !strings.Contains(err.Error(), "f: type changed from long to int") {
		t.Fatalf("message %q", err)
	}
	if schema, rerr, ok := r.Rejected("s"); !ok || schema != fieldOf(`"int"`) || rerr != ierr {
		t.Fatalf("rejected: %v %q %v", ok, schema, rerr)
	}
	if got := r.RejectedSubjects(); !reflect.DeepEqual(got, []string{"s"}) {
		t.Fatalf("rejected subjects %v", got)
	}
	if err := r.TestCompatibility("s", fieldOf(`"int"`), LatestVersion); !errors.As(err, &ierr) {
		t.Fatalf("test: %v", err)
	}
	sv, err := r.Accept(ctx, "s")
	if err != nil || sv.Version != 2 || sv.Schema != fieldOf(`"int"`) {
		t.Fatalf("accept: %+v %v", sv, err)
	}
	if _, _, ok := r.Rejected("s"); ok {
		t.Fatal("accepting must clear the rejection")
	}
	if _, err := r.Accept(ctx, "s"); !errors.Is(err, ErrNothingRejected) {
		t.Fatalf("second accept: %v", err)
	}
	if _, err := r.Register(ctx, "s", `{"type":`); !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("invalid: %v", err)
	}
}

func TestRegistryStoreFailure(t *testing.T) {
	ctx := context.Background()
	st := &testStore{}
	r, _ := OpenRegistry(ctx, st)
	st.fail = errors.New("disk full")
	if _, err := r.Register(ctx, "s", `"int"`); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("register: %v", err)
	}
	if err := r.SetCompatibility(ctx, "", None); err == nil {
		t.Fatal("set compatibility must fail")
	}
	if _, err := r.Versions("s"); !errors.Is(err, ErrUnknownSubject) {
		t.Fatalf("a failed register must leave nothing behind: %v", err)
	}
	st.fail = nil
	if id, err := r.Register(ctx, "s", `"int"`); err != nil || id != 1 {
		t.Fatalf("after the failure: %d %v", id, err)
	}
	if l, _ := r.Compatibility(""); l != Backward {
		t.Fatalf("level after failed set: %s", l)
	}
}

func TestRegistryLookups(t *testing.T) {
	ctx := context.Background()
	r, _ := OpenRegistry(ctx, &testStore{})
	id, _ := r.Register(ctx, "s", `"int"`)
	_, _ = r.Register(ctx, "t", `"int"`)
	if _, err := r.Version("s", 7); !errors.Is(err, ErrUnknownVersion) {
		t.Error(err)
	}
	if _, err := r.Version("nope", 1); !errors.Is(err, ErrUnknownSubject) {
		t.Error(err)
	}
	if sv, err := r.Lookup("s", ` "int" `); err != nil || sv.ID != id {
		t.Error(sv, err)
	}
	if _, err := r.Lookup("s", `"long"`); !errors.Is(err, ErrUnknownSchema) {
		t.Error(err)
	}
	if us, err := r.Usages(id); err != nil || len(us) != 2 || us[0].Subject != "s" || us[1].Subject != "t" {
		t.Error(us, err)
	}
	if _, err := r.ResetCompatibility(ctx, "s"); !errors.Is(err, ErrNotConfigured) {
		t.Error(err)
	}
	if vs, err := r.DeleteSubject(ctx, "t"); err != nil || !reflect.DeepEqual(vs, []int{1}) {
		t.Error(vs, err)
	}
	if got := r.Subjects(); !reflect.DeepEqual(got, []string{"s"}) {
		t.Error(got)
	}
	// A deleted subject starts again from its next version, with the old id.
	if id2, _ := r.Register(ctx, "t", `"int"`); id2 != id {
		t.Errorf("re-registered id %d", id2)
	}
	if sv, _ := r.Version("t", LatestVersion); sv.Version != 2 {
		t.Errorf("version %d", sv.Version)
	}
	if err := r.TestCompatibility("s", `"string"`, 9); !errors.Is(err, ErrUnknownVersion) {
		t.Error(err)
	}
	if err := r.TestCompatibility("new-subject", `"string"`, LatestVersion); err != nil {
		t.Error(err)
	}
}

func TestRegistryMatchesLoadedTextsNormalized(t *testing.T) {
	ctx := context.Background()
	st := &testStore{}
	_ = st.Append(ctx, []byte(`{"keytype":"SCHEMA","subject":"x","version":1,"magic":1}`),
		[]byte(`{"subject":"x","version":1,"id":4,"schema":"{ \"type\": \"string\" }","deleted":false}`))
	r, _ := OpenRegistry(ctx, st)
	if id, err := r.Register(ctx, "x", `{"type":"string"}`); err != nil || id != 4 {
		t.Fatalf("same schema, other spacing: %d %v", id, err)
	}
	if id, err := r.Register(ctx, "y", `{"type" : "string"}`); err != nil || id != 4 {
		t.Fatalf("same schema, other subject: %d %v", id, err)
	}
	if s, _ := r.SchemaByID(4); s != `{ "type": "string" }` {
		t.Fatalf("the stored text is served as stored: %q", s)
	}
}
