package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Once a pipeline has captured, changes can vanish without an error: a
// table dropped from the publication, the publication told to publish
// inserts only, publish_via_partition_root turned off for a partitioned
// table, a table dropped, or dropped and created again under its name (a
// new OID: a new table). The reader checks the publication and the tables'
// identities at every start, every PublicationCheckInterval while it
// streams, and on every Relation message whose OID is not the table's
// known one; each problem stops the table concerned (a source.Fault
// without a row: the emitter pauses it) with what to run on the
// publication and the re-snapshot that repairs the changes missed. Before
// the slot exists nothing can have been missed, and a wrong publication
// is a *PublicationError as before.

// tableIdentity is what makes a captured table the same one: its OID and
// its row in pg_publication_rel (0 when published by FOR ALL TABLES or
// FOR TABLES IN SCHEMA). Kept in the reader's state per "schema.table".
type tableIdentity struct {
	OID    uint32 `json:"oid"`
	PubRel uint32 `json:"pubrel,omitempty"`
	// Parts are a partitioned table's leaf partitions as last checked
	// (partitionList), "" for a plain table or one checked before they
	// were recorded.
	Parts string `json:"parts,omitempty"`
}

// pubState is the publication as the catalog shows it.
type pubState struct {
	exists                        bool
	ins, upd, del, trunc, viaRoot bool
	members                       map[uint32]uint32 // published relation OID -> pg_publication_rel OID (0: by ALL TABLES or schema)
	// filtered names, per published relation OID, the row filter or column
	// list the publication applies to it (PostgreSQL 15).
	filtered map[uint32]string
}

// readPublication reads the publication's options and members.
func readPublication(ctx context.Context, q querier, name string) (pubState, error) {
	p := pubState{members: map[uint32]uint32{}}
	err := q.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot FROM pg_publication WHERE pubname = $1`,
		name).Scan(&p.ins, &p.upd, &p.del, &p.trunc, &p.viaRoot)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("postgres: look up publication %s: %w", name, err)
	}
	p.exists = true
	rows, err := q.Query(ctx, `SELECT c.oid, coalesce(pr.oid, 0)
		FROM pg_publication_tables pt
		JOIN pg_publication p ON p.pubname = pt.pubname
		JOIN pg_namespace n ON n.nspname = pt.schemaname
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
		LEFT JOIN pg_publication_rel pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid
		WHERE pt.pubname = $1`, name)
	if err != nil {
		return p, fmt.Errorf("postgres: tables of publication %s: %w", name, err)
	}
	for rows.Next() {
		var rel, pubrel uint32
		if err := rows.Scan(&rel, &pubrel); err != nil {
			rows.Close()
			return p, err
		}
		p.members[rel] = pubrel
	}
	if err := rows.Err(); err != nil {
		return p, fmt.Errorf("postgres: tables of publication %s: %w", name, err)
	}
	p.filtered, err = publicationFilters(ctx, q, name)
	return p, err
}

// publicationFilters names, per relation OID, the row filter (WHERE) or
// column list a publication applies to it (PostgreSQL 15 and later; none
// before). pgoutput then leaves out the rows the filter rejects — an update
// that moves a row out of it is sent as a delete — and the columns not
// listed, which would reach the mirror as if dropped: changes missed
// without an error.
func publicationFilters(ctx context.Context, q querier, name string) (map[uint32]string, error) {
	var version int
	if err := q.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return nil, fmt.Errorf("postgres: server version: %w", err)
	}
	if version < 150000 {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT pr.prrelid, pg_get_expr(pr.prqual, pr.prrelid),
		  (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
		   WHERE a.attrelid = pr.prrelid AND a.attnum = ANY(pr.prattrs::int2[]))
		FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
		WHERE p.pubname = $1 AND (pr.prqual IS NOT NULL OR pr.prattrs IS NOT NULL)`, name)
	if err != nil {
		return nil, fmt.Errorf("postgres: filters of publication %s: %w", name, err)
	}
	defer rows.Close()
	out := map[uint32]string{}
	for rows.Next() {
		var rel uint32
		var where, cols *string
		if err := rows.Scan(&rel, &where, &cols); err != nil {
			return nil, err
		}
		var what []string
		if where != nil {
			what = append(what, "the row filter WHERE "+*where)
		}
		if cols != nil {
			what = append(what, "the column list ("+*cols+")")
		}
		out[rel] = strings.Join(what, " and ")
	}
	return out, rows.Err()
}

