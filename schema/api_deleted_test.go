package schema

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// TestAPIDeletedAndPermanent follows Confluent's documented deletion
// rules over HTTP with franz-go's client: soft-deleted versions and
// subjects are hidden unless asked for with deleted=true (or
// deletedOnly=true), a permanent delete needs a soft delete first (40405
// for a subject, 40407 for a version), a second soft delete answers 40404
// / 40406, and what a permanent delete removes is gone after a restart.
func TestAPIDeletedAndPermanent(t *testing.T) {
	ctx := context.Background()
	store := &testStore{}
	cl, reg, url := serve(t, store)
	avro := func(s string) sr.Schema { return sr.Schema{Schema: s} }
	deleted := sr.WithParams(ctx, sr.ShowDeleted)
	deletedOnly := sr.WithParams(ctx, sr.DeletedOnly)
	if got := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}); got[0].Err != nil {
		t.Fatal(got[0].Err)
	}
	a1, a2, b1 := `"int"`, `"string"`, `"boolean"`
	for _, r := range []struct{ subject, schema string }{{"a-value", a1}, {"a-value", a2}, {"b-value", b1}} {
		if _, err := cl.RegisterSchema(ctx, r.subject, avro(r.schema), -1, -1); err != nil {
			t.Fatal(err)
		}
	}

	// A soft-deleted version: hidden, shown with deleted=true.
	if err := cl.DeleteSchema(ctx, "a-value", 1, sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		got  any
		err  error
		want any
	}{
		"versions":             {first(cl.SubjectVersions(ctx, "a-value")), nil, []int{2}},
		"versions deleted":     {first(cl.SubjectVersions(deleted, "a-value")), nil, []int{1, 2}},
		"versions deletedOnly": {first(cl.SubjectVersions(deletedOnly, "a-value")), nil, []int{1}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", name, tc.got, tc.want)
		}
	}
	if _, err := cl.SchemaByVersion(ctx, "a-value", 1); errorCode(err) != 40402 {
		t.Errorf("a soft-deleted version without deleted=true: %v", err)
	}
	if ss, err := cl.SchemaByVersion(deleted, "a-value", 1); err != nil || ss.Schema.Schema != a1 {
		t.Errorf("a soft-deleted version with deleted=true: %+v %v", ss, err)
	}
	if _, err := cl.LookupSchema(ctx, "a-value", avro(a1)); errorCode(err) != 40403 {
		t.Errorf("lookup of a soft-deleted schema: %v", err)
	}
	if ss, err := cl.LookupSchema(deleted, "a-value", avro(a1)); err != nil || ss.Version != 1 {
		t.Errorf("lookup of a soft-deleted schema with deleted=true: %+v %v", ss, err)
	}
	if uses, err := cl.SchemaUsagesByID(deleted, 1); err != nil || len(uses) != 1 || uses[0].Version != 1 {
		t.Errorf("usages of id 1 with deleted=true: %+v %v", uses, err)
	}

	// Confluent's two steps, and their error codes.
	for name, tc := range map[string]struct {
		err  error
		code int
	}{
		"permanent delete of a live version": {cl.DeleteSchema(ctx, "a-value", 2, sr.HardDelete), 40407},
		"soft delete of a deleted version":   {cl.DeleteSchema(ctx, "a-value", 1, sr.SoftDelete), 40406},
		"permanent delete of a live subject": {second(cl.DeleteSubject(ctx, "a-value", sr.HardDelete)), 40405},
		"a version that never was":           {cl.DeleteSchema(ctx, "a-value", 7, sr.HardDelete), 40402},
	} {
		if got := errorCode(tc.err); got != tc.code {
			t.Errorf("%s: %v (code %d), want %d", name, tc.err, got, tc.code)
		}
	}
	if err := cl.DeleteSchema(ctx, "a-value", 1, sr.HardDelete); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.SchemaByVersion(deleted, "a-value", 1); errorCode(err) != 40402 {
		t.Errorf("a permanently deleted version with deleted=true: %v", err)
	}
	if _, err := cl.SchemaByID(ctx, 1); errorCode(err) != 40403 {
		t.Errorf("the id of a permanently deleted version no other holds: %v", err)
	}

	// Subjects: soft-deleted ones listed only when asked for.
	if vs, err := cl.DeleteSubject(ctx, "b-value", sr.SoftDelete); err != nil || !reflect.DeepEqual(vs, []int{1}) {
		t.Fatalf("soft delete b-value: %v %v", vs, err)
	}
	if _, err := cl.DeleteSubject(ctx, "b-value", sr.SoftDelete); errorCode(err) != 40404 {
		t.Errorf("a second soft delete of a subject: %v", err)
	}
	for name, tc := range map[string]struct{ got, want []string }{
		"subjects":             {first(cl.Subjects(ctx)), []string{"a-value"}},
		"subjects deleted":     {first(cl.Subjects(deleted)), []string{"a-value", "b-value"}},
		"subjects deletedOnly": {first(cl.Subjects(deletedOnly)), []string{"b-value"}},
		"subjects by prefix":   {first(cl.Subjects(sr.WithParams(ctx, sr.ShowDeleted, sr.SubjectPrefix("b")))), []string{"b-value"}},
	} {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", name, tc.got, tc.want)
		}
	}
	if vs, err := cl.DeleteSubject(ctx, "b-value", sr.HardDelete); err != nil || !reflect.DeepEqual(vs, []int{1}) {
		t.Fatalf("permanent delete of b-value: %v %v", vs, err)
	}
	if subs, _ := cl.Subjects(deleted); !reflect.DeepEqual(subs, []string{"a-value"}) {
		t.Errorf("subjects with deleted=true after a permanent delete: %v", subs)
	}
	// A subject deleted for good starts again at version 1.
	if ss, err := cl.CreateSchema(ctx, "b-value", avro(`"double"`)); err != nil || ss.Version != 1 {
		t.Errorf("re-created subject: %+v %v", ss, err)
	}

	// GET /schemas and …/referencedby.
	all, err := cl.AllSchemas(ctx)
	if err != nil || len(all) != 2 || all[0].Subject != "a-value" || all[0].Version != 2 || all[1].Subject != "b-value" {
		t.Errorf("GET /schemas: %+v %v", all, err)
	}
	if pfx, err := cl.AllSchemas(sr.WithParams(ctx, sr.SubjectPrefix("b"), sr.LatestOnly)); err != nil || len(pfx) != 1 || pfx[0].Schema.Schema != `"double"` {
		t.Errorf("GET /schemas?subjectPrefix=b&latestOnly=true: %+v %v", pfx, err)
	}
	if refs, err := cl.SchemaReferences(ctx, "a-value", 2); err != nil || len(refs) != 0 {
		t.Errorf("referencedby: %+v %v", refs, err)
	}
	if _, err := cl.SchemaReferences(ctx, "a-value", 9); errorCode(err) != 40402 {
		t.Errorf("referencedby of a missing version: %v", err)
	}

	// DELETE /config: the global level back to BACKWARD, the old one
	// answered in Confluent's shape.
	status, body := rawRequest(t, http.MethodDelete, url+"/config")
	var cfg map[string]string
	if err := json.Unmarshal([]byte(body), &cfg); status != 200 || err != nil || cfg["compatibilityLevel"] != "NONE" {
		t.Errorf("DELETE /config: %d %s", status, body)
	}
	if l, _ := reg.Compatibility(""); l != Backward {
		t.Errorf("global level after DELETE /config: %s", l)
	}

	// After a restart, what was deleted stays deleted.
	cl2, _, _ := serve(t, store)
	if vs, err := cl2.SubjectVersions(deleted, "a-value"); err != nil || !reflect.DeepEqual(vs, []int{2}) {
		t.Errorf("a-value after a restart: %v %v", vs, err)
	}
	if _, err := cl2.SchemaByID(ctx, 1); errorCode(err) != 40403 {
		t.Errorf("a purged id after a restart: %v", err)
	}
	if ss, err := cl2.SchemaByVersion(ctx, "b-value", 1); err != nil || ss.Schema.Schema != `"double"` {
		t.Errorf("b-value after a restart: %+v %v", ss, err)
	}
}

