package mariadbserver

import (
	"context"
	"fmt"
	"strings"
)

// QuoteIdent quotes a MariaDB identifier with backticks.
func QuoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}

// CreateDatabase creates database name.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	db, err := s.Open("")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+QuoteIdent(name)); err != nil {
		return fmt.Errorf("mariadbserver: create database %q: %w", name, err)
	}
	return nil
}

// DropDatabase drops database name if it exists, first killing the
// connections whose current database it is (their open transactions would
// hold metadata locks the drop waits for).
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	db, err := s.Open("")
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx,
		"SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", name)
	if err != nil {
		return fmt.Errorf("mariadbserver: drop database %q: list its connections: %w", name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return fmt.Errorf("mariadbserver: drop database %q: %w", name, err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mariadbserver: drop database %q: list its connections: %w", name, err)
	}
	for _, id := range ids {
		// The connection may be gone already (error 1094, unknown thread).
		_, _ = db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
	}
	if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+QuoteIdent(name)); err != nil {
		return fmt.Errorf("mariadbserver: drop database %q: %w", name, err)
	}
	return nil
}
