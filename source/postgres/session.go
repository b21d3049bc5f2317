package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdcd-dev/cdcd/internal/failpoint"
	"github.com/cdcd-dev/cdcd/source"
)

// session is one connection's life: check, prepare the slot, load if
// needed, stream. It holds what every step of it shares: the catalog
// connection, the replication connection, the type resolver, the captured
// tables as described at its start, the pipeline's state as loaded from
// the State, and the Emitter. The Reader it extends keeps what outlives a
// session (config, stats, the tables' interned shapes). The slot's
// crash-safety order is drawn in the package doc.
type session struct {
	*Reader
	conn   *pgx.Conn      // catalog queries
	repl   *pgconn.PgConn // replication protocol; nil until the checks pass
	types  *typeResolver
	tables []*catalogTable
	st     *sourceState
	emit   source.Emitter
}

// session runs one session until its first error.
func (r *Reader) session(ctx context.Context, e source.Emitter) error {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return fmt.Errorf("postgres: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s := &session{Reader: r, conn: conn, types: newTypeResolver(conn), st: &sourceState{}, emit: e}
	r.render = newValueRenderer(r.cfg.DSN)
	defer r.render.close()
	if err := s.check(ctx); err != nil {
		return err
	}
	had, err := s.prepareCapture(ctx, conn, s.tables, s.st)
	if err != nil {
		return err
	}
	if !s.st.SlotCreated {
		// Nothing can have been missed yet: a wrong publication stops the
		// start, with its fix. Later, it stops the tables concerned.
		if created, err := ensurePublication(ctx, conn, r.cfg.Publication, s.tables); err != nil {
			return err
		} else if created {
			r.logger.Info("created publication", "publication", r.cfg.Publication, "tables", len(s.tables))
		}
	}
	if err := r.checkPublication(ctx, conn, s.st, s.st.Confirmed, e); err != nil {
		return err
	}
	for i := 0; i < len(s.tables); i++ {
		t := s.tables[i]
		_, err := catalogRelation(ctx, s.types, t)
		te := (*TableError)(nil)
		if err == nil || !errors.As(err, &te) || !s.st.SlotCreated {
			if err != nil {
				return err // refuse unsupported types before anything starts
			}
			continue
		}
		// Captured already: this table stops alone.
		f := refusedFault(t.qualified(), te)
		r.logFault(t.qualified(), f)
		if err := e.Emit(ctx, []source.Change{tableFaultChange(t.qualified(), s.st.Confirmed, f)}); err != nil {
			return err
		}
		s.tables = slices.Delete(s.tables, i, i+1)
		i--
	}

	if s.repl, err = pgconn.Connect(ctx, replicationDSN(r.cfg.DSN)); err != nil {
		return fmt.Errorf("postgres: open replication connection: %w", err)
	}
	defer s.repl.Close(context.WithoutCancel(ctx))

	start, err := s.prepareSlot(ctx)
	if err != nil {
		return err
	}
	if err := r.queueAdded(ctx, conn, had); err != nil {
		return err
	}
	return s.stream(ctx, start)
}

// check reads the server's encoding, the pipeline's state and the captured
// tables, and refuses a start that cannot be trusted: a table that does
// not exist before anything was captured, another cluster than the one
// captured from, a failed preflight.
func (s *session) check(ctx context.Context) error {
	var encoding string
	if err := s.conn.QueryRow(ctx, "SELECT current_setting('server_encoding')").Scan(&encoding); err != nil {
		return fmt.Errorf("postgres: read server_encoding: %w", err)
	}
	if s.sqlASCII = encoding == "SQL_ASCII"; s.sqlASCII {
		s.logger.Warn("the database's encoding is SQL_ASCII: text is checked to be UTF-8, and a change with text that is not pauses its table",
			"what_to_do", "nothing unless a table pauses; then convert the text to UTF-8 in the source")
	}
	if _, err := loadJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return err
	}
	tables, missing, refused, err := s.describeTables(ctx, s.conn)
	if err != nil {
		return err
	}
	if len(refused) > 0 {
		if !s.st.SlotCreated {
			return errors.Join(refused...)
		}
		// Once captured, such a table stops alone: the publication check
		// below sends its fault (tableCheck.refused), the others stream.
		for _, err := range refused {
			s.logger.Warn("a captured table cannot be captured as it is now; it stays paused while the others stream", "err", err)
		}
	}
	if len(missing) > 0 && !s.st.SlotCreated {
		// Nothing captured yet: a name that does not exist is a mistake in
		// the config. Once captured, a table dropped pauses (pubcheck.go).
		return errors.Join(missing...)
	}
	s.tables = tables
	if err := s.warnInheritance(ctx, s.conn, tables); err != nil {
		return err
	}
	var sysID string
	if err := s.conn.QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&sysID); err != nil {
		return fmt.Errorf("postgres: read system identifier: %w", err)
	}
	if s.st.SystemID != "" && s.st.SystemID != sysID {
		return &SlotError{Kind: SystemIDChanged, Slot: s.cfg.Slot, Detail: fmt.Sprintf("the server's system identifier is %s, "+
			"but this pipeline captured from %s: a different cluster answers at this DSN (failover to a non-replica, or a restored backup); "+
			"refusing to continue because changes may be missing. Point the DSN at the original cluster or start a new pipeline", sysID, s.st.SystemID)}
	}
	s.st.SystemID = sysID
	return s.preflight(ctx, s.conn, s.tables, s.st)
}