// missingOps names the operations p does not publish.
func (p pubState) missingOps() []string {
	var out []string
	for _, op := range []struct {
		on   bool
		name string
	}{{p.ins, "insert"}, {p.upd, "update"}, {p.del, "delete"}, {p.trunc, "truncate"}} {
		if !op.on {
			out = append(out, op.name)
		}
	}
	return out
}

// tableCheck is one captured table as a check sees it: its catalog
// description (nil when it no longer exists).
type tableCheck struct {
	name string // "schema.table" as configured
	t    *catalogTable
	// renamed is, for a table gone from its name, the name its stored OID
	// now has ("schema.table"): renamed, or moved to another schema.
	renamed string
	// leaves are a partitioned table's leaf partitions, by OID.
	leaves map[uint32]leafPartition
	// refused says why the table, which exists, cannot be captured as it
	// is now (no key any more, REPLICA IDENTITY NOTHING).
	refused *TableError
}

// leafPartition is a leaf partition of a captured partitioned table.
type leafPartition struct {
	name string // "schema.table"
	// where is its partition constraint (ancestors' included), which
	// selects its rows from the root; "" when it has none.
	where string
}

// checkTables compares the tables with the publication and their stored
// identities. It returns a fault per table that stopped receiving all of
// its changes, and the identities to store once those faults are durable.
//
// It also returns, per table, the leaf partitions attached (or created)
// since the last check: the rows of a table attached as a partition were
// never inserted through the root, so pgoutput sends none of them, and
// the caller reads them with an incremental snapshot.
func (r *Reader) checkTables(pub pubState, tables []tableCheck, known map[string]tableIdentity) (map[string]*source.Fault, map[string]tableIdentity, map[string][]leafPartition) {
	faults := map[string]*source.Fault{}
	ids := map[string]tableIdentity{}
	attached := map[string][]leafPartition{}
	pubName := pgx.Identifier{r.cfg.Publication}.Sanitize()
	resnap := func(table string) string {
		return "then re-snapshot it, since changes were missed: cdcd snapshot -c FILE --replace " + table
	}
	for _, tc := range tables {
		name, t := tc.name, tc.t
		prev, seen := known[name]
		if tc.refused != nil {
			faults[name] = refusedFault(name, tc.refused)
			if seen {
				ids[name] = prev
			}
			continue
		}
		if t == nil && tc.renamed != "" {
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s was renamed to %s (ALTER TABLE ... RENAME or SET SCHEMA): cdcd captures tables by name, so its changes under the new name are missed", name, tc.renamed),
				Fix: fmt.Sprintf("rename it back and re-snapshot it (cdcd snapshot -c FILE --replace %s), or capture it under its new name: replace %s with %s in source.postgres.tables and restart",
					name, name, tc.renamed)}
			if seen {
				ids[name] = prev
			}
			continue
		}
		if t == nil {
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s was dropped: it no longer exists, so its changes end and the mirror keeps its last rows", name),
				Fix:    "create the table again and re-snapshot it (cdcd snapshot -c FILE --replace " + name + "), or remove it from source.postgres.tables and restart"}
			if seen {
				ids[name] = prev
			}
			continue
		}
		id := tableIdentity{OID: t.oid, PubRel: pub.members[t.oid], Parts: partitionList(tc.leaves)}
		ident := t.ident()
		ops := pub.missingOps()
		_, member := pub.members[t.oid]
		switch {
		case seen && prev.OID != t.oid:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s was dropped and created again (OID %d, now %d): a new table; the mirror still holds the old one's rows and lacks the new one's",
					name, prev.OID, t.oid),
				Fix: resnapshotFix(name, "")}
		case !pub.exists:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("publication %s no longer exists, so no change of %s is sent", r.cfg.Publication, name),
				Fix:    fmt.Sprintf("run CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true); %s", pubName, ident, resnap(name))}
			id.PubRel = prev.PubRel
		case t.unlogged:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s is UNLOGGED (ALTER TABLE ... SET UNLOGGED): its changes are not written to the WAL, so none reach cdcd and they are missed", name),
				Fix:    fmt.Sprintf("run ALTER TABLE %s SET LOGGED; %s", ident, resnap(name))}
			id.PubRel = prev.PubRel
		case !member:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s is no longer in publication %s (dropped from it by ALTER PUBLICATION), so its changes are not sent and are missed", name, r.cfg.Publication),
				Fix:    fmt.Sprintf("run ALTER PUBLICATION %s ADD TABLE %s; %s", pubName, ident, resnap(name))}
			id.PubRel = prev.PubRel // a later re-add shows as a new row
		case seen && prev.PubRel != 0 && id.PubRel != 0 && prev.PubRel != id.PubRel:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("table %s was removed from publication %s and added again: the changes made in between were not sent", name, r.cfg.Publication),
				Fix:    resnapshotFix(name, "")}
		case pub.filtered[t.oid] != "":
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("publication %s publishes %s with %s, so the changes it leaves out are missed", r.cfg.Publication, name, pub.filtered[t.oid]),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s (no WHERE, no column list); %s",
					pubName, ident, pubName, ident, resnap(name))}
		case len(ops) > 0:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("publication %s does not publish %s, so those changes of %s are missed", r.cfg.Publication, strings.Join(ops, ", "), name),
				Fix:    fmt.Sprintf("run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'); %s", pubName, resnap(name))}
		case t.partitioned && !pub.viaRoot:
			faults[name] = &source.Fault{
				Reason: fmt.Sprintf("publication %s publishes the partitions of %s under their own names (publish_via_partition_root is off), which cdcd does not capture, so its changes are missed",
					r.cfg.Publication, name),
				Fix: fmt.Sprintf("run ALTER PUBLICATION %s SET (publish_via_partition_root = true); %s", pubName, resnap(name))}
		}
		if seen && prev.OID == t.oid && prev.Parts != "" && id.Parts != prev.Parts {
			gone, added := diffPartitions(prev.Parts, tc.leaves)
			attached[name] = added
			if len(gone) > 0 {
				f := &source.Fault{
					Reason: fmt.Sprintf("partition %s of %s was detached or dropped: its rows left %s at the source without a change pgoutput sends (a DELETE would), so the mirror still holds them",
						strings.Join(gone, ", "), name, name),
					Fix: "to make the mirror equal the source, re-snapshot the table: cdcd snapshot -c FILE --replace " + name +
						"; to keep those rows in the mirror (an archive of what the source dropped), resume it as it is: cdcd table skip -c FILE " + name}
				if other := faults[name]; other != nil {
					f.Reason, f.Fix = other.Reason+"; and "+f.Reason, other.Fix+"; then "+f.Fix
				}
				faults[name] = f
			}
		}
		ids[name] = id
	}
	return faults, ids, attached
}

