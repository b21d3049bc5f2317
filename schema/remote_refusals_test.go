package schema

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRemoteAccept: a remote registry's refusal is remembered and
// accepted as the embedded registry's is: the refused schema becomes the
// next version and the subject's compatibility is what it was before
// (its own level, or none). Through NewRemoteHandler, cdcd's routes are
// served and the rest reaches the registry with the credentials.
func TestRemoteAccept(t *testing.T) {
	ctx := context.Background()
	ext, _ := OpenRegistry(ctx, &testStore{})
	h := NewHandler(ext)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "cdcd" || p != "secret" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rem, err := NewRemote(RemoteConfig{URL: srv.URL, Username: "cdcd", Password: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &Table{Namespace: "public", Name: "orders", Columns: []Column{{Name: "id", Kind: Int32}, {Name: "qty", Kind: Int64, Nullable: true}}, Key: []int{0}}
	v1, _ := ValueSchema(tbl, "shop.public.orders")
	text := *tbl
	text.Columns = []Column{{Name: "id", Kind: Int32}, {Name: "qty", Kind: String, Nullable: true}}
	v2, _ := ValueSchema(&text, "shop.public.orders")
	for _, c := range []struct {
		subject string
		hasOwn  bool
		own     Compatibility
	}{{"a-value", false, Backward}, {"b-value", true, Full}} {
		if c.hasOwn {
			if err := ext.SetCompatibility(ctx, c.subject, c.own); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := rem.Register(ctx, c.subject, v1); err != nil {
			t.Fatal(err)
		}
		var ierr *IncompatibleError
		if _, err := rem.Register(ctx, c.subject, v2); !errors.As(err, &ierr) {
			t.Fatalf("%s: v2 %v, want refused", c.subject, err)
		}
		if s, _, ok := rem.Rejected(c.subject); !ok || s != normalize(v2) {
			t.Fatalf("%s: Rejected = %v", c.subject, ok)
		}
		ah, err := NewRemoteHandler(rem)
		if err != nil {
			t.Fatal(err)
		}
		var rej []RejectedSchema
		get(t, ah, "GET", "/cdcd/rejected", &rej)
		if len(rej) != 1 || rej[0].Subject != c.subject || len(rej[0].Messages) == 0 {
			t.Fatalf("/cdcd/rejected = %+v", rej)
		}
		var sv SubjectVersion
		get(t, ah, "POST", "/cdcd/subjects/"+c.subject+"/accept", &sv)
		if sv.Subject != c.subject || sv.Version != 2 || sv.Schema != normalize(v2) {
			t.Fatalf("accepted %+v", sv)
		}
		if got, _ := ext.Version(c.subject, 2); got.Schema != normalize(v2) {
			t.Fatalf("the registry's version 2 is %q", got.Schema)
		}
		if lvl, own := ext.Compatibility(c.subject); own != c.hasOwn || lvl != c.own {
			t.Fatalf("%s: compatibility after accept %s (own %v), want %s (own %v)", c.subject, lvl, own, c.own, c.hasOwn)
		}
		if _, _, ok := rem.Rejected(c.subject); ok || len(rem.RejectedSubjects()) != 0 {
			t.Fatalf("%s: still rejected after accept", c.subject)
		}
		var subjects []string
		get(t, ah, "GET", "/subjects", &subjects) // passed on, with the credentials
		if len(subjects) == 0 {
			t.Fatal("GET /subjects through the handler listed nothing")
		}
	}
	if _, err := rem.Accept(ctx, "a-value"); !errors.Is(err, ErrNothingRejected) {
		t.Fatalf("accept with nothing refused: %v", err)
	}
}

func get(t *testing.T, h http.Handler, method, path string, out any) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
	if w.Code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
	}
	if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
		t.Fatalf("%s %s: %v in %s", method, path, err, w.Body)
	}
}
