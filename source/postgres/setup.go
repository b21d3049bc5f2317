package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgident"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// catalogColumn is a column as the catalog describes it.
type catalogColumn struct {
	name     string
	oid      uint32
	typmod   int32
	typeName string
	notNull  bool
	dims     int
	// hasDefault: the column has a DEFAULT; hasMissing: rows that predate
	// it hold a value they were not rewritten with (attmissingval).
	hasDefault, hasMissing bool
	// attnum identifies the column: one dropped and added again under its
	// name has a new one.
	attnum int
}

// catalogTable is a captured table as the catalog describes it.
type catalogTable struct {
	oid          uint32
	schema, name string
	partitioned  bool
	// unlogged: ALTER TABLE ... SET UNLOGGED; its changes are not in the
	// WAL (a publication FOR ALL TABLES leaves it out; one naming it
	// refuses the change).
	unlogged bool
	columns  []catalogColumn
	// key holds the columns that identify a row in the replication stream:
	// the replica identity index's under REPLICA IDENTITY USING INDEX, the
	// primary key's otherwise.
	key []string
}

func (t *catalogTable) qualified() string { return t.schema + "." + t.name }

// columnNames lists the columns' names in order.
func (t *catalogTable) columnNames() []string {
	out := make([]string, len(t.columns))
	for i, c := range t.columns {
		out[i] = c.name
	}
	return out
}

// attnums are the attnums of st's columns (0 for one the catalog lacks).
func (t *catalogTable) attnums(st *schema.Table) []int {
	out := make([]int, len(st.Columns))
	for i, c := range st.Columns {
		out[i] = t.column(c.Name).attnum
	}
	return out
}

// ident quotes schema.table for SQL.
func (t *catalogTable) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// warnInheritance says, for each captured plain table that other tables
// inherit from (INHERITS; TimescaleDB's chunks are such children), that
// the mirror holds the table's own rows only: pgoutput sends the
// children's changes under their own names, so reading their rows with
// the parent's would load rows whose changes are never captured.
func (r *Reader) warnInheritance(ctx context.Context, q querier, tables []*catalogTable) error {
	for _, t := range tables {
		if t.partitioned {
			continue
		}
		var kids []string
		err := q.QueryRow(ctx, `SELECT coalesce(array_agg(n.nspname || '.' || c.relname ORDER BY n.nspname, c.relname), '{}')
			FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE i.inhparent = $1`, t.oid).Scan(&kids)
		if err != nil {
			return fmt.Errorf("postgres: tables inheriting from %s: %w", t.qualified(), err)
		}
		if len(kids) > 0 {
			r.logger.Warn("tables inherit from a captured table: its mirror holds its own rows only (SELECT ... FROM ONLY), "+
				"since PostgreSQL sends the changes of the tables inheriting from it under their own names",
				"table", t.qualified(), "inheriting", kids, "what_to_do", "to capture their rows, add them to source.postgres.tables (each is mirrored as a table of its own)")
		}
	}
	return nil
}

// from is the table in a query's FROM: its own rows only (ONLY), not
// those of tables that inherit from it, whose changes pgoutput sends
// under their own names; a partitioned table with its partitions, whose
// changes it sends under the root's (publish_via_partition_root).
func (t *catalogTable) from() string {
	if t.partitioned {
		return t.ident()
	}
	return "ONLY " + t.ident()
}

func (t *catalogTable) info() tableInfo {
	ti := tableInfo{key: t.key, notNull: map[string]bool{}, typeNames: map[string]string{}, dims: map[string]int{}}
	for _, c := range t.columns {
		ti.notNull[c.name] = c.notNull
		ti.typeNames[c.name] = c.typeName
		ti.dims[c.name] = c.dims
	}
	return ti
}

// relationMessage is the Relation message pgoutput would send for t.
func (t *catalogTable) relationMessage() *pglogrepl.RelationMessage {
	msg := &pglogrepl.RelationMessage{RelationID: t.oid, Namespace: t.schema, RelationName: t.name}
	for _, c := range t.columns {
		msg.Columns = append(msg.Columns, &pglogrepl.RelationMessageColumn{Name: c.name, DataType: c.oid, TypeModifier: c.typmod})
	}
	return msg
}

// splitTable splits "schema.table"; a bare name is in public.
func splitTable(s string) (schema, table string) {
	if ns, tbl, err := pgident.Split(s); err == nil {
		return ns, tbl // parts may be "quoted" (internal/pgident)
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:]
	}
	return "public", s
}

var errNoTable = errors.New("postgres: table not found")