// partitionList is leaves as kept in tableIdentity.Parts: "oid:schema.table"
// by OID, comma-separated.
func partitionList(leaves map[uint32]leafPartition) string {
	oids := make([]uint32, 0, len(leaves))
	for oid := range leaves {
		oids = append(oids, oid)
	}
	slices.Sort(oids)
	parts := make([]string, len(oids))
	for i, oid := range oids {
		parts[i] = strconv.FormatUint(uint64(oid), 10) + ":" + leaves[oid].name
	}
	return strings.Join(parts, ",")
}

// diffPartitions compares the leaves recorded (a partitionList) with
// today's: the names of those gone, and the new ones.
func diffPartitions(prev string, leaves map[uint32]leafPartition) (gone []string, added []leafPartition) {
	was := map[uint32]bool{}
	for _, p := range strings.Split(prev, ",") {
		oidText, name, _ := strings.Cut(p, ":")
		oid, err := strconv.ParseUint(oidText, 10, 32)
		if err != nil {
			continue
		}
		was[uint32(oid)] = true
		if _, ok := leaves[uint32(oid)]; !ok {
			gone = append(gone, name)
		}
	}
	for _, oid := range slices.Sorted(maps.Keys(leaves)) {
		if !was[oid] {
			added = append(added, leaves[oid])
		}
	}
	return gone, added
}

// readLeaves reads a partitioned table's leaf partitions.
func readLeaves(ctx context.Context, q querier, oid uint32) (map[uint32]leafPartition, error) {
	rows, err := q.Query(ctx, `SELECT c.oid, n.nspname, c.relname, pg_get_partition_constraintdef(c.oid)
		FROM pg_partition_tree($1::oid::regclass) p JOIN pg_class c ON c.oid = p.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE p.isleaf`, oid)
	if err != nil {
		return nil, fmt.Errorf("postgres: partitions of table OID %d: %w", oid, err)
	}
	defer rows.Close()
	out := map[uint32]leafPartition{}
	for rows.Next() {
		var id uint32
		var ns, name string
		var where *string
		if err := rows.Scan(&id, &ns, &name, &where); err != nil {
			return nil, err
		}
		lp := leafPartition{name: ns + "." + name}
		if where != nil {
			lp.where = *where
		}
		out[id] = lp
	}
	return out, rows.Err()
}

