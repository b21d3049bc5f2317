package daemon

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source/mysql"
)

// BenchmarkMariaDBStreamIntoLog: MariaDB streaming through the MySQL
// reader and the daemon's emitter (Avro key and envelope, headers, the
// per-partition dedupe, the pipelined hand-over) into the embedded log,
// without the sink, against the plain BinlogSyncer read-and-decode loop
// (mysql.DecodeLoop) over the same binlog in the same run: the producing
// half of `cdcd bench --source mariadb`'s streaming phase, whose CPU a
// loaded machine does not blur as it blurs the whole pipeline's.
// CDCD_BENCH_ROWS inserts (default 1M, the table of cdcd bench's MariaDB
// run) in transactions of 1,000, then updates of a quarter of them;
// CDCD_BENCH_STREAM_CPU=file writes a CPU profile of the reader's run.
//
//	CI=true go test ./daemon -run '^$' -bench MariaDBStreamIntoLog -benchtime 1x
func BenchmarkMariaDBStreamIntoLog(b *testing.B) {
	rows := benchRowCount()
	srv := mariadbtest.NewServer(b, mariadbserver.Options{Args: []string{"--innodb-buffer-pool-size=256M", "--max-binlog-size=256M"}})
	db, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(b, srv))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	name, start, events := fillMariaBench(b, db, rows)
	ctx := b.Context()
	for b.Loop() {
		raw, err := measureLoad(events, func() error {
			_, err := mysql.DecodeLoop(ctx, srv.ReplDSN(name), mariadbtest.ServerID(b)+1, mysql.FlavorMariaDB, start, int64(events))
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		e, lg := newTestEmitter(b, "bench", 8)
		e.connector = schema.ConnectorMySQL
		if err := ensureTopic(ctx, lg, "p."+name+".bench", log.TopicConfig{Partitions: 8}); err != nil {
			b.Fatal(err)
		}
		cp, _ := json.Marshal(map[string]any{"flavor": mysql.FlavorMariaDB, "gtid": start, "ordinal": 1})
		if err := e.state.Save(ctx, "mysql/checkpoint", cp); err != nil {
			b.Fatal(err)
		}
		r := mysql.New(mysql.Config{DSN: srv.ReplDSN(name), ServerID: mariadbtest.ServerID(b), Tables: []string{name + ".bench"}},
			e.state, slog.New(slog.DiscardHandler))
		stop := cpuProfile(b, os.Getenv("CDCD_BENCH_STREAM_CPU"))
		ours, err := measureLoad(events, func() error {
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx, e) }()
			for e.produced.Load() < int64(events) {
				select {
				case err := <-done:
					return fmt.Errorf("the reader stopped with %d of %d records appended: %w", e.produced.Load(), events, err)
				case <-time.After(5 * time.Millisecond):
				}
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		})
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if got := e.produced.Load(); got != int64(events) {
			b.Fatalf("the emitter appended %d records, want %d", got, events)
		}
		lg.Close()
		reportAgainstRaw(b, "stream", events, ours, "BinlogSyncer decode loop", raw)
	}
}

// fillMariaBench creates cdcd bench's MariaDB table in db's database and
// writes rows inserts and rows/4 updates into it in transactions of 1,000;
// start is the GTID position before them, events their row changes.
func fillMariaBench(b *testing.B, db *sql.DB, rows int) (name, start string, events int) {
	if err := db.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE bench (id BIGINT PRIMARY KEY, qty INT, label VARCHAR(40), amount DECIMAL(12,2),
		at TIMESTAMP(6) NULL, flag BOOLEAN, doc JSON, score DOUBLE)`); err != nil {
		b.Fatal(err)
	}
	if err := db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&start); err != nil {
		b.Fatal(err)
	}
	for lo := 1; lo <= rows; lo += 1000 {
		q := fmt.Sprintf(`INSERT INTO bench SELECT seq, seq %% 100000, CONCAT(MD5(seq), LPAD(HEX(seq %% 4294967296), 8, '0')),
			(seq %% 10000000) / 100, TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq SECOND, seq %% 2 = 0,
			JSON_OBJECT('k', seq %% 100, 'tag', CONCAT('t', seq %% 10)), seq / 3 FROM seq_%d_to_%d`, lo, min(lo+999, rows))
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	updates := 0
	for lo := 1; lo+999 <= rows/4; lo += 1000 {
		q := fmt.Sprintf(`UPDATE bench SET qty = qty + 1, amount = amount + 1, at = NOW(6), doc = JSON_SET(doc, '$.k', %d)
			WHERE id BETWEEN %d AND %d`, lo, lo, lo+999)
		if _, err := db.Exec(q); err != nil {
			b.Fatal(err)
		}
		updates += 1000
	}
	return name, start, rows + updates
}