// describeTables describes the captured tables; missing holds a
// *TableError for each that does not exist.
func (r *Reader) describeTables(ctx context.Context, conn *pgx.Conn) (tables []*catalogTable, missing, refused []error, err error) {
	var errs []error
	for _, name := range r.cfg.Tables {
		s, t := splitTable(name)
		ct, err := describeNamed(ctx, conn, s, t)
		switch {
		case errors.Is(err, errNoTable):
			missing = append(missing, err)
		case errors.As(err, new(*TableError)):
			refused = append(refused, err)
		case err != nil:
			errs = append(errs, err)
		default:
			tables = append(tables, ct)
		}
	}
	return tables, missing, refused, errors.Join(errs...)
}

// prepareSlot makes sure the slot exists and can be trusted, runs or
// resumes the initial load when one is due, and returns the LSN to stream
// from (the slot's confirmed position).
func (s *session) prepareSlot(ctx context.Context) (uint64, error) {
	slot, err := lookupSlot(ctx, s.conn, s.cfg.Slot)
	if err != nil {
		return 0, err
	}
	slotErr := func(kind SlotErrorKind, format string, args ...any) error {
		return &SlotError{Kind: kind, Slot: s.cfg.Slot, Detail: fmt.Sprintf(format, args...)}
	}
	if !slot.exists {
		if s.st.SlotCreated {
			return 0, slotErr(SlotMissing, "the slot this pipeline created is gone (dropped by someone, or a failover to a server without it): "+
				"changes since the last run may be lost. cdcd will not recreate it silently; to start over, remove the pipeline's state "+
				"(data_dir) and run again to take a fresh snapshot")
		}
		return s.createSlot(ctx)
	}
	if !s.st.SlotCreated && s.st.Creating == s.cfg.Slot {
		// This pipeline asked for the slot and stopped before it heard
		// back: nothing was loaded or confirmed from it, and the snapshot
		// it exported is gone. Waits while a walsender still creates it.
		// (An unfinished slot goes away with its walsender, hence a slot
		// that is gone by the time it is dropped.)
		s.logger.Warn("the last run stopped while creating the slot; creating it again")
		err := s.dropSlot(ctx)
		if pe := (*pgconn.PgError)(nil); err != nil && !(errors.As(err, &pe) && pe.Code == "42704") {
			return 0, fmt.Errorf("postgres: drop the half-created slot %s: %w", s.cfg.Slot, err)
		}
		return s.createSlot(ctx)
	}
	var dbName string
	if err := s.conn.QueryRow(ctx, "SELECT current_database()").Scan(&dbName); err != nil {
		return 0, fmt.Errorf("postgres: current database: %w", err)
	}
	switch {
	case slot.walStatus == "lost":
		return 0, slotErr(SlotInvalidated, "the server removed WAL the slot still needed (wal_status lost, see max_slot_wal_keep_size), "+
			"so changes were lost. cdcd will not recreate it silently; drop the slot and start the pipeline afresh with a new snapshot")
	case slot.plugin != "pgoutput" || slot.database != dbName:
		return 0, slotErr(SlotWrongPlugin, "the slot decodes database %q with plugin %q; cdcd needs pgoutput on %q: use another slot name",
			slot.database, slot.plugin, dbName)
	case !s.st.SlotCreated && s.cfg.Snapshot:
		return 0, s.foreignSlot(ctx, s.conn)
	case s.st.Confirmed != 0 && slot.confirmedFlush > s.st.Confirmed:
		return 0, slotErr(SlotAhead, "the slot's confirmed position %s is ahead of the newest position this pipeline stored (%s): "+
			"someone else consumed or advanced the slot, or the pipeline's data was restored from an older backup; the changes between "+
			"are lost to it. Start the pipeline afresh (new data_dir and slot) to take a new snapshot",
			pglogrepl.LSN(slot.confirmedFlush), pglogrepl.LSN(s.st.Confirmed))
	}
	if slot.walStatus == "unreserved" {
		s.logger.Warn("the slot is about to lose WAL it needs (wal_status unreserved)", "slot", s.cfg.Slot,
			"what_to_do", "let cdcd catch up, or raise max_slot_wal_keep_size")
	}
	if !s.st.SlotCreated { // adopt a slot made outside cdcd; no load wanted
		s.st.SlotCreated, s.st.Slot, s.st.Confirmed, s.st.SnapshotDone = true, s.cfg.Slot, slot.confirmedFlush, true
		s.logger.Info("streaming from an existing slot", "confirmed", pglogrepl.LSN(slot.confirmedFlush).String())
	}
	if s.cfg.Snapshot && !s.st.SnapshotDone {
		if s.st.Load == nil {
			// The last run stopped before the load emitted anything: start
			// over on a new slot, whose exported snapshot is exact.
			s.logger.Info("initial load did not start before the last stop; creating the slot again")
			// Recorded as being created before it is dropped: a stop from
			// here until the new slot is recorded finds no slot, or one it
			// made, and creates it again (not "the slot is gone").
			s.st.SlotCreated, s.st.Creating = false, s.cfg.Slot
			if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
				return 0, err
			}
			if err := s.dropSlot(ctx); err != nil {
				return 0, fmt.Errorf("postgres: drop unused slot %s: %w", s.cfg.Slot, err)
			}
			return s.createSlot(ctx)
		}
		if err := s.resumeLoad(ctx); err != nil {
			return 0, err
		}
	}
	if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return 0, err
	}
	return slot.confirmedFlush, nil
}

