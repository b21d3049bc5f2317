package schema

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

// serve starts the API over a registry on store and returns a franz-go sr
// client of it: an independent client implementation speaking Confluent's
// protocol.
func serve(t *testing.T, store Store) (*sr.Client, *Registry, string) {
	t.Helper()
	reg, err := OpenRegistry(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(reg))
	t.Cleanup(srv.Close)
	cl, err := sr.NewClient(sr.URLs(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return cl, reg, srv.URL
}

// errorCode returns the Confluent error code of an sr error, or 0.
func errorCode(err error) int {
	var re *sr.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return 0
}

func TestAPIWithFranzGoClient(t *testing.T) {
	ctx := context.Background()
	store := &testStore{}
	cl, _, _ := serve(t, store)
	avroSchema := func(s string) sr.Schema { return sr.Schema{Schema: s, Type: sr.TypeAvro} }

	// Register (CreateSchema also exercises /schemas/ids/{id}/versions).
	v1 := rec(`{"name":"id","type":"long"}`)
	ss, err := cl.CreateSchema(ctx, "orders-value", avroSchema(v1))
	if err != nil {
		t.Fatal(err)
	}
	if ss.ID != 1 || ss.Version != 1 || ss.Subject != "orders-value" || ss.Schema.Schema != v1 {
		t.Fatalf("created %+v", ss)
	}
	v2 := rec(`{"name":"id","type":"long"}`, `{"name":"note","type":["null","string"],"default":null}`)
	id2, err := cl.RegisterSchema(ctx, "orders-value", avroSchema(v2), -1, -1)
	if err != nil || id2 != 2 {
		t.Fatalf("register v2: %d %v", id2, err)
	}
	if again, err := cl.RegisterSchema(ctx, "orders-value", avroSchema(v2), -1, -1); err != nil || again != 2 {
		t.Fatalf("idempotent register: %d %v", again, err)
	}
	if _, err := cl.RegisterSchema(ctx, "orders-key", avroSchema(`"long"`), -1, -1); err != nil {
		t.Fatal(err)
	}

	// Fetch by id, by version, list.
	if s, err := cl.SchemaByID(ctx, 2); err != nil || s.Schema != v2 || s.Type != sr.TypeAvro {
		t.Fatalf("by id: %+v %v", s, err)
	}
	if text, err := cl.SchemaTextByID(ctx, 1); err != nil || text != v1 {
		t.Fatalf("text by id: %q %v", text, err)
	}
	if latest, err := cl.SchemaByVersion(ctx, "orders-value", -1); err != nil || latest.Version != 2 || latest.ID != 2 {
		t.Fatalf("latest: %+v %v", latest, err)
	}
	if text, err := cl.SchemaTextByVersion(ctx, "orders-value", 1); err != nil || text != v1 {
		t.Fatalf("text by version: %q %v", text, err)
	}
	if subs, err := cl.Subjects(ctx); err != nil || !reflect.DeepEqual(subs, []string{"orders-key", "orders-value"}) {
		t.Fatalf("subjects: %v %v", subs, err)
	}
	if vs, err := cl.SubjectVersions(ctx, "orders-value"); err != nil || !reflect.DeepEqual(vs, []int{1, 2}) {
		t.Fatalf("versions: %v %v", vs, err)
	}
	if all, err := cl.Schemas(ctx, "orders-value"); err != nil || len(all) != 2 || all[1].Schema.Schema != v2 {
		t.Fatalf("schemas: %+v %v", all, err)
	}
	if found, err := cl.LookupSchema(ctx, "orders-value", avroSchema(v1)); err != nil || found.Version != 1 || found.ID != 1 {
		t.Fatalf("lookup: %+v %v", found, err)
	}
	if subs, err := cl.SubjectsByID(ctx, 2); err != nil || !reflect.DeepEqual(subs, []string{"orders-value"}) {
		t.Fatalf("subjects by id: %v %v", subs, err)
	}

	// Compatibility checks.
	narrowed := rec(`{"name":"id","type":"int"}`, `{"name":"note","type":["null","string"],"default":null}`)
	res, err := cl.CheckCompatibility(ctx, "orders-value", -1, avroSchema(narrowed))
	if err != nil || res.Is || len(res.Messages) == 0 || !strings.Contains(res.Messages[0], "id: type changed from long to int") {
		t.Fatalf("check narrowed: %+v %v", res, err)
	}
	if res, err := cl.CheckCompatibility(sr.WithParams(ctx, sr.Verbose), "orders-value", 2, avroSchema(v2)); err != nil || !res.Is {
		t.Fatalf("check v2 against itself: %+v %v", res, err)
	}
	if res, err := cl.CheckCompatibility(ctx, "orders-value", -2, avroSchema(v1)); err != nil || !res.Is {
		t.Fatalf("check against all versions: %+v %v", res, err)
	}

	// Incompatible registration: 409.
	_, err = cl.RegisterSchema(ctx, "orders-value", avroSchema(narrowed), -1, -1)
	var re *sr.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 409 || re.ErrorCode != 409 || !strings.Contains(re.Message, "long to int") {
		t.Fatalf("incompatible register: %v", err)
	}

	// Config: global and per subject.
	if got := cl.Compatibility(ctx); got[0].Err != nil || got[0].Level != sr.CompatBackward {
		t.Fatalf("global: %+v", got[0])
	}
	if got := cl.Compatibility(ctx, "orders-value"); errorCode(got[0].Err) != 40408 {
		t.Fatalf("unset subject level: %+v", got[0])
	}
	if got := cl.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), "orders-value"); got[0].Err != nil || got[0].Level != sr.CompatBackward {
		t.Fatalf("subject level defaulting to global: %+v", got[0])
	}
	if got := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatFullTransitive}); got[0].Err != nil || got[0].Level != sr.CompatFullTransitive {
		t.Fatalf("set global: %+v", got[0])
	}
	if got := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}, "orders-value"); got[0].Err != nil || got[0].Level != sr.CompatNone {
		t.Fatalf("set subject: %+v", got[0])
	}
	if got := cl.Compatibility(ctx, "orders-value", ""); got[0].Level != sr.CompatNone || got[1].Level != sr.CompatFullTransitive {
		t.Fatalf("levels: %+v", got)
	}
	id3, err := cl.RegisterSchema(ctx, "orders-value", avroSchema(narrowed), -1, -1)
	if err != nil || id3 != 4 {
		t.Fatalf("register under NONE: %d %v", id3, err)
	}
	if got := cl.ResetCompatibility(ctx, "orders-value"); got[0].Err != nil || got[0].Level != sr.CompatNone {
		t.Fatalf("reset: %+v", got[0])
	}
	if got := cl.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), "orders-value"); got[0].Level != sr.CompatFullTransitive {
		t.Fatalf("after reset: %+v", got[0])
	}

	// Soft deletes.
	if err := cl.DeleteSchema(ctx, "orders-value", 3, sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	if vs, _ := cl.SubjectVersions(ctx, "orders-value"); !reflect.DeepEqual(vs, []int{1, 2}) {
		t.Fatalf("after delete: %v", vs)
	}
	if err := cl.DeleteSchema(ctx, "orders-value", 1, sr.HardDelete); errorCode(err) != 40407 { // not soft-deleted first
		t.Fatalf("hard delete: %v", err)
	}
	if vs, err := cl.DeleteSubject(ctx, "orders-key", sr.SoftDelete); err != nil || !reflect.DeepEqual(vs, []int{1}) {
		t.Fatalf("delete subject: %v %v", vs, err)
	}

	// Errors with Confluent's codes.
	for name, tc := range map[string]struct {
		err  error
		code int
	}{
		"unknown subject":     {second(cl.SubjectVersions(ctx, "nope")), 40401},
		"unknown version":     {second(cl.SchemaByVersion(ctx, "orders-value", 9)), 40402},
		"unknown id":          {second(cl.SchemaByID(ctx, 99)), 40403},
		"schema not in subj":  {second(cl.LookupSchema(ctx, "orders-value", avroSchema(`"boolean"`))), 40403},
		"invalid schema":      {second(cl.RegisterSchema(ctx, "x", avroSchema(`{"type":"record","name":"R"}`), -1, -1)), 42201},
		"protobuf":            {second(cl.RegisterSchema(ctx, "x", sr.Schema{Schema: `syntax = "proto3";`, Type: sr.TypeProtobuf}, -1, -1)), 42201},
		"references":          {second(cl.RegisterSchema(ctx, "x", sr.Schema{Schema: `"int"`, References: []sr.SchemaReference{{Name: "a", Subject: "b", Version: 1}}}, -1, -1)), 42201},
		"invalid version":     {second(cl.SchemaByVersion(ctx, "orders-value", -7)), 42202},
		"version check 404":   {second(cl.CheckCompatibility(ctx, "orders-value", 9, avroSchema(v1))), 40402},
		"deleted subject":     {second(cl.SchemaByVersion(ctx, "orders-key", -1)), 40401},
		"reset unset subject": {cl.ResetCompatibility(ctx, "orders-key")[0].Err, 40408},
	} {
		if got := errorCode(tc.err); got != tc.code {
			t.Errorf("%s: error %v (code %d), want code %d", name, tc.err, got, tc.code)
		}
	}
}

