package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PreconditionError refuses to start because the server or the role
// cannot give the pipeline what it needs. Nothing was created on the
// server (publication, slot) when it is returned; Fix is the statement to
// run, as exactly as the reader can name it.
type PreconditionError struct {
	What string // what is missing, e.g. "wal_level is replica"
	Fix  string
}

func (e *PreconditionError) Error() string {
	return fmt.Sprintf("postgres: cannot capture: %s. Fix: %s", e.What, e.Fix)
}

// preflight checks, before the reader creates anything on the server, that
// the server decodes logically, that the role may replicate, read the
// tables (for a load) and create the publication (when it is missing), and
// that a slot can be created (when it is missing). Every failure is a
// *PreconditionError naming the fix.
func (r *Reader) preflight(ctx context.Context, conn *pgx.Conn, tables []*catalogTable, st *sourceState) error {
	var walLevel, role string
	var canReplicate bool
	err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user,
		EXISTS (SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolreplication OR rolsuper))
		OR EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = 'rds_replication' AND pg_has_role(r.oid, 'MEMBER'))`).
		Scan(&walLevel, &role, &canReplicate)
	if err != nil {
		return fmt.Errorf("postgres: read server settings: %w", err)
	}
	quotedRole := pgx.Identifier{role}.Sanitize()
	if walLevel != "logical" {
		return &PreconditionError{What: fmt.Sprintf("the server runs with wal_level = %s; logical decoding needs wal_level = logical", walLevel),
			Fix: "run ALTER SYSTEM SET wal_level = logical; as a superuser, then restart PostgreSQL (a reload is not enough); " +
				"on a managed service set its parameter instead (RDS/Aurora: rds.logical_replication = 1; Cloud SQL: cloudsql.logical_decoding = on)"}
	}
	if !canReplicate {
		return &PreconditionError{What: fmt.Sprintf("role %s may not start replication (it lacks the REPLICATION attribute)", role),
			Fix: fmt.Sprintf("run ALTER ROLE %s WITH REPLICATION; as a superuser (RDS/Aurora: GRANT rds_replication TO %s;)", quotedRole, quotedRole)}
	}
	if r.cfg.Snapshot && !st.SnapshotDone {
		if err := checkTablePrivilege(ctx, conn, tables, "SELECT", func(t *catalogTable) string {
			return fmt.Sprintf("GRANT SELECT ON %s TO %s;", t.ident(), quotedRole)
		}); err != nil {
			return err
		}
	}
	if err := r.preflightPublication(ctx, conn, tables, quotedRole); err != nil {
		return err
	}
	if !st.SlotCreated {
		return r.preflightSlot(ctx, conn, st)
	}
	return nil
}

// checkTablePrivilege refuses the tables the role lacks priv on.
func checkTablePrivilege(ctx context.Context, conn *pgx.Conn, tables []*catalogTable, priv string, grant func(*catalogTable) string) error {
	var missing, fixes []string
	for _, t := range tables {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1::oid, $2)`, t.oid, priv).Scan(&ok); err != nil {
			return fmt.Errorf("postgres: check %s privilege on %s: %w", priv, t.qualified(), err)
		}
		if !ok {
			missing, fixes = append(missing, t.ident()), append(fixes, grant(t))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return &PreconditionError{What: fmt.Sprintf("the role lacks %s on %s", priv, strings.Join(missing, ", ")),
		Fix: "run " + strings.Join(fixes, " ")}
}

