package reconcile

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcd-dev/cdcd/source/mysql"
)

// The MySQL / MariaDB side. A read R is one transaction started WITH
// CONSISTENT SNAPSHOT; its positions, in the log's order (source/mysql's
// ordinals):
//
//   - Low is one past the ordinal of the pipeline's checkpoint C read
//     before R began: C's transactions had committed then, so R sees every
//     one of them, and any transaction R does not see has a greater ordinal.
//   - High carries a GTID position P that contains every transaction R
//     sees: @@gtid_binlog_pos read once the snapshot is taken (MariaDB
//     writes a transaction's GTID to the binlog, and the position, before
//     its commit is visible), or @@gtid_executed read after R's query
//     (MySQL: a transaction's GTID joins it in its commit's group, which
//     the query outlasts). P may hold more than R sees: the log must then
//     cover a little more before R is compared. MariaDB names R's exact
//     point too (binlog_snapshot_file/position, through BINLOG_GTID_POS),
//     but that function reads the binlog file from its start, a cost per
//     read that grows with the file.
//
// The log covers R once the pipeline's checkpoint contains P. There is no
// Gap: a transaction R does not see has an ordinal at or after Low, so its
// keys are left out (rule 4).

// MySQLConfig configures the MySQL / MariaDB side.
type MySQLConfig struct {
	// DSN is the pipeline's source (source.mysql.dsn).
	DSN string
	// Flavor is mysql.FlavorMySQL or mysql.FlavorMariaDB; "" detects it.
	Flavor string
	// StatementTimeout bounds each statement (0: the server's setting).
	StatementTimeout time.Duration
	// Checkpoint reads the pipeline's checkpoint as source/mysql saves it
	// (its state "mysql/checkpoint"; nil when none is saved yet).
	Checkpoint func(ctx context.Context) ([]byte, error)
	// Running, when set, says whether the pipeline's daemon runs (the
	// CLI asks its admin API). It is asked only when the server lists no
	// binlog dump: a daemon just started has not connected its reader
	// yet, and without asking it would be taken for stopped. nil: no
	// binlog dump means the pipeline is stopped.
	Running func(ctx context.Context) bool
}

// MySQL reads ranges of MySQL / MariaDB tables, hashed in the server.
type MySQL struct {
	cfg    MySQLConfig
	flavor string
	db     *sql.DB
	sums   *sql.Conn // Sums, beside the other methods
	read   *sql.Conn // Rows and Values
	seq    atomic.Uint64
	tids   []int // the server's threads of sums and read
	cpu0   time.Duration

	mu     sync.Mutex
	low    []byte // Low of the last checkpoint read, and when
	lowAt  time.Time
	lowMax time.Duration
}

// myCheckpoint is source/mysql's saved checkpoint (its frozen JSON).
type myCheckpoint struct {
	Flavor  string `json:"flavor"`
	GTID    string `json:"gtid"`
	Ordinal uint64 `json:"ordinal"`
}

// OpenMySQL connects to the source.
func OpenMySQL(ctx context.Context, cfg MySQLConfig) (*MySQL, error) {
	if cfg.Checkpoint == nil {
		return nil, errors.New("reconcile: MySQLConfig.Checkpoint is required")
	}
	db, err := mysql.OpenDB(cfg.DSN)
	if err != nil {
		return nil, err
	}
	m := &MySQL{cfg: cfg, db: db, flavor: cfg.Flavor, lowMax: time.Second}
	if err := m.open(ctx); err != nil {
		m.Close()
		return nil, fmt.Errorf("reconcile: connect to the source: %w", err)
	}
	return m, nil
}