func second[T any](_ T, err error) error { return err }

// TestAPIRawExchanges pins the wire details a client library hides:
// content type, JSON shapes, error bodies, and the invalid-level code.
func TestAPIRawExchanges(t *testing.T) {
	_, _, url := serve(t, &testStore{})
	do := func(method, path, body string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", apiContentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/subjects/shop.public.orders-value/versions", `{"schema":"{\"type\":\"record\",\"name\":\"V\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}`, 200, `{"id":1}`},
		{"GET", "/subjects/shop.public.orders-value/versions/latest", "", 200, `{"subject":"shop.public.orders-value","version":1,"id":1,"schema":"{\"type\":\"record\",\"name\":\"V\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}`},
		{"GET", "/schemas/ids/1", "", 200, `{"schema":"{\"type\":\"record\",\"name\":\"V\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}`},
		{"POST", "/compatibility/subjects/shop.public.orders-value/versions/latest", `{"schema":"{\"type\":\"record\",\"name\":\"V\",\"fields\":[{\"name\":\"id\",\"type\":\"string\"}]}"}`, 200,
			`{"is_compatible":false,"messages":["id: type changed from long to string: the new schema cannot read data written with the old one"]}`},
		{"POST", "/compatibility/subjects/unknown-value/versions/latest", `{"schema":"\"int\""}`, 200, `{"is_compatible":true}`},
		{"GET", "/config", "", 200, `{"compatibilityLevel":"BACKWARD"}`},
		{"PUT", "/config", `{"compatibility":"full"}`, 200, `{"compatibility":"FULL"}`},
		{"PUT", "/config/shop.public.orders-value", `{"compatibility":"SIDEWAYS"}`, 422, `{"error_code":42203,"message":"Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive"}`},
		{"GET", "/subjects/nope/versions", "", 404, `{"error_code":40401,"message":"Subject not found. schema: unknown subject: nope"}`},
		{"GET", "/subjects/shop.public.orders-value/versions/latest/schema", "", 200, `{"type":"record","name":"V","fields":[{"name":"id","type":"long"}]}`},
		{"GET", "/schemas/types", "", 200, `["AVRO"]`},
		{"GET", "/subjects", "", 200, `["shop.public.orders-value"]`},
		{"GET", "/cdcd/rejected", "", 200, `[]`},
		{"GET", "/no/such/route", "", 404, `{"error_code":404,"message":"HTTP 404 Not Found"}`},
		{"POST", "/subjects/x/versions", `{"schema":`, 400, ``},
	} {
		status, ct, body := do(tc.method, tc.path, tc.body)
		if status != tc.status || ct != apiContentType || (tc.want != "" && body != tc.want) {
			t.Errorf("%s %s:\n got %d %s %s\nwant %d %s", tc.method, tc.path, status, ct, body, tc.status, tc.want)
		}
	}
}

