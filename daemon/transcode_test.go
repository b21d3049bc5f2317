package daemon

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres"
)

// transcodeMatrix is a column of every type cdcd carries from PostgreSQL
// (source/postgres's TestTypeMatrix, without the NaN of a constrained
// numeric, which pauses the table), as name, type and values; rows past a
// column's values hold NULL.
var transcodeMatrix = [][]string{
	{"i2", "int2", "0", "'-32768'", "32767"},
	{"i4", "int4", "'-2147483648'", "2147483647"},
	{"i8", "int8", "'-9223372036854775808'", "9223372036854775807", "0"},
	{"n", "numeric", "'NaN'", "'Infinity'", "'-Infinity'", "0", "-0.000001", "123456789012345678901234567890.123456789", "1e-20", "10000", "0.1000", "-0"},
	{"n102", "numeric(10,2)", "12345678.90", "-0.01", "0", "-0", "99999999.99"},
	{"n380", "numeric(38,0)", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "99999999999999999999999999999999999999"},
	{"n2018", "numeric(20,18)", "0.000000000000000001", "-99.999999999999999999", "1.5"},
	{"f4", "float4", "'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "1.5", "3.4028235e38", "1e-45", "0.1", "1234567"},
	{"f8", "float8", "'NaN'", "'Infinity'", "'-Infinity'", "'-0'", "0.1", "1e308", "5e-324", "123456789012345678", "1e15", "0.0001"},
	{"t", "text", "''", "'héllo wörld'", `E'tab\there\nnl'`, "repeat('x', 200)", `'back\slash'`},
	{"vc", "varchar(5)", "'ab'", "''"},
	{"bpc", "char(5)", "'ab'"},
	{"ch", `"char"`, "'a'", `'\200'`, "''"},
	{"nm", "name", "'pg_catalog'"},
	{"by", "bytea", `'\x'`, `'\x00ff10'`},
	{"b", "bool", "true", "false"},
	{"d", "date", "'infinity'", "'-infinity'", "'0044-03-15 BC'", "'2000-01-01'", "'1970-01-01'", "'4713-01-01 BC'", "'5874897-12-31'", "'1969-12-31'"},
	{"tm", "time", "'00:00'", "'23:59:59.999999'", "'24:00:00'"},
	{"ttz", "timetz", "'13:45:00.123+05:30'", "'00:00:00-14:59'"},
	{"ts", "timestamp", "'infinity'", "'-infinity'", "'0001-01-01 00:00:00 BC'", "'2000-02-29 12:34:56.789012'", "'294247-01-10 04:00:54.775806'", "'1969-12-31 23:59:59.5'"},
	{"tstz", "timestamptz", "'infinity'", "'-infinity'", "'2000-01-01 00:00:00+05'", "'0044-03-15 12:00:00+00 BC'", "'1969-12-31 23:59:59.999999+00'"},
	{"iv", "interval", "'1 year 2 months 3 days 04:05:06.789'", "'-1 mon 2 days -03:00:00'"},
	{"u", "uuid", "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "'00000000-0000-0000-0000-000000000000'"},
	{"j", "json", `'{"b": 1,   "a": [1, 2.50]}'`, `'"x"'`, "'null'"},
	{"jb", "jsonb", `'{"b": 1, "a": [1, 2.50], "c": {"d": null}}'`, "'[]'"},
	{"jp", "jsonpath", `'$.a[*] ? (@ > 1)'`},
	{"ai", "int[]", "'{}'", "'{1,NULL,3}'"},
	{"at", "text[]", `'{"a b","","NULL",null}'`},
	{"an", "numeric(10,2)[]", "'{1.50,-2}'"},
	{"e", "mood", "'happy'", "'sad'"},
	{"dom", "posint", "5"},
	{"dnum", "price", "1.25", "-3"},
	{"mo", "money", "'12.34'", "'-92233720368547758.08'"},
	{"bt", "bit(5)", "B'10101'"},
	{"ip", "inet", "'192.168.1.5/24'", "'::1'"},
	{"mac", "macaddr", "'08:00:2b:01:02:03'"},
	{"pt", "point", "'(1.5,-2)'"},
	{"x", "xml", `'<a b="1">x &amp; y</a>'`},
	{"hs", "hstore", `'a=>1, b=>NULL'`},
	{"comp", "pair", "ROW(1, 'x y', '2000-01-01 00:00:00+00', '{1.5,NULL}', 'ok')"},
	{"r4", "int4range", "'[1,10)'", "'empty'"},
	{"tsv", "tsvector", `'a fat:2A cat''s:3,4B'`},
	{"lsn", "pg_lsn", "'16/B374D848'"},
	{"o", "oid", "4294967295"},
	{"acl", "aclitem", "'postgres=r/postgres'"},
}

// teeEmitter hands each batch of a load to two emitters: a with the rows'
// Avro the source wrote from COPY binary (Change.Avro), b with it taken
// away, so b encodes every row from its decoded values as before.
type teeEmitter struct {
	a, b *emitter
	mu   sync.Mutex
	// copies holds b's copy of each prepared batch until it is emitted.
	copies map[*source.Change][]source.Change
	// rows and transcoded count the rows prepared and those a prepared
	// from the source's Avro.
	rows, transcoded int
	// lazy counts the rows a was handed without their values.
	lazy int
}

func (t *teeEmitter) TakesLazyRows() bool { return true }

func (t *teeEmitter) Prepare(batch []source.Change) {
	if len(batch) == 0 {
		return
	}
	cp := slices.Clone(batch)
	for i := range cp {
		if c := &cp[i]; c.After == nil && c.Avro != nil && c.Avro.Lazy != nil {
			if err := c.Avro.Lazy.Decode(c); err != nil { // b takes the values; a's row stays lazy
				panic(err)
			}
		}
		cp[i].Avro, cp[i].Prepared = nil, nil
	}
	t.b.Prepare(cp)
	t.a.Prepare(batch)
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range batch {
		t.rows++
		if batch[i].Avro != nil && batch[i].Prepared != nil {
			t.transcoded++
		}
	}
	t.copies[&batch[0]] = cp
}

func (t *teeEmitter) Emit(ctx context.Context, batch []source.Change) error {
	var cp []source.Change
	if len(batch) > 0 {
		t.mu.Lock()
		cp = t.copies[&batch[0]]
		delete(t.copies, &batch[0])
		t.mu.Unlock()
	}
	if cp == nil {
		cp = slices.Clone(batch)
	}
	for i := range batch { // the load marks its rows after Prepare (txid, first and last)
		p, after := cp[i].Prepared, cp[i].After
		cp[i] = batch[i]
		cp[i].Avro, cp[i].Prepared, cp[i].After = nil, p, after
		if batch[i].Avro != nil && batch[i].Avro.Lazy != nil {
			t.mu.Lock()
			t.lazy++
			t.mu.Unlock()
		}
	}
	if err := t.a.Emit(ctx, batch); err != nil {
		return err
	}
	return t.b.Emit(ctx, cp)
}

// TestTranscodedLoadSameRecords: a load of a table holding every type
// cdcd carries, NULLs and each type's edges (±infinity, NaN, -0, before
// 1970, the int64 decimal's edges), appends byte for byte the same
// records (keys, values, headers, partitions, offsets) whether the
// emitter takes the rows' Avro the source wrote from COPY binary or
// encodes them from their decoded values; and the Avro path is the one
// taken for every row.
func TestTranscodedLoadSameRecords(t *testing.T) {
	t.Parallel()
	// Every type: no row is lazy (some columns have no AvroFunc).
	t.Run("whole", func(t *testing.T) { t.Parallel(); testTranscodedLoad(t, transcodeMatrix, 0, false) })
	// The types with an AvroFunc: the rows are handed over without their
	// values (but for those whose numeric(38,0) is past int64).
	var common [][]string
	for _, c := range transcodeMatrix {
		switch c[0] {
		case "i2", "i4", "i8", "n", "n102", "n380", "n2018", "f4", "f8", "t", "vc", "bpc", "nm", "by", "b", "d", "ts", "tstz", "u", "j", "jb":
			common = append(common, c)
		}
	}
	t.Run("lazy", func(t *testing.T) { t.Parallel(); testTranscodedLoad(t, common, 0, true) })
	// A NaN in the numeric(10,2) of row 205 pauses the table: the rows
	// after it are held, the lazy ones decoded in Submit.
	t.Run("lazy-paused", func(t *testing.T) { t.Parallel(); testTranscodedLoad(t, common, 205, true) })
}

func testTranscodedLoad(t *testing.T, matrix [][]string, nanAt int, lazy bool) {
	ctx := t.Context()
	var cols, defs []string
	distinct := 0
	for _, c := range matrix {
		cols, defs = append(cols, c[0]), append(defs, c[0]+" "+c[1])
		distinct = max(distinct, len(c)-2)
	}
	distinct++ // a row of NULLs
	dsn, conn := benchDB(t, `CREATE EXTENSION IF NOT EXISTS hstore;
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE DOMAIN price AS numeric(10,2);
CREATE TYPE pair AS (a int, b text, c timestamptz, d numeric[], e mood);
CREATE TABLE matrix (id int PRIMARY KEY, nn bigint NOT NULL, `+strings.Join(defs, ", ")+`)`)
	const copies = 30 // each distinct row 30 times, so a load of many small chunks
	for i := 0; i < distinct*copies; i++ {
		vals := []string{fmt.Sprint(i + 1), fmt.Sprint(i * 7)}
		for _, c := range matrix {
			v := "NULL"
			if j := i % distinct; j < len(c)-2 {
				v = c[j+2] + "::" + c[1]
			}
			vals = append(vals, v)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO matrix (id, nn, "+strings.Join(cols, ", ")+") VALUES ("+strings.Join(vals, ", ")+")"); err != nil {
			t.Fatal(err)
		}
	}
	if nanAt > 0 {
		if _, err := conn.Exec(ctx, "UPDATE matrix SET n102 = 'NaN' WHERE id = $1", nanAt); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE matrix"); err != nil {
		t.Fatal(err)
	}
	a, la := newTestEmitter(t, "matrix", 8)
	b, lb := newTestEmitter(t, "matrix", 8)
	at := time.Unix(1_700_000_000, 123456789)
	a.clock, b.clock = func() time.Time { return at }, func() time.Time { return at }
	tee := &teeEmitter{a: a, b: b, copies: map[*source.Change][]source.Change{}}
	names := pgtest.Names(t)
	r := postgres.New(postgres.Config{DSN: dsn, Slot: names.Slot, Publication: names.Publication, Tables: []string{"matrix"},
		Snapshot: true, SpillDir: t.TempDir(), HeartbeatInterval: -1, SnapshotWorkers: 2, SnapshotChunkRows: 40},
		a.state, slog.New(slog.DiscardHandler))
	if err := loadUntilStreaming(ctx, r, tee); err != nil {
		t.Fatal(err)
	}
	defer dropBenchSlot(t, conn, names.Slot)
	// Every row but those whose numeric(38,0) is -2^63 or past int64
	// (three distinct rows), which the AvroFunc leaves to the values.
	rows := distinct * copies
	want := rows - 3*copies
	if nanAt > 0 {
		want-- // the NaN's row
	}
	if tee.rows != rows || tee.transcoded != want {
		t.Fatalf("%d rows prepared, %d of them from the source's Avro; want %d and %d", tee.rows, tee.transcoded, rows, want)
	}
	if wantLazy := map[bool]int{true: want, false: 0}[lazy]; tee.lazy != wantLazy {
		t.Fatalf("%d rows handed over without their values, want %d", tee.lazy, wantLazy)
	}
	topics, err := la.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tb, err := lb.ListTopics(ctx); err != nil || !slices.Equal(topics, tb) {
		t.Fatalf("topics %v and %v (%v)", topics, tb, err)
	}
	n := 0
	for _, topic := range topics {
		if topic == TopicState {
			continue // the reader's progress, kept in a's store alone
		}
		ra, rb := logRecords(t, la, topic), logRecords(t, lb, topic)
		if len(ra) != len(rb) {
			t.Fatalf("%s: %d records with the source's Avro, %d without", topic, len(ra), len(rb))
		}
		for i := range ra {
			if strings.HasPrefix(topic, "_") { // the registry's: appended at another time
				ra[i].Timestamp, rb[i].Timestamp = time.Time{}, time.Time{}
			}
			if !sameRecord(&ra[i], &rb[i]) {
				at := 0
				for at < min(len(ra[i].Value), len(rb[i].Value)) && ra[i].Value[at] == rb[i].Value[at] {
					at++
				}
				t.Fatalf("%s record %d differs (value from byte %d of %d/%d):\nwith    %q\nwithout %q\nheaders %q / %q", topic, i, at, len(ra[i].Value), len(rb[i].Value),
					ra[i].Value[max(0, at-20):], rb[i].Value[max(0, at-20):], ra[i].Headers, rb[i].Headers)
			}
		}
		if topic == "p.public.matrix" {
			n = len(ra)
		}
	}
	if held := heldTopic("p.public.matrix"); nanAt > 0 && n+len(logRecords(t, la, held)) != rows || nanAt == 0 && n != rows {
		t.Fatalf("%d records of the table, want %d in it and its holding topic", n, rows)
	}
}

// sameRecord compares everything a record carries.
func sameRecord(a, b *log.Record) bool {
	if a.Partition != b.Partition || a.Offset != b.Offset || !a.Timestamp.Equal(b.Timestamp) || !bytes.Equal(a.Key, b.Key) ||
		!bytes.Equal(a.Value, b.Value) || len(a.Headers) != len(b.Headers) {
		return false
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return false
		}
	}
	return true
}

// logRecords is every record of topic, partition by partition.
func logRecords(t *testing.T, lg log.Log, topic string) []log.Record {
	t.Helper()
	info, err := lg.DescribeTopic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []log.Record
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(t.Context(), topic, p.Partition, off, log.FetchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) == 0 {
				break
			}
			out = append(out, recs...)
			off = recs[len(recs)-1].Offset + 1
		}
	}
	return out
}
