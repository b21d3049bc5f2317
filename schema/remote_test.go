package schema

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// testClientContract runs what the emitter and the sink rely on against a
// Client: ids, idempotence, typed incompatibility and resolution by id.
func testClientContract(t *testing.T, c Client) {
	ctx := context.Background()
	tbl := &Table{Namespace: "public", Name: "orders", Columns: []Column{
		{Name: "id", Kind: Int32}, {Name: "qty", Kind: Int32, Nullable: true},
	}, Key: []int{0}}
	v1, err := ValueSchema(tbl, "shop.public.orders")
	if err != nil {
		t.Fatal(err)
	}
	id1, err := c.Register(ctx, "shop.public.orders-value", v1)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := c.Register(ctx, "shop.public.orders-value", v1); err != nil || again != id1 {
		t.Fatalf("idempotent register: %d %v", again, err)
	}
	wider := *tbl
	wider.Columns = []Column{{Name: "id", Kind: Int32}, {Name: "qty", Kind: Int64, Nullable: true}}
	v2, _ := ValueSchema(&wider, "shop.public.orders")
	id2, err := c.Register(ctx, "shop.public.orders-value", v2)
	if err != nil || id2 == id1 {
		t.Fatalf("compatible v2: %d %v", id2, err)
	}
	text := wider
	text.Columns = []Column{{Name: "id", Kind: Int32}, {Name: "qty", Kind: String, Nullable: true}}
	v3, _ := ValueSchema(&text, "shop.public.orders")
	_, err = c.Register(ctx, "shop.public.orders-value", v3)
	var ierr *IncompatibleError
	if !errors.As(err, &ierr) || ierr.Subject != "shop.public.orders-value" || ierr.Level != Backward || ierr.Version != 2 {
		t.Fatalf("incompatible v3: %v", err)
	}
	p := ierr.Problems[0]
	if p.Field != "qty" || p.Old != "long" || p.New != "string" {
		t.Fatalf("problem %+v", p)
	}
	for id, want := range map[uint32]string{id1: v1, id2: v2} {
		if s, err := c.SchemaByID(id); err != nil || s != want {
			t.Fatalf("schema %d: %v", id, err)
		}
	}
	if _, err := c.SchemaByID(999); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := c.Register(ctx, "x", `{"type":"record","name":"R"}`); !errors.Is(err, ErrInvalidSchema) {
		t.Fatalf("invalid: %v", err)
	}
}

func TestClientContract(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		reg, err := OpenRegistry(context.Background(), &testStore{})
		if err != nil {
			t.Fatal(err)
		}
		testClientContract(t, reg)
	})
	t.Run("remote", func(t *testing.T) {
		reg, _ := OpenRegistry(context.Background(), &testStore{})
		srv := httptest.NewServer(NewHandler(reg))
		defer srv.Close()
		rem, err := NewRemote(RemoteConfig{URL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		testClientContract(t, rem)
	})
}

// TestRemoteCaches: registrations and ids are fetched once.
func TestRemoteCaches(t *testing.T) {
	reg, _ := OpenRegistry(context.Background(), &testStore{})
	var calls atomic.Int64
	h := NewHandler(reg)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
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
	ctx := context.Background()
	for range 3 {
		if _, err := rem.Register(ctx, "a", `"int"`); err != nil {
			t.Fatal(err)
		}
	}
	id, _ := reg.Register(ctx, "b", `"string"`)
	for range 3 {
		if s, err := rem.SchemaByID(id); err != nil || s != `"string"` {
			t.Fatal(s, err)
		}
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
	if _, err := NewRemote(RemoteConfig{}); err == nil {
		t.Fatal("empty URL accepted")
	}
	bad, _ := NewRemote(RemoteConfig{URL: srv.URL})
	if _, err := bad.Register(ctx, "a", `"long"`); err == nil || !strings.Contains(err.Error(), "register a") {
		t.Fatalf("unauthorized: %v", err)
	}
}
