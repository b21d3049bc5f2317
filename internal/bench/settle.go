package bench

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settle writes back what the benchmark itself left dirty (the table's
// fill, the streaming workload: the database's pages and WAL or binlog)
// before a phase is timed, so no phase pays for another's writes.
//
// Without it the fill's 1–2 GB of dirty pages sat in the page cache when
// the load started and the kernel wrote them back during it (30 s after
// they were written): the raw limits only read and did not mind, while
// cdcd's fsyncs queued behind that writeback (a commit of 35k rows took
// 585–642 ms, both cores idle, once in each of two runs; BENCHMARKS.md,
// session 31). A database on its own host, as in production, leaves
// nothing dirty in cdcd's page cache.
func (b *run) settle(ctx context.Context) error {
	t0 := time.Now()
	before := dirtyBytes()
	if b.flushDB != nil {
		if err := b.flushDB(ctx); err != nil {
			// A DSN given by the user may not allow it: say so, go on.
			b.printf("  (the database's dirty pages were not flushed: %v)", err)
		}
	}
	syscall.Sync()
	b.printf("  settled: %d MB dirty written back in %v", before>>20, time.Since(t0).Round(time.Millisecond))
	return ctx.Err()
}

// dirtyBytes is the page cache's dirty bytes (/proc/meminfo), 0 when
// unknown.
func dirtyBytes() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Dirty:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// checkpointPG has PostgreSQL write its dirty buffers out (CHECKPOINT
// needs a superuser or pg_checkpoint).
func (b *run) checkpointPG(ctx context.Context) error {
	_, err := b.conn.Exec(ctx, "CHECKPOINT")
	return err
}

// flushInnoDB has MariaDB's page cleaners write every dirty page of the
// buffer pool out (innodb_max_dirty_pages_pct 0 for as long as it takes,
// at most a minute), then restores the settings. The cleaners' rate is
// raised meanwhile: at the default innodb_io_capacity (200 pages a
// second) 256 MiB of dirty pages took 26–40 s.
func flushInnoDB(ctx context.Context, db *sql.DB) error {
	var pct, capacity, most string
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.innodb_max_dirty_pages_pct, @@GLOBAL.innodb_io_capacity, @@GLOBAL.innodb_io_capacity_max").
		Scan(&pct, &capacity, &most); err != nil {
		return err
	}
	restore := context.WithoutCancel(ctx)
	for _, set := range []struct{ name, value, was string }{
		{"innodb_io_capacity_max", "1000000", most}, // first: capacity may not exceed it
		{"innodb_io_capacity", "1000000", capacity},
		{"innodb_max_dirty_pages_pct", "0", pct},
	} {
		if _, err := db.ExecContext(ctx, "SET GLOBAL "+set.name+" = "+set.value); err != nil {
			return err
		}
		defer db.ExecContext(restore, "SET GLOBAL "+set.name+" = "+set.was) // in reverse: capacity before its maximum
	}
	for deadline := time.Now().Add(time.Minute); ; {
		var name string
		var dirty int64
		if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'").Scan(&name, &dirty); err != nil {
			return err
		}
		if dirty == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d pages still dirty after a minute", dirty)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