// readAttached queues an incremental snapshot of the rows of partitions
// attached to table, which pgoutput never sent: of each partition's rows
// by its partition constraint, or of the whole table when one has none.
func (r *Reader) readAttached(ctx context.Context, table string, added []leafPartition) error {
	if len(added) == 0 {
		return nil
	}
	names := make([]string, len(added))
	where := make([]string, len(added))
	whole := false
	for i, p := range added {
		names[i], where[i] = p.name, "("+p.where+")"
		whole = whole || p.where == ""
	}
	if whole {
		where = nil
	}
	return r.readAgain(ctx, table, where, "partition-attached",
		"partitions were attached to a captured table: pgoutput sends none of their rows from before the attach", "partitions", names)
}

// readAgain queues an incremental snapshot of the rows of table that
// where selects (OR'ed; all its rows when empty), which changed at the
// source without a change pgoutput sends (what says how), or of the whole
// table when a snapshot of it is queued or running already (the rows may
// be behind it). Under snapshot: never the reader only warns.
func (r *Reader) readAgain(ctx context.Context, table string, where []string, origin, what string, attrs ...any) error {
	if !(r.cfg.Snapshot || r.cfg.Incremental.Load) {
		r.logger.Warn(what+": the mirror does not have those rows as they are now (snapshot: never)",
			append([]any{"table", table, "what_to_do", "cdcd snapshot -c FILE " + table}, attrs...)...)
		return nil
	}
	req := snapshot.Request{Table: table, Origin: origin}
	if len(where) > 0 {
		req.Where = strings.Join(where, " OR ")
	}
	r.logger.Info(what+": reading those rows again with an incremental snapshot",
		append([]any{"table", table, "where", req.Where}, attrs...)...)
	if r.inc.Queued(table) {
		req.Where = ""
		return r.inc.Restart(ctx, req)
	}
	return r.inc.Submit(ctx, req)
}

