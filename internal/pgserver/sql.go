package pgserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Connect opens a connection to database dbname as the superuser.
func (s *Server) Connect(ctx context.Context, dbname string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, s.DSN(dbname))
	if err != nil {
		return nil, fmt.Errorf("pgserver: connect to %q on port %d: %w", dbname, s.port, err)
	}
	return conn, nil
}

// CreateDatabase creates database name (quoted as an identifier).
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := s.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("pgserver: create database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, first terminating the
// backends that use it (walsenders streaming its slots included) and
// dropping the replication slots that belong to it; PostgreSQL refuses to
// drop a database that still has logical slots. Retried until ctx ends, as a
// terminated walsender releases its slot only as it exits.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	conn, err := s.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		err := dropDatabase(ctx, conn, name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: drop database %q: %w", name, errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func dropDatabase(ctx context.Context, conn *pgx.Conn, name string) error {
	// pg_terminate_backend with a timeout waits for the process to exit.
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000)
		FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
		return fmt.Errorf("terminate slot users: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name)
		FROM pg_replication_slots WHERE database = $1`, name); err != nil {
		return fmt.Errorf("drop slots: %w", err)
	}
	// FORCE terminates the remaining backends connected to it.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return err
	}
	return nil
}

// DropSlot drops replication slot name if it exists, terminating the
// walsender that is streaming from it first.
func (s *Server) DropSlot(ctx context.Context, name string) error {
	conn, err := s.Connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		_, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 5000), pg_drop_replication_slot(slot_name)
			FROM pg_replication_slots WHERE slot_name = $1`, name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: drop slot %q: %w", name, errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