// preflightPublication checks that a missing publication can be created:
// CREATE on the database and ownership of every table.
func (r *Reader) preflightPublication(ctx context.Context, conn *pgx.Conn, tables []*catalogTable, quotedRole string) error {
	var exists, canCreate bool
	var db string
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		has_database_privilege(current_database(), 'CREATE'), current_database()`, r.cfg.Publication).Scan(&exists, &canCreate, &db)
	if err != nil {
		return fmt.Errorf("postgres: look up publication %s: %w", r.cfg.Publication, err)
	}
	if exists {
		return nil
	}
	idents := make([]string, len(tables))
	for i, t := range tables {
		idents[i] = t.ident()
	}
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert, update, delete, truncate', publish_via_partition_root = true);",
		pgx.Identifier{r.cfg.Publication}.Sanitize(), strings.Join(idents, ", "))
	if !canCreate {
		return &PreconditionError{What: fmt.Sprintf("publication %s does not exist and the role may not create it (no CREATE on database %s)", r.cfg.Publication, db),
			Fix: fmt.Sprintf("run GRANT CREATE ON DATABASE %s TO %s; or create the publication as the tables' owner: %s", pgx.Identifier{db}.Sanitize(), quotedRole, create)}
	}
	var notOwned []string
	for _, t := range tables {
		var owns bool
		if err := conn.QueryRow(ctx, `SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = $1`, t.oid).Scan(&owns); err != nil {
			return fmt.Errorf("postgres: check the owner of %s: %w", t.qualified(), err)
		}
		if !owns {
			notOwned = append(notOwned, t.ident())
		}
	}
	if len(notOwned) > 0 {
		return &PreconditionError{What: fmt.Sprintf("publication %s does not exist and only a table's owner may publish it; the role does not own %s",
			r.cfg.Publication, strings.Join(notOwned, ", ")),
			Fix: "create the publication as the tables' owner (or a superuser): " + create}
	}
	return nil
}

// preflightSlot checks, for a pipeline that has no slot yet, that a slot
// of another's is not in the way (when a load needs its own) and that one
// can be created: a free slot and a free walsender.
func (r *Reader) preflightSlot(ctx context.Context, conn *pgx.Conn, st *sourceState) error {
	if r.cfg.Snapshot && st.Creating != r.cfg.Slot {
		slot, err := lookupSlot(ctx, conn, r.cfg.Slot)
		if err != nil {
			return err
		}
		if slot.exists {
			return r.foreignSlot(ctx, conn)
		}
	}
	var exists bool
	var used, maxSlots, maxSenders int
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		(SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int`,
		r.cfg.Slot).Scan(&exists, &used, &maxSlots, &maxSenders)
	if err != nil {
		return fmt.Errorf("postgres: count replication slots: %w", err)
	}
	switch {
	case exists:
		return nil
	case maxSenders == 0:
		return &PreconditionError{What: "max_wal_senders is 0, so no replication connection is allowed",
			Fix: "run ALTER SYSTEM SET max_wal_senders = 10; then restart PostgreSQL"}
	case used >= maxSlots:
		return &PreconditionError{What: fmt.Sprintf("all %d replication slots are in use (max_replication_slots = %d)", used, maxSlots),
			Fix: fmt.Sprintf("drop a slot nothing uses any more (SELECT slot_name, active, active_pid FROM pg_replication_slots; then "+
				"SELECT pg_drop_replication_slot('name');), or run ALTER SYSTEM SET max_replication_slots = %d; and restart PostgreSQL", maxSlots+4)}
	}
	return nil
}

// slotHolder describes the process streaming from a slot, from
// pg_stat_activity; "" when no process holds it.
func slotHolder(ctx context.Context, q querier, slot string) (string, error) {
	var pid *int32
	var app, user, client string
	var since *time.Time
	err := q.QueryRow(ctx, `SELECT s.active_pid, coalesce(a.application_name, ''), coalesce(a.usename::text, ''),
		coalesce(a.client_addr::text, 'local socket'), a.backend_start
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = $1`, slot).
		Scan(&pid, &app, &user, &client, &since)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && pid == nil {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("postgres: who uses slot %s: %w", slot, err)
	}
	s := fmt.Sprintf("pid %d (application_name %q, user %q, client %s", *pid, app, user, client)
	if since != nil {
		s += ", connected since " + since.UTC().Format(time.RFC3339)
	}
	return s + ")", nil
}

// foreignSlot refuses a slot this pipeline did not create when it needs a
// load, saying whether a process streams from it (then it must not be
// dropped) or not.
func (r *Reader) foreignSlot(ctx context.Context, conn *pgx.Conn) error {
	holder, err := slotHolder(ctx, conn, r.cfg.Slot)
	if err != nil {
		return err
	}
	detail := "the slot exists but this pipeline has no record of it, and the initial load needs a slot created with its own snapshot. "
	if holder != "" {
		detail += fmt.Sprintf("It is in use right now by %s: another pipeline or consumer streams from it, so do not drop it; "+
			"give this pipeline a slot of its own (source.postgres.slot: a new name)", holder)
	} else {
		detail += fmt.Sprintf("No process streams from it now. If nothing needs it, drop it (SELECT pg_drop_replication_slot('%s');) "+
			"and cdcd creates it; or give this pipeline a slot of its own (source.postgres.slot), or set snapshot: never to stream from it as it is", r.cfg.Slot)
	}
	return &SlotError{Kind: SlotForeign, Slot: r.cfg.Slot, Detail: detail}
}
