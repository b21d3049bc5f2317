package daemon_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The workload's tables: every change is to one known key, so the test
// knows the exact sequence of changes each key must show in the changelog.
const workloadDDL = `
CREATE TABLE acct (id bigint PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), active boolean, at timestamptz);
CREATE TABLE kv (k text PRIMARY KEY, v bigint, data bytea);
`

const null = "∅"

// model holds the source's expected state and, per key, the changes the
// changelog must hold for it, rendered as "op|col|col|...".
type model struct {
	rng       *rand.Rand
	nextID    int64
	acct      map[int64][]string // live rows: owner, balance, active, at
	kv        map[string][]string
	want      map[string][]string // "acct/1", "kv/x" -> changes in order
	truncates int
}

func newModel(seed uint64) *model {
	return &model{rng: rand.New(rand.NewPCG(seed, 99)), acct: map[int64][]string{}, kv: map[string][]string{}, want: map[string][]string{}}
}

func (m *model) record(key, op string, cols []string) {
	m.want[key] = append(m.want[key], op+"|"+strings.Join(cols, "|"))
}

func (m *model) acctRow() []string {
	bal := null
	if m.rng.IntN(5) > 0 {
		bal = fmt.Sprintf("%d.%02d", m.rng.IntN(100000)-50000, m.rng.IntN(100))
	}
	act := null
	if m.rng.IntN(5) > 0 {
		act = fmt.Sprint(m.rng.IntN(2) == 1)
	}
	at := fmt.Sprint(1_700_000_000_000_000 + m.rng.Int64N(1_000_000_000_000))
	return []string{fmt.Sprintf("owner-%d", m.rng.IntN(1000)), bal, act, at}
}

func sqlArg(s string) any {
	if s == null {
		return nil
	}
	return s
}

func atArg(s string) any {
	var us int64
	fmt.Sscan(s, &us)
	return time.UnixMicro(us)
}

// step runs one random statement inside tx and records what it changes.
func (m *model) step(ctx context.Context, tx pgx.Tx) error {
	ids := keys(m.acct)
	switch r := m.rng.IntN(100); {
	case r < 35 || len(ids) < 5:
		m.nextID++
		id, row := m.nextID, m.acctRow()
		_, err := tx.Exec(ctx, `INSERT INTO acct VALUES ($1, $2, $3, $4, $5)`, id, row[0], sqlArg(row[1]), sqlArg(row[2]), atArg(row[3]))
		m.acct[id] = row
		m.record(fmt.Sprint("acct/", id), "c", append([]string{fmt.Sprint(id)}, row...))
		return err
	case r < 60:
		id, row := ids[m.rng.IntN(len(ids))], m.acctRow()
		_, err := tx.Exec(ctx, `UPDATE acct SET owner = $2, balance = $3, active = $4, at = $5 WHERE id = $1`, id, row[0], sqlArg(row[1]), sqlArg(row[2]), atArg(row[3]))
		m.acct[id] = row
		m.record(fmt.Sprint("acct/", id), "u", append([]string{fmt.Sprint(id)}, row...))
		return err
	case r < 70:
		id := ids[m.rng.IntN(len(ids))]
		_, err := tx.Exec(ctx, `DELETE FROM acct WHERE id = $1`, id)
		delete(m.acct, id)
		m.record(fmt.Sprint("acct/", id), "d", []string{fmt.Sprint(id), null, null, null, null})
		return err
	case r < 75: // primary-key change: a delete of the old key, an insert of the new
		id := ids[m.rng.IntN(len(ids))]
		m.nextID++
		nid := m.nextID
		_, err := tx.Exec(ctx, `UPDATE acct SET id = $2 WHERE id = $1`, id, nid)
		row := m.acct[id]
		delete(m.acct, id)
		m.acct[nid] = row
		m.record(fmt.Sprint("acct/", id), "d", []string{fmt.Sprint(id), null, null, null, null})
		m.record(fmt.Sprint("acct/", nid), "c", append([]string{fmt.Sprint(nid)}, row...))
		return err
	case r < 90:
		k := fmt.Sprintf("k%03d", m.rng.IntN(60))
		v := fmt.Sprint(m.rng.Int64())
		data := make([]byte, m.rng.IntN(20))
		for i := range data {
			data[i] = byte(m.rng.IntN(256))
		}
		_, err := tx.Exec(ctx, `INSERT INTO kv VALUES ($1, $2, $3) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v, data = EXCLUDED.data`, k, v, data)
		op := "c"
		if _, ok := m.kv[k]; ok {
			op = "u"
		}
		m.kv[k] = []string{v, hex.EncodeToString(data)}
		m.record("kv/"+k, op, []string{k, v, hex.EncodeToString(data)})
		return err
	case r < 99:
		ks := keys(m.kv)
		if len(ks) == 0 {
			return nil
		}
		k := ks[m.rng.IntN(len(ks))]
		_, err := tx.Exec(ctx, `DELETE FROM kv WHERE k = $1`, k)
		delete(m.kv, k)
		m.record("kv/"+k, "d", []string{k, null, null})
		return err
	default:
		_, err := tx.Exec(ctx, `TRUNCATE kv`)
		m.kv = map[string][]string{}
		m.truncates++
		return err
	}
}