func (m *MySQL) open(ctx context.Context) error {
	if m.flavor == "" {
		var version string
		if err := m.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return err
		}
		m.flavor = mysql.FlavorMySQL
		if strings.Contains(strings.ToLower(version), "mariadb") {
			m.flavor = mysql.FlavorMariaDB
		}
	}
	var err error
	if m.sums, err = m.conn(ctx); err != nil {
		return err
	}
	if m.read, err = m.conn(ctx); err != nil {
		return err
	}
	for _, c := range []*sql.Conn{m.sums, m.read} {
		if tid := m.threadID(ctx, c); tid > 0 {
			m.tids = append(m.tids, tid)
		}
	}
	m.cpu0 = m.threadsCPU()
	return nil
}

// threadID is the server's OS thread of connection c (0: unknown): MariaDB
// shows it in the processlist, MySQL in performance_schema.threads.
func (m *MySQL) threadID(ctx context.Context, c *sql.Conn) int {
	q := "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()"
	if m.flavor != mysql.FlavorMariaDB {
		q = "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()"
	}
	var tid sql.NullInt64
	if err := c.QueryRowContext(ctx, q).Scan(&tid); err != nil {
		return 0
	}
	return int(tid.Int64)
}

func (m *MySQL) threadsCPU() time.Duration {
	var d time.Duration
	for _, tid := range m.tids {
		d += ThreadCPU(tid)
	}
	return d
}

// conn is a connection of its own with the session's settings.
func (m *MySQL) conn(ctx context.Context) (*sql.Conn, error) {
	c, err := m.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	set := []string{"SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ", "SET NAMES utf8mb4"}
	if ms := m.cfg.StatementTimeout.Milliseconds(); ms > 0 {
		if m.flavor == mysql.FlavorMariaDB {
			set = append(set, fmt.Sprintf("SET SESSION max_statement_time = %.3f", float64(ms)/1000))
		} else {
			set = append(set, fmt.Sprintf("SET SESSION max_execution_time = %d", ms))
		}
	}
	for _, s := range set {
		if _, err := c.ExecContext(ctx, s); err != nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	return c, nil
}

// Close closes the connections.
func (m *MySQL) Close() {
	for _, c := range []*sql.Conn{m.sums, m.read} {
		if c != nil {
			c.Close()
		}
	}
	m.db.Close()
}

// CPU is the CPU time the server's threads of the reads spent since Open
// (0 when they cannot be seen from here: another host; a thread pool).
func (m *MySQL) CPU() time.Duration {
	if len(m.tids) == 0 {
		return 0
	}
	return m.threadsCPU() - m.cpu0
}

// RowHash is MD5's first 64 bits, as the server computes it.
func (m *MySQL) RowHash(text []byte) uint64 { return md5Hash(text) }

// checkpoint reads the pipeline's checkpoint (nil: none yet).
func (m *MySQL) checkpoint(ctx context.Context) (*myCheckpoint, gomysql.GTIDSet, error) {
	raw, err := m.cfg.Checkpoint(ctx)
	if err != nil || raw == nil {
		return nil, nil, err
	}
	var cp myCheckpoint
	if err := json.Unmarshal(raw, &cp); err != nil {
		return nil, nil, fmt.Errorf("reconcile: the pipeline's checkpoint (mysql/checkpoint): %w", err)
	}
	set, err := m.parseSet(cp.GTID)
	if err != nil {
		return nil, nil, fmt.Errorf("reconcile: the pipeline's checkpoint (mysql/checkpoint): %w", err)
	}
	return &cp, set, nil
}

func (m *MySQL) parseSet(s string) (gomysql.GTIDSet, error) {
	if m.flavor == mysql.FlavorMariaDB {
		return gomysql.ParseMariadbGTIDSet(s)
	}
	return gomysql.ParseMysqlGTIDSet(s)
}

// lowPos is a read's Low: one past the ordinal of a checkpoint read before
// it. An older checkpoint is as sound (it leaves more keys out), so for a
// range read (fresh false) one read less than lowMax ago serves. A read
// of keys (Rows: a drill, a retry, a repair's check) takes a fresh one:
// its keys are often there because they changed after the last Low, and
// with that Low they would be left out again, every retry within lowMax
// of it — a repair's check then called all its keys unchecked when it
// came quickly (TestReconcileMyDamage, now and then under load).
func (m *MySQL) lowPos(ctx context.Context, fresh bool) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !fresh && m.low != nil && time.Since(m.lowAt) < m.lowMax {
		return m.low, nil
	}
	at := time.Now()
	cp, _, err := m.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	if cp == nil {
		return nil, fmt.Errorf("%w: the pipeline has saved no position yet (it has not started)", ErrNotComparable)
	}
	m.low, m.lowAt = mysql.Position(cp.Ordinal+1, 0), at
	return m.low, nil
}

