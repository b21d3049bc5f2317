package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Lag is how far the reader is behind the server, for metrics and the
// binlog-retention alert (like a PostgreSQL slot's lag).
type Lag struct {
	// ServerFile and ServerPos are the end of the server's binlog; File and
	// Pos where the reader is.
	ServerFile, File string
	ServerPos, Pos   uint32
	// Bytes of binlog between the reader and the end (0 when the reader's
	// file is no longer listed: see Retention).
	Bytes int64
	// Behind is the age of the newest change emitted (0 before the first).
	Behind time.Duration
	// Retention is how long the server keeps binlogs
	// (binlog_expire_logs_seconds, else expire_logs_days; 0: forever). A
	// pipeline stopped longer than this loses its resume point.
	Retention time.Duration
}

// Lag asks the server where its binlog ends and how long it keeps it.
// REQUIRES: REPLICATION CLIENT (MariaDB: BINLOG MONITOR).
func (r *Reader) Lag(ctx context.Context) (Lag, error) {
	ci, err := parseDSN(r.cfg.DSN)
	if err != nil {
		return Lag{}, err
	}
	db, err := ci.open()
	if err != nil {
		return Lag{}, err
	}
	defer db.Close()
	l := Lag{File: r.stats.BinlogFile(), Pos: r.stats.BinlogPos.Load()}
	if ms := r.stats.LastCommitted.Load(); ms > 0 {
		l.Behind = time.Since(time.UnixMilli(ms))
	}
	if l.Retention, err = retention(ctx, db); err != nil {
		return l, err
	}
	files, err := binaryLogs(ctx, db)
	if err != nil {
		return l, err
	}
	if len(files) > 0 {
		last := files[len(files)-1]
		l.ServerFile, l.ServerPos = last.name, uint32(last.size)
	}
	l.Bytes = lagBytes(files, l.File, l.Pos)
	return l, nil
}

type binlogFile struct {
	name string
	size int64
}

// lagBytes counts the binlog bytes after (file, pos) in files (the server's
// SHOW BINARY LOGS, oldest first).
func lagBytes(files []binlogFile, file string, pos uint32) int64 {
	var n int64
	seen := false
	for _, f := range files {
		switch {
		case f.name == file:
			seen = true
			n += max(0, f.size-int64(pos))
		case seen:
			n += f.size
		}
	}
	return n
}

func binaryLogs(ctx context.Context, db *sql.DB) ([]binlogFile, error) {
	rows, err := db.QueryContext(ctx, "SHOW BINARY LOGS")
	if err != nil {
		return nil, fmt.Errorf("mysql: SHOW BINARY LOGS: %w", err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []binlogFile
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("mysql: SHOW BINARY LOGS: %w", err)
		}
		size, _ := strconv.ParseInt(string(vals[1]), 10, 64)
		out = append(out, binlogFile{name: string(vals[0]), size: size})
	}
	return out, rows.Err()
}

// retention reads how long the server keeps binlogs.
func retention(ctx context.Context, db *sql.DB) (time.Duration, error) {
	for _, v := range []struct {
		name string
		unit time.Duration
	}{{"binlog_expire_logs_seconds", time.Second}, {"expire_logs_days", 24 * time.Hour}} {
		s, err := globalVar(ctx, db, v.name)
		if err != nil {
			if strings.Contains(err.Error(), "Unknown system variable") {
				continue
			}
			return 0, err
		}
		f, err := strconv.ParseFloat(s, 64)
		if err == nil && f > 0 {
			return time.Duration(f * float64(v.unit)), nil
		}
	}
	return 0, nil
}