func keys[K int64 | string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// run commits n transactions of 1-4 statements each. It returns a WAL
// position inside the last one: once the source has flushed past it (it
// confirms commit LSNs), that transaction and all before it are durable.
func (m *model) run(ctx context.Context, conn *pgx.Conn, n int, pause time.Duration) (uint64, error) {
	var mark uint64
	for i := 0; i < n; i++ {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return 0, err
		}
		for j := 0; j < 1+m.rng.IntN(4); j++ {
			if err := m.step(ctx, tx); err != nil {
				tx.Rollback(ctx)
				return 0, err
			}
		}
		var s string
		if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
			tx.Rollback(ctx)
			return 0, err
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		mark = uint64(lsn)
		if pause > 0 {
			time.Sleep(pause)
		}
	}
	return mark, nil
}

// changelog reads a changelog table with iceberg-go's scan and groups its
// rows per key in log order (partition, offset), rendered like the model.
func changelog(t *testing.T, cat catalog.Catalog, ident table.Identifier, keyPrefix string) (perKey map[string][]string, truncates int) {
	t.Helper()
	tbl, err := cat.LoadTable(t.Context(), ident)
	if err != nil {
		t.Fatalf("load %v: %v", ident, err)
	}
	at, err := tbl.Scan().ToArrowTable(t.Context())
	if err != nil {
		t.Fatalf("scan %v: %v", ident, err)
	}
	defer at.Release()
	type row struct {
		key       string
		part      int32
		off       int64
		rendering string
	}
	var rows []row
	names := []string{}
	for _, f := range at.Schema().Fields() {
		if !strings.HasPrefix(f.Name, "_cdc_") {
			names = append(names, f.Name)
		}
	}
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		col := func(name string) arrow.Array { return rec.Column(rec.Schema().FieldIndices(name)[0]) }
		for i := 0; i < int(rec.NumRows()); i++ {
			op := col("_cdc_op").(*array.String).Value(i)
			if op == "t" {
				truncates++
				continue
			}
			vals := make([]string, len(names))
			for j, n := range names {
				vals[j] = render(col(n), i)
			}
			rows = append(rows, row{
				key:       keyPrefix + vals[0],
				part:      col("_cdc_partition").(*array.Int32).Value(i),
				off:       col("_cdc_offset").(*array.Int64).Value(i),
				rendering: op + "|" + strings.Join(vals, "|"),
			})
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].part != rows[j].part {
			return rows[i].part < rows[j].part
		}
		return rows[i].off < rows[j].off
	})
	perKey = map[string][]string{}
	for _, r := range rows {
		perKey[r.key] = append(perKey[r.key], r.rendering)
	}
	return perKey, truncates
}

func render(a arrow.Array, i int) string {
	if a.IsNull(i) {
		return null
	}
	switch a := a.(type) {
	case *array.Int64:
		return fmt.Sprint(a.Value(i))
	case *array.String:
		return a.Value(i)
	case *array.Boolean:
		return fmt.Sprint(a.Value(i))
	case *array.Decimal128:
		return a.Value(i).ToString(a.DataType().(*arrow.Decimal128Type).Scale)
	case *array.Timestamp:
		return fmt.Sprint(int64(a.Value(i)))
	case *array.Binary:
		return hex.EncodeToString(a.Value(i))
	}
	return fmt.Sprintf("<%T>", a)
}

// compare reports every key whose changelog differs from the model: a
// missing change, a duplicated one, or one out of order.
func compare(t *testing.T, want map[string][]string, got map[string][]string, prefix string) {
	t.Helper()
	bad := 0
	for k, w := range want {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if g := got[k]; !slices.Equal(g, w) {
			bad++
			if bad <= 5 {
				t.Errorf("key %s:\n got  %q\n want %q", k, g, w)
			}
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			bad++
			if bad <= 5 {
				t.Errorf("key %s is in the changelog but was never written: %q", k, g)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d keys differ", bad)
	}
}
