package schema

import (
	"context"
	"errors"
	"testing"

	"github.com/hamba/avro/v2"
)

// ordersV1 is the base table version the DDL cases start from.
func ordersV1() *Table {
	return &Table{Namespace: "public", Name: "orders", Columns: []Column{
		{Name: "id", Kind: Int32, SourceType: "int4"},
		{Name: "qty", Kind: Int32, Nullable: true, SourceType: "int4"},
		{Name: "big", Kind: Int64, Nullable: true, SourceType: "int8"},
		{Name: "price", Kind: Float32, Nullable: true, SourceType: "float4"},
		{Name: "ratio", Kind: Float64, Nullable: true, SourceType: "float8"},
		{Name: "amount", Kind: Decimal, Precision: 12, Scale: 2, Nullable: true, SourceType: "numeric(12,2)"},
		{Name: "note", Kind: String, Nullable: true, SourceType: "varchar(40)"},
		{Name: "created", Kind: TimestampTZ, SourceType: "timestamptz"},
		{Name: "region", Kind: String, SourceType: "text"},
		{Name: "code", Kind: String, SourceType: "text"},
	}, Key: []int{0}}
}

// alter returns a copy of ordersV1 changed by fn.
func alter(fn func(t *Table)) *Table {
	t := ordersV1()
	fn(t)
	return t
}

func setColumn(t *Table, name string, c Column) { t.Columns[t.ColumnIndex(name)] = c }

func dropColumn(t *Table, name string) {
	i := t.ColumnIndex(name)
	t.Columns = append(t.Columns[:i], t.Columns[i+1:]...)
	for k := range t.Key {
		if t.Key[k] > i {
			t.Key[k]--
		}
	}
}