func TestAPIRejectedAndAccept(t *testing.T) {
	ctx := context.Background()
	cl, reg, _ := serve(t, &testStore{})
	if _, err := reg.Register(ctx, "t-value", fieldOf(`["null","long"]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, "t-value", fieldOf(`["null","int"]`)); !errors.Is(err, ErrIncompatible) {
		t.Fatal(err)
	}
	var rejected []RejectedSchema
	if err := cl.Do(ctx, http.MethodGet, "/cdcd/rejected", nil, &rejected); err != nil {
		t.Fatal(err)
	}
	if len(rejected) != 1 || rejected[0].Subject != "t-value" || rejected[0].Version != 1 || rejected[0].Level != "BACKWARD" ||
		!strings.Contains(rejected[0].Messages[0], "long to int") {
		t.Fatalf("rejected: %+v", rejected)
	}
	var sv SubjectVersion
	if err := cl.Do(ctx, http.MethodPost, "/cdcd/subjects/t-value/accept", nil, &sv); err != nil || sv.Version != 2 || sv.ID != 2 {
		t.Fatalf("accept: %+v %v", sv, err)
	}
	// The emitter's retry now finds the schema registered.
	if id, err := reg.Register(ctx, "t-value", fieldOf(`["null","int"]`)); err != nil || id != 2 {
		t.Fatalf("register after accept: %d %v", id, err)
	}
	if err := cl.Do(ctx, http.MethodPost, "/cdcd/subjects/t-value/accept", nil, &sv); errorCode(err) != 40403 {
		t.Fatalf("nothing to accept: %v", err)
	}
}

// TestAPIRestart: ids and versions served after reopening over the same
// store are the ones served before.
func TestAPIRestart(t *testing.T) {
	ctx := context.Background()
	store := &testStore{}
	cl, _, _ := serve(t, store)
	var before []sr.SubjectSchema
	for i, typ := range []string{`"int"`, `"long"`, `"double"`} {
		if _, err := cl.RegisterSchema(ctx, "a", sr.Schema{Schema: typ}, -1, -1); err != nil {
			t.Fatal(i, err)
		}
		if _, err := cl.RegisterSchema(ctx, "b", sr.Schema{Schema: typ}, -1, -1); err != nil {
			t.Fatal(i, err)
		}
	}
	cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatForward}, "b")
	for _, s := range []string{"a", "b"} {
		all, err := cl.Schemas(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, all...)
	}
	cl2, _, _ := serve(t, store)
	var after []sr.SubjectSchema
	for _, s := range []string{"a", "b"} {
		all, _ := cl2.Schemas(ctx, s)
		after = append(after, all...)
	}
	if !reflect.DeepEqual(before, after) || len(after) != 6 {
		t.Fatalf("before %+v\nafter %+v", before, after)
	}
	if got := cl2.Compatibility(ctx, "b"); got[0].Level != sr.CompatForward {
		t.Fatalf("level after restart: %+v", got[0])
	}
}