// lookupTableOID finds a table by name.
func lookupTableOID(ctx context.Context, q querier, schemaName, table string) (uint32, error) {
	var relid uint32
	err := q.QueryRow(ctx, `SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schemaName, table).Scan(&relid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, &TableError{Table: schemaName + "." + table,
			Err: fmt.Errorf("does not exist in the source database; check source.postgres.tables (%w)", errNoTable)}
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: look up %s.%s: %w", schemaName, table, err)
	}
	return relid, nil
}

// describeNamed looks a table up by name and describes it. A table that
// does not exist, or is dropped between the two reads, is a *TableError
// wrapping errNoTable: a drop racing a check is the drop, not a failure
// of the whole reader.
func describeNamed(ctx context.Context, q querier, schemaName, table string) (*catalogTable, error) {
	oid, err := lookupTableOID(ctx, q, schemaName, table)
	if err != nil {
		return nil, err
	}
	ct, err := describeTable(ctx, q, oid)
	if errors.Is(err, errNoTable) {
		return nil, &TableError{Table: schemaName + "." + table,
			Err: fmt.Errorf("was dropped while it was described; check source.postgres.tables (%w)", err)}
	}
	return ct, err
}

// describeTable reads a table's columns (without dropped and generated
// ones, which pgoutput does not send), replica identity and key.
func describeTable(ctx context.Context, q querier, relid uint32) (*catalogTable, error) {
	t := &catalogTable{oid: relid}
	var kind, ident string
	err := q.QueryRow(ctx, `SELECT n.nspname, c.relname, c.relkind::text, c.relreplident::text, c.relpersistence = 'u'
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, relid).Scan(&t.schema, &t.name, &kind, &ident, &t.unlogged)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errGone(relid)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up relation %d: %w", relid, err)
	}
	if kind != "r" && kind != "p" {
		return nil, &TableError{Table: t.qualified(), Err: fmt.Errorf("is not a table (relkind %s); only tables can be captured", kind)}
	}
	t.partitioned = kind == "p"
	rows, err := q.Query(ctx, `SELECT a.attname, a.atttypid, a.atttypmod, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attndims,
		a.atthasdef, a.atthasmissing, a.attnum
		FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		ORDER BY a.attnum`, relid)
	if err != nil {
		return nil, fmt.Errorf("postgres: columns of %s: %w", t.qualified(), err)
	}
	for rows.Next() {
		var c catalogColumn
		if err := rows.Scan(&c.name, &c.oid, &c.typmod, &c.typeName, &c.notNull, &c.dims, &c.hasDefault, &c.hasMissing, &c.attnum); err != nil {
			rows.Close()
			return nil, err
		}
		t.columns = append(t.columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: columns of %s: %w", t.qualified(), err)
	}
	if ident == "n" {
		return nil, errReplicaIdentityNothing(t.qualified())
	}
	if len(t.columns) == 0 {
		if err := stillExists(ctx, q, relid); err != nil {
			return nil, err
		}
	}
	cond := "i.indisprimary"
	if ident == "i" {
		cond = "i.indisreplident"
	}
	rows, err = q.Query(ctx, `SELECT a.attname FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND `+cond+` ORDER BY array_position(i.indkey::int2[], a.attnum)`, relid)
	if err != nil {
		return nil, fmt.Errorf("postgres: key of %s: %w", t.qualified(), err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		t.key = append(t.key, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: key of %s: %w", t.qualified(), err)
	}
	if len(t.key) == 0 {
		// Each read above is a statement of its own: a table dropped after
		// the first lacks its columns and key in the later ones.
		if err := stillExists(ctx, q, relid); err != nil {
			return nil, err
		}
		return nil, errNoKey(t.qualified())
	}
	return t, nil
}

// errGone says relation relid no longer exists (wrapping errNoTable).
func errGone(relid uint32) error {
	return fmt.Errorf("%w: relation %d no longer exists", errNoTable, relid)
}

// stillExists returns an error wrapping errNoTable when relation relid no
// longer exists.
func stillExists(ctx context.Context, q querier, relid uint32) error {
	var one int
	err := q.QueryRow(ctx, `SELECT 1 FROM pg_class WHERE oid = $1`, relid).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return errGone(relid)
	}
	if err != nil {
		return fmt.Errorf("postgres: look up relation %d: %w", relid, err)
	}
	return nil
}

// resolveColumns resolves the type of every column of msg; the catalog
// description t supplies declared array dimensions.
func resolveColumns(ctx context.Context, types *typeResolver, msg *pglogrepl.RelationMessage, t *catalogTable) ([]*pgdecode.Type, error) {
	info := t.info()
	out := make([]*pgdecode.Type, len(msg.Columns))
	for i, c := range msg.Columns {
		pt, err := types.resolve(ctx, c.DataType, c.TypeModifier, info.dims[c.Name])
		if err != nil && !errors.Is(err, pgdecode.ErrUnsupportedType) {
			// The catalog could not be asked (a stop's cancelled context, a
			// lost connection): nothing is known about the type yet.
			return nil, err
		}
		if err != nil {
			typeName := info.typeNames[c.Name]
			if typeName == "" {
				typeName = fmt.Sprintf("oid %d", c.DataType)
			}
			return nil, &TableError{Table: t.qualified(), Column: c.Name, Type: typeName,
				Err: fmt.Errorf("%w; cdcd cannot capture it. Exclude the table, or change the column's type", err)}
		}
		out[i] = pt
	}
	return out, nil
}

// catalogRelation builds the table version the catalog describes, the same
// one a Relation message for the table yields (same columns, key and types).
func catalogRelation(ctx context.Context, types *typeResolver, t *catalogTable) (*relation, error) {
	msg := t.relationMessage()
	pts, err := resolveColumns(ctx, types, msg, t)
	if err != nil {
		return nil, err
	}
	rel, err := buildRelation(msg, t.info(), pts)
	if err != nil {
		return nil, err
	}
	return rel, fillDefaults(ctx, types.q, t, rel)
}

// ensurePublication creates the publication for tables if it is missing,
// and checks that an existing one covers them, publishes every operation
// (truncates included) and publishes partitions through their root.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name string, tables []*catalogTable) (created bool, err error) {
	var ins, upd, del, trunc, viaRoot bool
	err = conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication WHERE pubname = $1`,
		name).Scan(&ins, &upd, &del, &trunc, &viaRoot)
	partitioned := false
	for _, t := range tables {
		partitioned = partitioned || t.partitioned
	}
	quoted := pgx.Identifier{name}.Sanitize()
	if errors.Is(err, pgx.ErrNoRows) {
		idents := make([]string, len(tables))
		for i, t := range tables {
			idents[i] = t.ident()
		}
		sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true)",
			quoted, strings.Join(idents, ", "))
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false, fmt.Errorf("postgres: create publication %s: %w", name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("postgres: look up publication %s: %w", name, err)
	}
	if !ins || !upd || !del || !trunc {
		return false, &PublicationError{Publication: name, Detail: fmt.Sprintf(
			"does not publish every operation (insert %t, update %t, delete %t, truncate %t), so changes would be missed; "+
				"run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", ins, upd, del, trunc, quoted)}
	}
	if partitioned && !viaRoot {
		return false, &PublicationError{Publication: name, Detail: fmt.Sprintf(
			"publishes changes of partitions under the partitions' names, but cdcd captures partitioned tables by their root; "+
				"run ALTER PUBLICATION %s SET (publish_via_partition_root = true)", quoted)}
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
		return false, &PublicationError{Publication: name, Detail: fmt.Sprintf("does not include %s; run ALTER PUBLICATION %s ADD TABLE %s",
			strings.Join(missing, ", "), quoted, strings.Join(missing, ", "))}
	}
	filtered, err := publicationFilters(ctx, conn, name)
	if err != nil {
		return false, err
	}
	for _, t := range tables {
		if what := filtered[t.oid]; what != "" {
			return false, &PublicationError{Publication: name, Detail: fmt.Sprintf(
				"publishes %s with %s, so the changes it leaves out would be missed; run ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s",
				t.qualified(), what, quoted, t.ident(), quoted, t.ident())}
		}
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

// sourceState is what the reader keeps durably between runs (State key
// "postgres/<slot>").
type sourceState struct {
	SystemID     string `json:"system_id"`
	Slot         string `json:"slot"`
	SlotCreated  bool   `json:"slot_created"`
	SnapshotDone bool   `json:"snapshot_done"`
	// Creating names the slot being created until SlotCreated is saved:
	// a slot of that name found at start was made for this pipeline by a
	// run that stopped before it could record it.
	Creating string `json:"creating,omitempty"`
	// Confirmed is the newest LSN the reader has reported to the server as
	// flushed, saved before it is reported: the slot can't legitimately be
	// ahead of it.
	Confirmed uint64 `json:"confirmed,omitempty"`
	// Load is the progress of an unfinished initial load.
	Load *loadProgress `json:"load,omitempty"`
	// Tables are the captured tables' identities as last checked
	// (pubcheck.go), by "schema.table".
	Tables map[string]tableIdentity `json:"tables,omitempty"`
	// EnumLabels are the labels of the enum types of the captured
	// tables' columns, by the label's pg_enum OID (enums.go).
	EnumLabels map[uint32]string `json:"enum_labels,omitempty"`
	// ColumnTypes are the captured tables' columns' types and
	// relfilenodes as last checked, by "schema.table" (coltypes.go).
	ColumnTypes map[string]tableTypes `json:"column_types,omitempty"`
}

func loadJSON(ctx context.Context, st State, key string, v any) (bool, error) {
	b, err := st.Load(ctx, key)
	if err != nil || b == nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("postgres: stored state %s: %w", key, err)
	}
	return true, nil
}

func saveJSON(ctx context.Context, st State, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return st.Save(ctx, key, b)
}

// known keeps one *schema.Table per shape, so changes of one table share
// the pointer until the shape changes (the snapshot's and the stream's
// included).
type known map[string]*schema.Table

func (k known) intern(t *schema.Table) *schema.Table {
	qn := t.QualifiedName()
	if prev := k[qn]; prev != nil && prev.Equal(t) {
		return prev
	}
	k[qn] = t
	return t
}
