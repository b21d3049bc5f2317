package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// catalogColumn is a column as the catalog describes it.
type catalogColumn struct {
	name     string
	oid      uint32
	typmod   int32
	typeName string
	notNull  bool
}

// catalogTable is a captured table as the catalog describes it.
type catalogTable struct {
	schema, name string
	columns      []catalogColumn
	key          []string
}

func (t *catalogTable) qualified() string { return t.schema + "." + t.name }

// ident quotes schema.table for SQL.
func (t *catalogTable) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

func (t *catalogTable) info() tableInfo {
	ti := tableInfo{key: t.key, notNull: map[string]bool{}, typeNames: map[string]string{}}
	for _, c := range t.columns {
		ti.notNull[c.name] = c.notNull
		ti.typeNames[c.name] = c.typeName
	}
	return ti
}

// splitTable splits "schema.table"; a bare name is in public.
func splitTable(s string) (schema, table string) {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "public", s
}

var errNoTable = errors.New("postgres: table not found")

// describeTable reads a table's columns (excluding dropped and generated
// ones, which pgoutput does not send) and primary key from the catalog.
func describeTable(ctx context.Context, conn *pgx.Conn, schemaName, table string) (*catalogTable, error) {
	t := &catalogTable{schema: schemaName, name: table}
	var relid uint32
	var kind string
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schemaName, table).Scan(&relid, &kind)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s.%s does not exist in the source database; check source.postgres.tables", errNoTable, schemaName, table)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up %s.%s: %w", schemaName, table, err)
	}
	if kind != "r" && kind != "p" {
		return nil, fmt.Errorf("postgres: %s.%s is not a table (relkind %s); only tables can be captured", schemaName, table, kind)
	}
	rows, err := conn.Query(ctx, `SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull
		FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, relid)
	if err != nil {
		return nil, fmt.Errorf("postgres: columns of %s: %w", t.qualified(), err)
	}
	for rows.Next() {
		var c catalogColumn
		if err := rows.Scan(&c.name, &c.oid, &c.typmod, &c.typeName, &c.notNull); err != nil {
			return nil, err
		}
		t.columns = append(t.columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: columns of %s: %w", t.qualified(), err)
	}
	rows, err = conn.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`, relid)
	if err != nil {
		return nil, fmt.Errorf("postgres: primary key of %s: %w", t.qualified(), err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		t.key = append(t.key, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: primary key of %s: %w", t.qualified(), err)
	}
	if len(t.key) == 0 {
		return nil, errNoPrimaryKey(t.qualified())
	}
	return t, nil
}

// ensurePublication creates the publication for tables if it is missing, and
// checks that an existing one covers them and publishes every operation.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name string, tables []*catalogTable) (created bool, err error) {
	var ins, upd, del, trunc bool
	err = conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`,
		name).Scan(&ins, &upd, &del, &trunc)
	if errors.Is(err, pgx.ErrNoRows) {
		idents := make([]string, len(tables))
		for i, t := range tables {
			idents[i] = t.ident()
		}
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pgx.Identifier{name}.Sanitize(), strings.Join(idents, ", "))
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false, fmt.Errorf("postgres: create publication %s: %w", name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("postgres: look up publication %s: %w", name, err)
	}
	if !ins || !upd || !del || !trunc {
		return false, fmt.Errorf("postgres: publication %s does not publish every operation (insert %t, update %t, delete %t, truncate %t); "+
			"run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", name, ins, upd, del, trunc, name)
	}
	var missing []string
	for _, t := range tables {
		var ok bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
			name, t.schema, t.name).Scan(&ok)
		if err != nil {
			return false, fmt.Errorf("postgres: check publication %s: %w", name, err)
		}
		if !ok {
			missing = append(missing, t.ident())
		}
	}
	if len(missing) > 0 {
		return false, fmt.Errorf("postgres: publication %s does not include %s; run ALTER PUBLICATION %s ADD TABLE %s",
			name, strings.Join(missing, ", "), name, strings.Join(missing, ", "))
	}
	return false, nil
}

// slotStatus is a replication slot as pg_replication_slots shows it.
type slotStatus struct {
	exists         bool
	plugin         string
	database       string
	walStatus      string
	confirmedFlush uint64
	active         bool
}

func lookupSlot(ctx context.Context, conn *pgx.Conn, name string) (slotStatus, error) {
	var s slotStatus
	var plugin, db, wal *string
	var flush *string
	err := conn.QueryRow(ctx, `SELECT plugin, database, wal_status, confirmed_flush_lsn::text, active
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&plugin, &db, &wal, &flush, &s.active)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("postgres: look up slot %s: %w", name, err)
	}
	s.exists = true
	s.plugin, s.database, s.walStatus = deref(plugin), deref(db), deref(wal)
	if flush != nil {
		lsn, err := parseLSN(*flush)
		if err != nil {
			return s, err
		}
		s.confirmedFlush = lsn
	}
	return s, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// sourceState is what the reader keeps durably between runs.
type sourceState struct {
	SystemID     string `json:"system_id"`
	Slot         string `json:"slot"`
	SlotCreated  bool   `json:"slot_created"`
	SnapshotDone bool   `json:"snapshot_done"`
}

func loadState(ctx context.Context, st State, key string) (sourceState, error) {
	var s sourceState
	b, err := st.Load(ctx, key)
	if err != nil || b == nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("postgres: stored state %s: %w", key, err)
	}
	return s, nil
}

func saveState(ctx context.Context, st State, key string, s sourceState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return st.Save(ctx, key, b)
}
