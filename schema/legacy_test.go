package schema

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// legacyTable and legacyEnvelopes are the inputs of
// testdata/legacy_envelope.json: the schemas and records cdcd wrote with
// the envelope it used before Debezium's (source record cdcd.Source, every
// row field nullable, NOT NULL as the cdcd.not_null property).
func legacyTable() *Table {
	return &Table{
		Namespace: "public", Name: "orders",
		Columns: []Column{
			{Name: "id", Kind: Int64, SourceType: "int8"},
			{Name: "qty", Kind: Int32, SourceType: "int4"},
			{Name: "note", Kind: String, SourceType: "text", Nullable: true},
			{Name: "body", Kind: String, SourceType: "text"},
			{Name: "price", Kind: Decimal, Precision: 10, Scale: 2, SourceType: "numeric(10,2)"},
			{Name: "tags", Kind: List, Elem: &Column{Kind: String, Nullable: true}, SourceType: "_text", Nullable: true},
			{Name: "at", Kind: TimestampTZ, SourceType: "timestamptz", Nullable: true},
		},
		Key: []int{0},
	}
}

func legacyEnvelopes() []Envelope {
	src := func(pos byte, snap string, tx, lsn uint64) SourceInfo {
		return SourceInfo{Version: "0.1.0-dev", Connector: "postgresql", Name: "shop", TsMs: 1700000000000 + int64(pos),
			Snapshot: snap, DB: "shop", Schema: "public", Table: "orders", TxID: tx, LSN: lsn, Position: []byte{0, 0, 0, 0, 1, 0, 0, pos}}
	}
	row := func(id int64, body any) []any {
		return []any{id, int64(3), "first", body, "12.50", []any{"a", nil}, int64(1700000000123456)}
	}
	key := func(id int64) []any { return []any{id, nil, nil, nil, nil, nil, nil} }
	return []Envelope{
		{After: row(1, "hello"), Op: 'r', TsMs: 1700000001000, Source: src(1, "true", 0, 0x100)},
		{After: row(2, "world"), Op: 'c', TsMs: 1700000001001, Source: src(2, "false", 501, 0x200)},
		{Before: key(2), After: row(2, Unchanged), Op: 'u', TsMs: 1700000001002, Source: src(3, "false", 502, 0x300)},
		{Before: key(1), Op: 'd', TsMs: 1700000001003, Source: src(4, "false", 503, 0x400)},
		{Op: 't', TsMs: 1700000001004, Source: src(5, "false", 504, 0x500)},
	}
}

// legacyFixture is testdata/legacy_envelope.json.
type legacyFixture struct {
	KeySchema   string `json:"key_schema"`
	ValueSchema string `json:"value_schema"`
	Records     []struct {
		Key, Value string
	} `json:"records"`
}

func readLegacyFixture(t *testing.T) legacyFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/legacy_envelope.json")
	if err != nil {
		t.Fatal(err)
	}
	var f legacyFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestLegacyRecordsDecode: records written with the legacy envelope read
// back exactly (decoded and scanned) through the table rebuilt from their
// own value schema, as a sink reading an upgraded pipeline's log does.
func TestLegacyRecordsDecode(t *testing.T) {
	f := readLegacyFixture(t)
	if !IsLegacyEnvelope(f.ValueSchema) {
		t.Fatal("the fixture's value schema is not recognised as legacy")
	}
	tbl, err := TableFromValueSchema(f.ValueSchema)
	if err != nil {
		t.Fatal(err)
	}
	if want := legacyTable(); !tbl.Equal(want) {
		t.Fatalf("table %s, want %s", tbl, want)
	}
	want := legacyEnvelopes()
	for i, rec := range f.Records {
		body, _ := hex.DecodeString(rec.Value)
		got, err := DecodeEnvelope(tbl, body)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("record %d:\n got %#v\nwant %#v", i, got, want[i])
		}
		info, err := ScanEnvelope(tbl, body)
		if err != nil {
			t.Fatalf("scan %d: %v", i, err)
		}
		if info.Op != want[i].Op || !bytes.Equal(info.Position, want[i].Source.Position) || info.LSN != want[i].Source.LSN ||
			info.HasAfter != (want[i].After != nil) || (info.Unchanged > 0) != (want[i].Op == 'u') {
			t.Errorf("scan %d: %+v", i, info)
		}
		if rec.Key != "" {
			row := want[i].After
			if row == nil {
				row = want[i].Before
			}
			if k, err := DecodeKey(tbl, mustHex(rec.Key)); err != nil || k[0] != row[0] {
				t.Errorf("key %d: %v %v", i, k, err)
			}
		}
	}
	// The same table in today's layout reads nothing of it.
	if _, err := DecodeEnvelope(legacyTable(), mustHex(f.Records[1].Value)); err == nil {
		t.Error("a legacy record decoded with the current layout")
	}
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
