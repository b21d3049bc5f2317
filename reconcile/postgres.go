package reconcile

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgident"
)

// PostgresConfig configures the PostgreSQL side.
type PostgresConfig struct {
	// DSN is the pipeline's source database: its slot says how far the
	// pipeline's log reaches.
	DSN string
	// ReadDSN, when set, is where ranges are read (a streaming replica of
	// the source); default DSN.
	ReadDSN string
	// Slot and Publication are the pipeline's.
	Slot, Publication string
	// StatementTimeout bounds each statement (0: the server's setting).
	StatementTimeout time.Duration
}

// Postgres reads ranges of PostgreSQL tables, hashed in the server.
type Postgres struct {
	cfg     PostgresConfig
	read    *pgx.Conn // ranges (the replica when configured)
	primary *pgx.Conn // the slot; the same as read without a replica
	readDSN string
	replica bool

	// lanes read Sums, each on a connection of its own (the replica when
	// configured), so they run beside each other and the other methods;
	// connected at a lane's first read.
	mu    sync.Mutex
	lanes []*pgx.Conn
	procs []backend // read's and the lanes' backends, for their CPU time
}

// backend is a server process and its CPU time when it was connected.
type backend struct {
	pid  int
	cpu0 time.Duration
}

// sessionParams fix every text the server renders (docs/types.md: cdcd
// renders PostgreSQL's texts as with these settings).
var sessionParams = map[string]string{
	"TimeZone": "UTC", "DateStyle": "ISO, MDY", "IntervalStyle": "iso_8601", "extra_float_digits": "1",
	"application_name": "cdcd reconcile",
}

// OpenPostgres connects to the source (and its replica).
func OpenPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	p := &Postgres{cfg: cfg}
	var err error
	if p.primary, err = connect(ctx, cfg.DSN, cfg.StatementTimeout); err != nil {
		return nil, fmt.Errorf("reconcile: connect to the source: %w", err)
	}
	p.read = p.primary
	if cfg.ReadDSN != "" && cfg.ReadDSN != cfg.DSN {
		if p.read, err = connect(ctx, cfg.ReadDSN, cfg.StatementTimeout); err != nil {
			p.primary.Close(ctx)
			return nil, fmt.Errorf("reconcile: connect to the replica (reconcile.replica_dsn): %w", err)
		}
	}
	p.readDSN = cfg.DSN
	if cfg.ReadDSN != "" {
		p.readDSN = cfg.ReadDSN
	}
	var pid int
	if err := p.read.QueryRow(ctx, "SELECT pg_backend_pid(), pg_is_in_recovery()").Scan(&pid, &p.replica); err != nil {
		p.Close()
		return nil, err
	}
	p.procs = []backend{{pid, ProcessCPU(pid)}}
	if _, err := p.lane(ctx, 0); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// lane is the connection of Sums' lane i, connected at its first use.
func (p *Postgres) lane(ctx context.Context, i int) (*pgx.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.lanes) <= i {
		p.lanes = append(p.lanes, nil)
	}
	if c := p.lanes[i]; c != nil {
		return c, nil
	}
	c, err := connect(ctx, p.readDSN, p.cfg.StatementTimeout)
	if err != nil {
		if i > 0 {
			return nil, fmt.Errorf("reconcile: connect to the source for parallel read %d (reconcile.parallel; 1 reads on one connection): %w", i+1, err)
		}
		return nil, fmt.Errorf("reconcile: connect to the source: %w", err)
	}
	var pid int
	if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		c.Close(ctx)
		return nil, err
	}
	p.lanes[i] = c
	p.procs = append(p.procs, backend{pid, ProcessCPU(pid)})
	return c, nil
}

func connect(ctx context.Context, dsn string, timeout time.Duration) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	for k, v := range sessionParams {
		cc.RuntimeParams[k] = v
	}
	if timeout > 0 {
		cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(timeout.Milliseconds(), 10)
	}
	return pgx.ConnectConfig(ctx, cc)
}

// Close closes the connections.
func (p *Postgres) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range p.lanes {
		if c != nil {
			c.Close(ctx)
		}
	}
	if p.read != nil && p.read != p.primary {
		p.read.Close(ctx)
	}
	p.primary.Close(ctx)
}

// CPU is the CPU time the server spent on the reads since Open (0 when
// the server's processes cannot be seen from here).
func (p *Postgres) CPU() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	for _, b := range p.procs {
		d += ProcessCPU(b.pid) - b.cpu0
	}
	return d
}

// ProcessCPU reads a process's user and system time from /proc (0 when it
// cannot: another host, another platform).
func ProcessCPU(pid int) time.Duration { return statCPU("/proc/" + strconv.Itoa(pid) + "/stat") }

// ThreadCPU reads one thread's user and system time from /proc (0 when it
// cannot): a server that runs each connection on a thread of its own.
func ThreadCPU(tid int) time.Duration {
	return statCPU("/proc/" + strconv.Itoa(tid) + "/task/" + strconv.Itoa(tid) + "/stat")
}