// TestAPIProtectedSubjects: the subjects the running pipeline writes
// cannot be deleted over HTTP in any way (42205, naming the table and the
// way out); other subjects can.
func TestAPIProtectedSubjects(t *testing.T) {
	ctx := context.Background()
	cl, reg, _ := serve(t, &testStore{})
	id, err := reg.Register(ctx, "shop.public.orders-value", `"long"`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, "other-value", `"long"`); err != nil {
		t.Fatal(err)
	}
	reg.Protect("shop.public.orders-value", "public.orders")
	for name, err := range map[string]error{
		"soft delete of the subject":      second(cl.DeleteSubject(ctx, "shop.public.orders-value", sr.SoftDelete)),
		"soft delete of its version":      cl.DeleteSchema(ctx, "shop.public.orders-value", 1, sr.SoftDelete),
		"soft delete of its latest":       cl.DeleteSchema(ctx, "shop.public.orders-value", -1, sr.SoftDelete),
		"permanent delete of the subject": second(cl.DeleteSubject(ctx, "shop.public.orders-value", sr.HardDelete)),
	} {
		var re *sr.ResponseError
		if errorCode(err) != 42205 || !errors.As(err, &re) || !strings.Contains(re.Message, "public.orders") || !strings.Contains(re.Message, "restart cdcd") {
			t.Errorf("%s: %v, want 42205 naming the table and what to do", name, err)
		}
	}
	if sv, err := reg.Version("shop.public.orders-value", LatestVersion); err != nil || sv.ID != id {
		t.Fatalf("the protected subject after the refused deletes: %+v %v", sv, err)
	}
	if _, err := cl.DeleteSubject(ctx, "other-value", sr.SoftDelete); err != nil {
		t.Errorf("an unprotected subject: %v", err)
	}
}

func first[T any](v T, _ error) T { return v }

func rawRequest(t *testing.T, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