// myHigh is a read's High: the read's sequence number (so later reads sort
// after earlier ones, and their positions contain the earlier ones'), then
// its GTID position.
func (m *MySQL) myHigh(pos string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, m.seq.Add(1)), pos...)
}

func highGTID(high []byte) string {
	if len(high) < 8 {
		return ""
	}
	return string(high[8:])
}

// begin starts a consistent read on c, its Low read first (fresh: see
// lowPos). MariaDB's High is read at once; MySQL's, by end after the
// query.
func (m *MySQL) begin(ctx context.Context, c *sql.Conn, fresh bool) (*Read, error) {
	low, err := m.lowPos(ctx, fresh)
	if err != nil {
		return nil, err
	}
	if _, err := c.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return nil, fmt.Errorf("reconcile: start a consistent read: %w", err)
	}
	r := &Read{Low: low}
	if m.flavor != mysql.FlavorMariaDB {
		return r, nil
	}
	var gtid string
	if err := c.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&gtid); err != nil {
		m.rollback(c)
		return nil, fmt.Errorf("reconcile: read gtid_binlog_pos: %w", err)
	}
	r.High = m.myHigh(gtid)
	return r, nil
}

// end commits a read; for MySQL it reads its High first.
func (m *MySQL) end(ctx context.Context, c *sql.Conn, r *Read) error {
	if r.High == nil {
		var gtid string
		if err := c.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_executed").Scan(&gtid); err != nil {
			m.rollback(c)
			return fmt.Errorf("reconcile: read gtid_executed: %w", err)
		}
		r.High = m.myHigh(gtid)
	}
	_, err := c.ExecContext(ctx, "COMMIT")
	return err
}

func (m *MySQL) rollback(c *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.ExecContext(ctx, "ROLLBACK")
}

// Covered says whether the pipeline's checkpoint contains high's GTID
// position, and whether the pipeline runs: a binlog reader of this DSN's
// user is connected (the processlist shows a user's own threads without
// the PROCESS privilege), or, when none is, MySQLConfig.Running says the
// daemon runs (its reader is connecting: the caller waits for it).
func (m *MySQL) Covered(ctx context.Context, high []byte) (bool, bool, error) {
	want, err := m.parseSet(highGTID(high))
	if err != nil {
		return false, false, fmt.Errorf("reconcile: a read's GTID position %q: %w", highGTID(high), err)
	}
	_, have, err := m.checkpoint(ctx)
	if err != nil {
		return false, false, err
	}
	var n int
	if err := m.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'").Scan(&n); err != nil {
		return false, false, fmt.Errorf("reconcile: read the processlist: %w", err)
	}
	running := n > 0 || m.cfg.Running != nil && m.cfg.Running(ctx)
	return have != nil && have.Contain(want), running, nil
}

// Pending: the binlog past a stopped pipeline's checkpoint is not read
// here, so such a table cannot be compared until the pipeline has read it.
func (m *MySQL) Pending(ctx context.Context, t *Table, high []byte, u *unsettled) error {
	return fmt.Errorf("%w: %s: the pipeline is stopped and the source has transactions it has not read (up to %s): start it, or compare once it has caught up",
		ErrNotComparable, t.Name, highGTID(high))
}

// Committed: a MySQL read has no Gap.
func (m *MySQL) Committed(ctx context.Context, xids []uint64) (map[uint64]bool, error) {
	return map[uint64]bool{}, nil
}