// statCPU reads utime and stime from a /proc stat file.
func statCPU(path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// pgColumn is a column as the catalog describes it.
type pgColumn struct {
	name, format, base, elem, collation string
	typtype, elemType                   byte
	key                                 int64 // position in the key, 0 when not a key column
}

// Describe looks the table up and matches its columns with the mirror's
// (mask names columns the mirror holds masked: not compared).
func (p *Postgres) Describe(ctx context.Context, name string, mirror []MirrorColumn, mask map[string]string) (*Table, error) {
	ns, tbl, err := pgident.Split(name)
	if err != nil {
		return nil, err
	}
	quoted := pgident.Canonical(ns, tbl)
	rows, err := p.read.Query(ctx, `
		WITH k AS (
			SELECT i.indkey FROM pg_index i WHERE i.indrelid = $1::regclass
			ORDER BY i.indisprimary DESC, i.indisreplident DESC LIMIT 1)
		SELECT a.attname, format_type(a.atttypid, a.atttypmod),
			bt.typname, bt.typtype, coalesce(et.typname, ''), coalesce(et.typtype, ' '),
			coalesce(co.collname, ''),
			coalesce((SELECT u.i FROM k, unnest(k.indkey) WITH ORDINALITY u(n, i) WHERE u.n = a.attnum), 0)
		FROM pg_attribute a
		JOIN pg_type t ON t.oid = a.atttypid
		JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
		LEFT JOIN pg_type et ON et.oid = bt.typelem AND bt.typcategory = 'A'
		LEFT JOIN pg_collation co ON co.oid = a.attcollation
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, quoted)
	if err != nil {
		return nil, fmt.Errorf("reconcile: describe %s: %w", name, err)
	}
	var cols []pgColumn
	for rows.Next() {
		var c pgColumn
		var tt, et string
		if err := rows.Scan(&c.name, &c.format, &c.base, &tt, &c.elem, &et, &c.collation, &c.key); err != nil {
			rows.Close()
			return nil, err
		}
		c.typtype, c.elemType = tt[0], et[0]
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reconcile: describe %s: %w", name, err)
	}
	defCollate := ""
	if err := p.read.QueryRow(ctx, "SELECT datcollate FROM pg_database WHERE datname = current_database()").Scan(&defCollate); err != nil {
		return nil, err
	}
	t, err := pgTable(name, quoted, cols, mirror, mask, defCollate)
	if err != nil {
		return nil, err
	}
	// A plain table's own rows, as cdcd captures them: pgoutput sends the
	// changes of tables inheriting from it under their own names.
	var partitioned bool
	if err := p.read.QueryRow(ctx, "SELECT relkind = 'p' FROM pg_class WHERE oid = $1::regclass", quoted).Scan(&partitioned); err != nil {
		return nil, fmt.Errorf("reconcile: describe %s: %w", name, err)
	}
	if !partitioned {
		t.From = "ONLY " + quoted
	}
	return t, nil
}

// pgTable builds the Table from the catalog's columns.
func pgTable(name, quoted string, cols []pgColumn, mirror []MirrorColumn, mask map[string]string, defCollate string) (*Table, error) {
	t := &Table{Name: name, SQL: quoted, Ordered: true, ColumnHash: true}
	keys := map[int]int{}
	for _, c := range cols {
		if why, ok := mask[c.name]; ok && c.key == 0 {
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: why})
			continue
		}
		mi := mirrorIndex(mirror, c.name)
		if mi < 0 {
			if c.key > 0 {
				return nil, fmt.Errorf("reconcile: %s: the Iceberg table has no key column %q", name, c.name)
			}
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: "not in the Iceberg table"})
			continue
		}
		col, err := pgCanonColumn(c, mirror[mi].Type)
		if err != nil {
			if c.key > 0 {
				return nil, fmt.Errorf("reconcile: %s key column %q: %w", name, c.name, err)
			}
			t.Skipped = append(t.Skipped, Skipped{Column: c.name, Why: err.Error()})
			continue
		}
		col.Mirror = mi
		if c.key > 0 {
			col.Lit, col.Type = pgQuote(c.name)+"::text", c.format
			col.Collated = col.Canon == cText && !byteCollation(c.collation, defCollate)
			if col.Collated || !orderedCanon(col.Canon) {
				t.Ordered = false
			}
			keys[int(c.key)] = len(t.Columns)
		}
		t.Columns = append(t.Columns, col)
	}
	if err := t.setKey(name, keys, "has no primary key (nor replica identity index)"); err != nil {
		return nil, err
	}
	return t, nil
}

// byteCollation says whether a collation orders text by its bytes.
func byteCollation(coll, defCollate string) bool {
	if coll == "default" {
		coll = defCollate
	}
	return coll == "C" || coll == "POSIX" || coll == "ucs_basic"
}

func pgQuote(s string) string { return pgx.Identifier{s}.Sanitize() }

// pgCanonColumn picks the SQL of a column's canonical text from its type
// and the Iceberg type its values are read back as.
func pgCanonColumn(c pgColumn, it iceberg.Type) (*Column, error) {
	col := &Column{Name: c.name}
	sql, err := pgCanon(col, pgQuote(c.name), c.base, c.typtype, c.elem, c.elemType, it)
	if err != nil {
		return nil, err
	}
	col.SQL, col.Expr = sql, pgQuote(c.name)
	col.Hash = pgHashKind(col, c.base)
	col.canonAt = func(expr string) string {
		s, _ := pgCanon(&Column{Name: c.name}, expr, c.base, c.typtype, c.elem, c.elemType, it) // as above: no error
		return s
	}
	return col, nil
}

// setKey sets t.Key from keys (the key's position, 1-based, to the
// column's index in t.Columns); noKey says what a table without one lacks.
func (t *Table) setKey(name string, keys map[int]int, noKey string) error {
	if len(keys) == 0 {
		return fmt.Errorf("reconcile: %s %s: nothing to match rows by", name, noKey)
	}
	for i := 1; i <= len(keys); i++ {
		ci, ok := keys[i]
		if !ok {
			return fmt.Errorf("reconcile: %s: key column %d is not a column", name, i)
		}
		t.Key = append(t.Key, ci)
	}
	return nil
}