// dropSlot drops the pipeline's slot, retrying while a walsender still
// holds it: the one of a process killed while it used or created the slot,
// until it notices or ends. It never asks the server to wait: a walsender
// whose client was killed during such a wait goes on waiting, and drops
// the slot by name once it is free — the slot this process has created
// meanwhile ("replication slot does not exist" a moment later; crash
// suite, upsert-v3 under load).
func (s *session) dropSlot(ctx context.Context) error {
	began, warned := time.Now(), false
	for {
		err := pglogrepl.DropReplicationSlot(ctx, s.repl, s.cfg.Slot, pglogrepl.DropReplicationSlotOptions{})
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" { // object_in_use: the slot is active
			return err
		}
		if !warned && time.Since(began) > 10*time.Second {
			warned = true
			s.logger.Warn("waiting for another connection to release the slot before it is dropped", "slot", s.cfg.Slot,
				"what_to_do", "if no other cdcd uses the slot, find its walsender in pg_stat_replication (pg_replication_slots.active_pid)")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// createSlot creates the slot (exporting a snapshot when a load is
// configured) and runs the load in that snapshot while the replication
// connection stays idle, which keeps the snapshot alive.
func (s *session) createSlot(ctx context.Context) (uint64, error) {
	action := "NOEXPORT_SNAPSHOT"
	if s.cfg.Snapshot {
		action = "EXPORT_SNAPSHOT"
	}
	// The intent goes first: a crash after the server made the slot and
	// before the state below is saved (or a walsender that finishes the
	// slot after its client died) leaves a slot only this record names,
	// and the next start creates it again (prepareSlot).
	s.st.Creating = s.cfg.Slot
	if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return 0, err
	}
	stopWatch := s.watchSlotCreation(ctx, s.conn, s.repl.PID())
	res, err := pglogrepl.CreateReplicationSlot(ctx, s.repl, s.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: action, Mode: pglogrepl.LogicalReplication})
	stopWatch()
	if err != nil {
		return 0, fmt.Errorf("postgres: create replication slot %s: %w", s.cfg.Slot, err)
	}
	failpoint.Hit("source.after-slot-created")
	cp, err := parseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	s.logger.Info("created replication slot", "consistent_point", res.ConsistentPoint)
	s.st.Slot, s.st.SlotCreated, s.st.SnapshotDone, s.st.Confirmed, s.st.Load, s.st.Creating = s.cfg.Slot, true, !s.cfg.Snapshot, cp, nil, ""
	if err := saveJSON(ctx, s.state, s.stateKey(), s.st); err != nil {
		return 0, err
	}
	if s.cfg.Snapshot {
		s.st.Load = &loadProgress{ConsistentPoint: cp}
		if err := s.load(ctx, res.SnapshotName); err != nil {
			return 0, err
		}
	}
	return cp, nil
}