// TestTableEvolutionVerdicts registers the key and value schemas of the
// base table, then of one altered version, under the default level, and
// checks the verdict of each DDL kind; a refusal must name the column with
// its old and new types.
func TestTableEvolutionVerdicts(t *testing.T) {
	const topic = "shop.public.orders"
	type problem struct{ field, old, new string }
	for _, tc := range []struct {
		ddl                string
		next               *Table
		keyOK, valueOK     bool
		valueProblem       *problem
		keyProblemField    string
		readOldWithNewSide bool // decode v1 data with v2's schema (hamba's resolver)
	}{
		{ddl: "ADD COLUMN extra text", next: alter(func(t *Table) {
			t.Columns = append(t.Columns, Column{Name: "extra", Kind: String, Nullable: true, SourceType: "text"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ADD COLUMN extra int NOT NULL DEFAULT 0", next: alter(func(t *Table) {
			t.Columns = append(t.Columns, Column{Name: "extra", Kind: Int32, SourceType: "int4"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "DROP COLUMN note", next: alter(func(t *Table) { dropColumn(t, "note") }), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "RENAME COLUMN note TO memo (drop + add)", next: alter(func(t *Table) { t.Columns[t.ColumnIndex("note")].Name = "memo" }),
			keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER qty TYPE bigint", next: alter(func(t *Table) {
			setColumn(t, "qty", Column{Name: "qty", Kind: Int64, Nullable: true, SourceType: "int8"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER qty TYPE smallint (same Avro int)", next: alter(func(t *Table) {
			setColumn(t, "qty", Column{Name: "qty", Kind: Int16, Nullable: true, SourceType: "int2"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER price TYPE float8", next: alter(func(t *Table) {
			setColumn(t, "price", Column{Name: "price", Kind: Float64, Nullable: true, SourceType: "float8"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER amount TYPE numeric(14,2)", next: alter(func(t *Table) {
			setColumn(t, "amount", Column{Name: "amount", Kind: Decimal, Precision: 14, Scale: 2, Nullable: true, SourceType: "numeric(14,2)"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER id TYPE bigint (key column widened)", next: alter(func(t *Table) {
			setColumn(t, "id", Column{Name: "id", Kind: Int64, SourceType: "int8"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER note TYPE text", next: alter(func(t *Table) {
			setColumn(t, "note", Column{Name: "note", Kind: String, Nullable: true, SourceType: "text"})
		}), keyOK: true, valueOK: true, readOldWithNewSide: true},
		{ddl: "ALTER note SET NOT NULL", next: alter(func(t *Table) { t.Columns[t.ColumnIndex("note")].Nullable = false }),
			keyOK: true, valueProblem: &problem{"note", "string or null", "string"}},
		{ddl: "ALTER created DROP NOT NULL", next: alter(func(t *Table) { t.Columns[t.ColumnIndex("created")].Nullable = true }),
			keyOK: true, valueOK: true, readOldWithNewSide: true},

		{ddl: "ALTER big TYPE int (narrowing)", next: alter(func(t *Table) {
			setColumn(t, "big", Column{Name: "big", Kind: Int32, Nullable: true, SourceType: "int4"})
		}), keyOK: true, valueProblem: &problem{"big", "long", "int"}},
		{ddl: "ALTER ratio TYPE float4 (narrowing)", next: alter(func(t *Table) {
			setColumn(t, "ratio", Column{Name: "ratio", Kind: Float32, Nullable: true, SourceType: "float4"})
		}), keyOK: true, valueProblem: &problem{"ratio", "double", "float"}},
		{ddl: "ALTER amount TYPE numeric(10,2) (narrowing)", next: alter(func(t *Table) {
			setColumn(t, "amount", Column{Name: "amount", Kind: Decimal, Precision: 10, Scale: 2, Nullable: true, SourceType: "numeric(10,2)"})
		}), keyOK: true, valueProblem: &problem{"amount", "decimal(12,2)", "decimal(10,2)"}},
		{ddl: "ALTER amount TYPE numeric(12,3) (scale)", next: alter(func(t *Table) {
			setColumn(t, "amount", Column{Name: "amount", Kind: Decimal, Precision: 12, Scale: 3, Nullable: true, SourceType: "numeric(12,3)"})
		}), keyOK: true, valueProblem: &problem{"amount", "decimal(12,2)", "decimal(12,3)"}},
		{ddl: "ALTER amount TYPE numeric (unconstrained: text)", next: alter(func(t *Table) {
			setColumn(t, "amount", Column{Name: "amount", Kind: Decimal, Nullable: true, SourceType: "numeric"})
		}), keyOK: true, valueProblem: &problem{"amount", "decimal(12,2)", "string"}},
		{ddl: "ALTER qty TYPE text", next: alter(func(t *Table) {
			setColumn(t, "qty", Column{Name: "qty", Kind: String, Nullable: true, SourceType: "text"})
		}), keyOK: true, valueProblem: &problem{"qty", "int", "string"}},
		{ddl: "ALTER created TYPE timestamp (zone dropped)", next: alter(func(t *Table) {
			setColumn(t, "created", Column{Name: "created", Kind: Timestamp, SourceType: "timestamp"})
		}), keyOK: true, valueProblem: &problem{"created", "timestamp-micros", "local-timestamp-micros"}},
		{ddl: "ALTER id TYPE text (key column)", next: alter(func(t *Table) {
			setColumn(t, "id", Column{Name: "id", Kind: String, SourceType: "text"})
		}), keyProblemField: "id", valueProblem: &problem{"id", "int", "string"}},
		{ddl: "PRIMARY KEY (id, region)", next: alter(func(t *Table) { t.Key = []int{0, t.ColumnIndex("region")} }),
			keyProblemField: "region", valueProblem: &problem{"", "[id]", "[id region]"}},
		{ddl: "PRIMARY KEY (code)", next: alter(func(t *Table) { t.Key = []int{t.ColumnIndex("code")} }),
			keyProblemField: "code", valueProblem: &problem{"", "[id]", "[code]"}},
	} {
		t.Run(tc.ddl, func(t *testing.T) {
			ctx := context.Background()
			reg, _ := OpenRegistry(ctx, &testStore{})
			register := func(tbl *Table) (keyErr, valueErr error) {
				ks, err := KeySchema(tbl, topic)
				if err != nil {
					t.Fatal(err)
				}
				vs, err := ValueSchema(tbl, topic)
				if err != nil {
					t.Fatal(err)
				}
				_, keyErr = reg.Register(ctx, topic+"-key", ks)
				_, valueErr = reg.Register(ctx, topic+"-value", vs)
				return keyErr, valueErr
			}
			if k, v := register(ordersV1()); k != nil || v != nil {
				t.Fatal(k, v)
			}
			keyErr, valueErr := register(tc.next)
			if (keyErr == nil) != tc.keyOK {
				t.Errorf("key subject: %v, want compatible=%v", keyErr, tc.keyOK)
			}
			if tc.keyProblemField != "" {
				var ierr *IncompatibleError
				if !errors.As(keyErr, &ierr) || ierr.Problems[0].Field != tc.keyProblemField {
					t.Errorf("key problem %v, want one about %s", keyErr, tc.keyProblemField)
				}
			}
			wantValueOK := tc.valueProblem == nil
			if (valueErr == nil) != wantValueOK {
				t.Fatalf("value subject: %v, want compatible=%v", valueErr, wantValueOK)
			}
			if tc.valueProblem != nil {
				var ierr *IncompatibleError
				if !errors.As(valueErr, &ierr) || ierr.Level != Backward || ierr.Version != 1 {
					t.Fatalf("value error %v", valueErr)
				}
				p := ierr.Problems[0]
				if got := (problem{p.Field, p.Old, p.New}); got != *tc.valueProblem {
					t.Errorf("value problem %+v (%s), want %+v", got, p, *tc.valueProblem)
				}
				t.Logf("refused: %s", ierr.Messages()[0])
			}
			if tc.readOldWithNewSide {
				readOldWithNew(t, ordersV1(), tc.next, topic)
			}
		})
	}
}

// readOldWithNew encodes a row with cdcd's codec under old and decodes it
// with hamba/avro's resolver using new's schema as the reader: the
// registry's BACKWARD verdict, checked on bytes by another implementation.
func readOldWithNew(t *testing.T, old, next *Table, topic string) {
	t.Helper()
	row := []any{int64(7), int64(3), int64(-9), float32(1.5), 2.25, "1234.50", "hello", int64(1700000000000000), "eu", "C7"}
	env := Envelope{After: row, Op: 'c', Source: SourceInfo{Connector: "postgresql", Table: "orders"}}
	buf, err := AppendEnvelope(nil, old, &env)
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := ValueSchema(old, topic)
	rs, _ := ValueSchema(next, topic)
	writer, reader := avro.MustParse(ws), avro.MustParse(rs)
	resolved, err := avro.NewSchemaCompatibility().Resolve(reader, writer)
	if err != nil {
		t.Fatalf("hamba cannot resolve: %v", err)
	}
	// A fresh API per call: hamba caches decoders by a fingerprint that
	// resolved schemas from different readers of one writer share.
	var got map[string]any
	if err := (avro.Config{}).Freeze().Unmarshal(resolved, buf, &got); err != nil {
		t.Fatalf("hamba cannot read old data with the new schema: %v", err)
	}
	after, ok := got["after"].(map[string]any)
	if !ok {
		t.Fatalf("after = %#v", got["after"])
	}
	var value map[string]any
	for _, v := range after {
		value, _ = v.(map[string]any)
	}
	if value == nil {
		t.Fatalf("after holds %#v", after)
	}
	if len(value) != len(next.Columns) {
		t.Fatalf("read %d columns, want %d: %v", len(value), len(next.Columns), value)
	}
}