// renamedTo returns the name ("schema.table") of the table whose OID is
// oid, or "" when there is none (dropped, or never known: oid 0).
func renamedTo(ctx context.Context, q querier, oid uint32) (string, error) {
	if oid == 0 {
		return "", nil
	}
	var ns, name string
	err := q.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.oid = $1 AND c.relkind IN ('r', 'p')`, oid).Scan(&ns, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("postgres: the name of table OID %d: %w", oid, err)
	}
	return ns + "." + name, nil
}

// refusedFault is the fault of captured table qn whose version now cdcd
// cannot read (te: no key any more, a column of a type without a
// mapping): te's reason, and its fix followed by the re-snapshot that
// replaces the changes passed over meanwhile.
func refusedFault(qn string, te *TableError) *source.Fault {
	reason, fix, _ := strings.Cut(strings.TrimPrefix(te.Error(), "postgres: "), ". Fix: ")
	if fix == "" {
		reason, fix, _ = strings.Cut(reason, "; cdcd cannot capture it. ")
		reason += "; cdcd cannot capture it"
	}
	return &source.Fault{Reason: reason, Fix: strings.TrimSuffix(fix, ".") + "; " + resnapshotFix(qn, "then ")}
}

// resnapshotFix is the fix of a table whose mirror missed changes.
func resnapshotFix(table, first string) string {
	return first + "re-snapshot the table: cdcd snapshot -c FILE --replace " + table +
		" (or, accepting that the mirror misses those changes, cdcd table skip -c FILE " + table + ")"
}

// tableFaultChange is the change that stops a table for f: no row, at
// lsn (after every change of the transaction that committed there).
func tableFaultChange(name string, lsn uint64, f *source.Fault) source.Change {
	ns, tbl := splitTable(name)
	return source.Change{Table: &schema.Table{Namespace: ns, Name: tbl}, Pos: pgpos.New(lsn, math.MaxUint32), LSN: lsn, Fault: f}
}

// checkPublication runs the check over conn and stops every table that
// fails it, through e, at lsn; the identities are stored once the faults
// are durable.
func (r *Reader) checkPublication(ctx context.Context, conn *pgx.Conn, st *sourceState, lsn uint64, e source.Emitter) error {
	pub, err := readPublication(ctx, conn, r.cfg.Publication)
	if err != nil {
		return err
	}
	var checks []tableCheck
	for _, name := range r.cfg.Tables {
		s, t := splitTable(name)
		qn := s + "." + t
		tc := tableCheck{name: qn}
		ct, err := describeNamed(ctx, conn, s, t)
		switch {
		case err == nil:
			tc.t = ct
			if ct.partitioned {
				if tc.leaves, err = readLeaves(ctx, conn, ct.oid); err != nil {
					return err
				}
			}
		case !errors.Is(err, errNoTable):
			if !errors.As(err, &tc.refused) {
				return err
			}
		default:
			if tc.renamed, err = renamedTo(ctx, conn, st.Tables[qn].OID); err != nil {
				return err
			}
		}
		checks = append(checks, tc)
	}
	faults, ids, attached := r.checkTables(pub, checks, st.Tables)
	// The snapshots of attached partitions are queued (durably) before
	// the identities that no longer show them as new are saved.
	for _, tc := range checks {
		if err := r.readAttached(ctx, tc.name, attached[tc.name]); err != nil {
			return err
		}
	}
	labels, err := r.checkEnums(ctx, conn, checks, st.EnumLabels)
	if err != nil {
		return err
	}
	types, err := r.checkColumnTypes(ctx, conn, checks, st.ColumnTypes) // coltypes.go
	if err != nil {
		return err
	}
	if len(faults) > 0 {
		var batch []source.Change
		for _, tc := range checks {
			if f := faults[tc.name]; f != nil {
				batch = append(batch, tableFaultChange(tc.name, lsn, f))
				r.logFault(tc.name, f)
			}
		}
		if err := e.Emit(ctx, batch); err != nil {
			return err
		}
	}
	for name := range r.faultsLogged {
		if faults[name] == nil {
			delete(r.faultsLogged, name) // resolved: a new fault is news again
		}
	}
	changed := len(ids) != len(st.Tables) || !maps.Equal(labels, st.EnumLabels) || !sameTypes(types, st.ColumnTypes)
	for name, id := range ids {
		changed = changed || st.Tables[name] != id
	}
	if !changed {
		return nil
	}
	st.Tables, st.EnumLabels, st.ColumnTypes = ids, labels, types
	return saveJSON(ctx, r.state, r.stateKey(), st)
}

// logFault says at ERROR that table pauses for f, once per fault: every
// check emits the fault again (the emitter keeps a known pause as it is,
// and pauses the table anew if it was resumed meanwhile), but only a new
// reason is news for the operator.
func (r *Reader) logFault(table string, f *source.Fault) {
	if r.faultsLogged[table] == f.Reason {
		r.logger.Debug("a captured table still misses changes; it stays paused", "table", table, "reason", f.Reason)
		return
	}
	if r.faultsLogged == nil {
		r.faultsLogged = map[string]string{}
	}
	r.faultsLogged[table] = f.Reason
	r.logger.Error("a captured table stopped receiving all of its changes; it pauses", "table", table,
		"reason", f.Reason, "what_to_do", f.Fix)
}

// streamError turns an ErrorResponse on the replication stream into an
// error. A publication missing while a change is decoded stops the reader
// with the fix: PostgreSQL reads the publication as of each change, so the
// changes written while it was gone cannot be decoded, even once it is
// created again.
func (r *Reader) streamError(msg *pgproto3.ErrorResponse) error {
	err := errorFromBackend(msg)
	if msg.Code != "42704" || !strings.Contains(msg.Message, "publication") {
		return err
	}
	names := make([]string, len(r.cfg.Tables))
	for i, t := range r.cfg.Tables {
		s, tb := splitTable(t)
		names[i] = pgx.Identifier{s, tb}.Sanitize()
	}
	return &PublicationError{Publication: r.cfg.Publication, Detail: fmt.Sprintf("was dropped, and PostgreSQL cannot decode the changes "+
		"written while it was missing (%s). Create it again (CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true);) "+
		"and restart: if no change was written while it was missing, capture goes on and every table pauses for a re-snapshot "+
		"(cdcd snapshot -c FILE --replace TABLE). If this error comes again, the slot cannot get past that point: start the "+
		"pipeline over with a new slot (drop slot %s, remove the pipeline's data_dir) and a fresh snapshot", msg.Message,
		pgx.Identifier{r.cfg.Publication}.Sanitize(), strings.Join(names, ", "), r.cfg.Slot)}
}
