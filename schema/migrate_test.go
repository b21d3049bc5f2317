package schema

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
)

// TestMigrateEnvelope: a subject whose versions are in the legacy envelope
// takes the same table in Debezium's layout (refused by its level, then
// migrated), also under a transitive level and through the remote client;
// a real incompatible change of the table stays refused.
func TestMigrateEnvelope(t *testing.T) {
	for _, remote := range []bool{false, true} {
		name := map[bool]string{false: "embedded", true: "remote"}[remote]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			reg, _ := OpenRegistry(ctx, &testStore{})
			var c Client = reg
			if remote {
				srv := httptest.NewServer(NewHandler(reg))
				defer srv.Close()
				rem, err := NewRemote(RemoteConfig{URL: srv.URL})
				if err != nil {
					t.Fatal(err)
				}
				c = rem
			}
			const subject = "shop.public.orders-value"
			f := readLegacyFixture(t)
			if _, err := reg.Register(ctx, subject, f.ValueSchema); err != nil {
				t.Fatal(err)
			}
			register := func(tbl *Table) (uint32, bool, error) {
				t.Helper()
				vs, err := ValueSchema(tbl, "shop.public.orders")
				if err != nil {
					t.Fatal(err)
				}
				id, err := c.Register(ctx, subject, vs)
				var inc *IncompatibleError
				if !errors.As(err, &inc) {
					return id, false, err
				}
				sv, ok, merr := MigrateEnvelope(ctx, c, subject, vs, inc)
				if !ok {
					return 0, false, err
				}
				return sv.ID, true, merr
			}

			// The same table, new layout: refused by BACKWARD (qty, body,
			// price become required), migrated.
			id, migrated, err := register(legacyTable())
			if err != nil || !migrated || id == 0 {
				t.Fatalf("same table: id %d migrated %v: %v", id, migrated, err)
			}
			if sv, _ := reg.Version(subject, LatestVersion); sv.Version != 2 || IsLegacyEnvelope(sv.Schema) {
				t.Fatalf("latest version %d legacy=%v", sv.Version, IsLegacyEnvelope(sv.Schema))
			}
			if l, own := reg.Compatibility(subject); own || l != Backward {
				t.Fatalf("subject level %s own=%v after the migration", l, own)
			}

			// Under BACKWARD_TRANSITIVE a later version is checked against
			// the legacy one too: migrated again, the column added kept.
			if err := reg.SetCompatibility(ctx, subject, BackwardTransitive); err != nil {
				t.Fatal(err)
			}
			added := legacyTable()
			added.Columns = append(added.Columns, Column{Name: "memo", Kind: String, Nullable: true})
			if _, migrated, err := register(added); err != nil || !migrated {
				t.Fatalf("column added under BACKWARD_TRANSITIVE: migrated %v: %v", migrated, err)
			}

			// A narrowing is refused whatever the layout.
			narrowed := legacyTable()
			narrowed.Columns[0].Kind = Int32
			narrowed.Columns = append(narrowed.Columns, Column{Name: "memo", Kind: String, Nullable: true})
			if _, migrated, err := register(narrowed); migrated || !errors.Is(err, ErrIncompatible) {
				t.Fatalf("narrowing: migrated %v: %v", migrated, err)
			}
		})
	}
}

// TestMigrateEnvelopeNotLegacy: a refusal against a version in Debezium's
// layout is never migrated.
func TestMigrateEnvelopeNotLegacy(t *testing.T) {
	ctx := context.Background()
	reg, _ := OpenRegistry(ctx, &testStore{})
	const subject = "shop.public.orders-value"
	tbl := legacyTable()
	tbl.Columns[2].Nullable = true
	v1, _ := ValueSchema(tbl, "shop.public.orders")
	if _, err := reg.Register(ctx, subject, v1); err != nil {
		t.Fatal(err)
	}
	tbl.Columns[2].Nullable = false // SET NOT NULL
	v2, _ := ValueSchema(tbl, "shop.public.orders")
	_, err := reg.Register(ctx, subject, v2)
	var inc *IncompatibleError
	if !errors.As(err, &inc) {
		t.Fatalf("SET NOT NULL: %v", err)
	}
	if _, ok, err := MigrateEnvelope(ctx, reg, subject, v2, inc); ok || err != nil {
		t.Fatalf("migrated a refusal between two current versions: %v", err)
	}
}
