package mysql

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	sqldriver "github.com/go-sql-driver/mysql"

	"github.com/cdcd-dev/cdcd/schema"
)

// connInfo is a parsed DSN.
type connInfo struct {
	host     string
	port     uint16
	user     string
	password string
	db       string
	// tls is the connections' TLS configuration (nil: plaintext), from
	// the dsn's ssl-mode (tls.go); sslMode names it in logs.
	tls     *tls.Config
	sslMode sslMode
}

// parseDSN reads the URL form mysql://user:password@host:port/db (the
// config's form) or a go-sql-driver DSN (user:password@tcp(host:port)/db).
func parseDSN(dsn string) (connInfo, error) {
	var ci connInfo
	var addr string
	var tp tlsParams
	if strings.HasPrefix(dsn, "mysql://") || strings.HasPrefix(dsn, "mariadb://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return ci, fmt.Errorf("mysql: dsn is not a valid URL (mysql://user:password@host:3306/db): %v", redactURLError(err))
		}
		ci.user = u.User.Username()
		ci.password, _ = u.User.Password()
		addr, ci.db = u.Host, strings.TrimPrefix(u.Path, "/")
		if tp, err = dsnParams(u.Query()); err != nil {
			return ci, err
		}
	} else {
		cfg, err := sqldriver.ParseDSN(dsn)
		if err != nil {
			return ci, fmt.Errorf("mysql: dsn: want mysql://user:password@host:3306/db: %v", err)
		}
		if cfg.Net != "tcp" && cfg.Net != "" {
			return ci, fmt.Errorf("mysql: dsn: the binlog reader connects over TCP, not %s", cfg.Net)
		}
		ci.user, ci.password, ci.db, addr = cfg.User, cfg.Passwd, cfg.DBName, cfg.Addr
		// go-sql-driver's tls parameter, in the terms of ssl-mode.
		switch strings.ToLower(cfg.TLSConfig) {
		case "", "false":
			tp.mode = sslDisabled
		case "true":
			tp.mode = sslVerifyIdentity
		case "skip-verify":
			tp.mode = sslRequired
		default:
			return ci, fmt.Errorf("mysql: dsn: tls=%s is not supported: use tls=true or tls=skip-verify, or the URL form's ssl-mode", cfg.TLSConfig)
		}
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		host, port = addr, "3306"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || host == "" {
		return ci, fmt.Errorf("mysql: dsn: bad host:port %q", addr)
	}
	ci.host, ci.port = host, uint16(p)
	if ci.tls, err = tp.config(host); err != nil {
		return ci, err
	}
	ci.sslMode = tp.mode
	return ci, nil
}

// redactURLError drops the URL (and so a password) from a url.Parse error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// open returns a pool for queries: UTC session time zone (TIMESTAMP text
// in UTC), utf8mb4 results.
func (ci connInfo) open() (*sql.DB, error) {
	cfg := sqldriver.NewConfig()
	cfg.User, cfg.Passwd = ci.user, ci.password
	cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(ci.host, strconv.Itoa(int(ci.port)))
	cfg.DBName = ci.db
	cfg.Timeout = dialTimeout
	// Arguments are written into the query's text (escaped by the driver)
	// rather than sent to a prepared statement: one round trip instead of
	// three, and a chunk's rows come in the text protocol, which fromText
	// reads as is (the binary protocol's integers and dates were turned
	// into text by the driver first).
	cfg.InterpolateParams = true
	cfg.Params = map[string]string{"time_zone": "'+00:00'", "sql_mode": "'NO_ENGINE_SUBSTITUTION'"}
	cfg.Collation = "utf8mb4_general_ci"
	cfg.TLS = ci.tls
	conn, err := sqldriver.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(4)
	return db, nil
}

// detectFlavor reads the server's flavor from its version.
func detectFlavor(ctx context.Context, db *sql.DB) (flavor, version string, err error) {
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", "", &connError{fmt.Errorf("mysql: read server version: %w", err)}
	}
	if strings.Contains(strings.ToLower(version), "mariadb") {
		return FlavorMariaDB, version, nil
	}
	return FlavorMySQL, version, nil
}

func globalVar(ctx context.Context, db *sql.DB, name string) (string, error) {
	var v sql.NullString
	err := db.QueryRowContext(ctx, "SELECT @@GLOBAL."+name).Scan(&v)
	if err != nil {
		return "", fmt.Errorf("mysql: read @@GLOBAL.%s: %w", name, err)
	}
	return v.String, nil
}

// checkServer checks the server-wide preconditions; each failure names
// what to run. serverID is the id the reader registers with.
func checkServer(ctx context.Context, db *sql.DB, flavor string, serverID uint32, tables []string) error {
	var errs []error
	want := func(name, wantV, fix string) {
		v, err := globalVar(ctx, db, name)
		if err != nil {
			errs = append(errs, err)
			return
		}
		if !strings.EqualFold(v, wantV) {
			errs = append(errs, &PreconditionError{What: fmt.Sprintf("%s is %s, cdcd needs %s", name, v, wantV), Fix: fix})
		}
	}
	persist := " (and in the server's config file, so a restart keeps it)"
	if v, err := globalVar(ctx, db, "log_bin"); err == nil && v != "1" && !strings.EqualFold(v, "ON") {
		return &PreconditionError{What: "the binary log is off (log_bin)", Fix: "start the server with log_bin (log-bin=<name> in its config file) and restart it"}
	}
	want("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW'"+persist)
	want("binlog_row_image", "FULL", "SET GLOBAL binlog_row_image = 'FULL'"+persist)
	want("binlog_row_metadata", "FULL", "SET GLOBAL binlog_row_metadata = 'FULL'"+persist+"; it needs MySQL 8.0.1 or MariaDB 10.5")
	if flavor == FlavorMySQL {
		want("gtid_mode", "ON", "SET GLOBAL enforce_gtid_consistency = ON; then SET GLOBAL gtid_mode = OFF_PERMISSIVE, "+
			"ON_PERMISSIVE and ON, one step at a time"+persist)
	}
	var own uint32
	if err := db.QueryRowContext(ctx, "SELECT @@GLOBAL.server_id").Scan(&own); err == nil && own == serverID {
		errs = append(errs, &PreconditionError{What: fmt.Sprintf("server_id %d is the server's own id", serverID),
			Fix: "set source.mysql.server_id to an id no server or replica in the topology uses"})
	}
	if err := checkReplicas(ctx, db, flavor, serverID); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkBinlogFilters(ctx, db, tables)...)
	if err := checkReplicaBinlog(ctx, db); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkGrants(ctx, db)...)
	return errors.Join(errs...)
}

// checkBinlogFilters refuses binlog filters that leave a captured
// database's changes out of the binary log (--binlog-do-db without it,
// --binlog-ignore-db with it): they would never arrive, and nothing would
// say so. With row-based logging the filters go by the changed table's
// database. A server that does not show them (privileges, a statement it
// lacks) is not refused here.
func checkBinlogFilters(ctx context.Context, db *sql.DB, tables []string) []error {
	var doDB, ignoreDB string
	found := false
	for _, q := range []string{"SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]sql.NullString, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if rows.Scan(ptrs...) != nil {
				break
			}
			for i, c := range cols {
				switch c {
				case "Binlog_Do_DB":
					doDB, found = vals[i].String, true
				case "Binlog_Ignore_DB":
					ignoreDB, found = vals[i].String, true
				}
			}
		}
		rows.Close()
		if found {
			break
		}
	}
	list := func(v string) []string {
		var out []string
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		return out
	}
	do, ignore := list(doDB), list(ignoreDB)
	var errs []error
	seen := map[string]bool{}
	for _, t := range tables {
		name, _, err := splitTable(t)
		if err != nil || seen[name] {
			continue
		}
		seen[name] = true
		switch {
		case len(do) > 0 && !slices.Contains(do, name):
			errs = append(errs, &PreconditionError{What: fmt.Sprintf("the server writes only databases %s to its binary log (binlog_do_db), not %s: its changes would never arrive", doDB, name),
				Fix: "add binlog-do-db=" + name + " to the server's config file (or remove every binlog-do-db) and restart it"})
		case slices.Contains(ignore, name):
			errs = append(errs, &PreconditionError{What: fmt.Sprintf("the server leaves database %s out of its binary log (binlog_ignore_db): its changes would never arrive", name),
				Fix: "remove binlog-ignore-db=" + name + " from the server's config file and restart it"})
		}
	}
	return errs
}

// checkReplicaBinlog refuses a replica that does not write the changes it
// replicates to its own binary log (log_slave_updates, log_replica_updates
// off): cdcd reading it would see only the changes made on it directly —
// none, on a read-only replica — and nothing would say so.
func checkReplicaBinlog(ctx context.Context, db *sql.DB) error {
	// A replica: it lists a primary (which needs SLAVE MONITOR on
	// MariaDB), or it runs a replication thread (MariaDB's Slaves_running,
	// a status anyone reads). A primary that once was a replica keeps its
	// gtid_slave_pos, so that says nothing.
	replica := false
	for _, q := range []string{"SHOW REPLICA STATUS", "SHOW SLAVE STATUS"} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			continue
		}
		replica = rows.Next()
		rows.Close()
		break
	}
	var status string
	var running int
	if err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Slaves_running'").Scan(&status, &running); err == nil && running > 0 {
		replica = true
	}
	if !replica {
		return nil
	}
	for _, name := range []string{"log_replica_updates", "log_slave_updates"} {
		v, err := globalVar(ctx, db, name)
		if err != nil {
			continue
		}
		if v == "1" || strings.EqualFold(v, "ON") {
			return nil
		}
		return &PreconditionError{What: fmt.Sprintf("the server is a replica that does not write the changes it replicates to its binary log (%s is OFF): "+
			"cdcd would see only the changes made on it directly", name),
			Fix: "set " + strings.ReplaceAll(name, "_", "-") + "=ON in the replica's config file and restart it, or point source.mysql.dsn at the primary"}
	}
	return nil
}

// checkReplicas refuses a server_id that a replica on another host has
// registered. A registration from this host is taken for this pipeline's
// previous connection, which the server drops when the reader connects.
func checkReplicas(ctx context.Context, db *sql.DB, flavor string, serverID uint32) error {
	q := "SHOW SLAVE HOSTS"
	if flavor == FlavorMySQL {
		q = "SHOW REPLICAS"
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil // older servers and missing privileges: the dump itself will tell
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	me, _ := os.Hostname()
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil
		}
		var id, host string
		for i, c := range cols {
			switch strings.ToLower(c) {
			case "server_id":
				id = string(vals[i])
			case "host":
				host = string(vals[i])
			}
		}
		if id == strconv.FormatUint(uint64(serverID), 10) && host != "" && host != me {
			return &PreconditionError{What: fmt.Sprintf("server_id %d is used by a replica on host %s", serverID, host),
				Fix: "set source.mysql.server_id to an id no other replica uses (two replicas with one id disconnect each other)"}
		}
	}
	return nil
}

// checkGrants checks the replication privileges by what SHOW GRANTS lists.
func checkGrants(ctx context.Context, db *sql.DB) []error {
	rows, err := db.QueryContext(ctx, "SHOW GRANTS FOR CURRENT_USER()")
	if err != nil {
		return []error{fmt.Errorf("mysql: SHOW GRANTS: %w", err)}
	}
	defer rows.Close()
	var all strings.Builder
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return []error{fmt.Errorf("mysql: SHOW GRANTS: %w", err)}
		}
		all.WriteString(strings.ToUpper(g))
		all.WriteByte('\n')
	}
	g := all.String()
	if strings.Contains(g, "ALL PRIVILEGES ON *.*") {
		return nil
	}
	var errs []error
	if !strings.Contains(g, "REPLICATION SLAVE") && !strings.Contains(g, "REPLICATION REPLICA") {
		errs = append(errs, &PreconditionError{What: "the user lacks REPLICATION SLAVE", Fix: "GRANT REPLICATION SLAVE ON *.* TO <the dsn's user>"})
	}
	if !strings.Contains(g, "REPLICATION CLIENT") && !strings.Contains(g, "BINLOG MONITOR") {
		errs = append(errs, &PreconditionError{What: "the user lacks REPLICATION CLIENT (MariaDB: BINLOG MONITOR)",
			Fix: "GRANT REPLICATION CLIENT ON *.* TO <the dsn's user> (MariaDB 10.5+: GRANT BINLOG MONITOR ON *.* TO ...)"})
	}
	return errs
}

// readCollations maps collation ids to character sets.
func readCollations(ctx context.Context, db *sql.DB) (collations, error) {
	colls := collations{}
	for _, q := range []string{
		"SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS WHERE ID IS NOT NULL",
		// MariaDB 10.10+: collations that apply to several character sets.
		"SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATION_CHARACTER_SET_APPLICABILITY WHERE ID IS NOT NULL",
	} {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			if len(colls) > 0 {
				continue // the second table is MariaDB's only
			}
			return nil, fmt.Errorf("mysql: read collations: %w", err)
		}
		for rows.Next() {
			var id uint64
			var cs string
			if err := rows.Scan(&id, &cs); err != nil {
				rows.Close()
				return nil, fmt.Errorf("mysql: read collations: %w", err)
			}
			colls[id] = cs
		}
		rows.Close()
	}
	return colls, nil
}

// tableDesc is a captured table as the information schema shows it now.
type tableDesc struct {
	db, name string
	cols     []colType
	table    *schema.Table
	// ahead are the columns the information schema showed before the
	// stream reached the statement that adds them (aheadColumns).
	ahead []string
}

func (d *tableDesc) qualified() string { return d.db + "." + d.name }

// splitTable splits "db.table".
func splitTable(name string) (db, table string, err error) {
	db, table, ok := strings.Cut(name, ".")
	if !ok || db == "" || table == "" {
		return "", "", fmt.Errorf("mysql: table %q: name it database.table", name)
	}
	return db, table, nil
}

// describeTable reads a table's columns and primary key and maps them; a
// table without a key or with an unsupported type is refused.
func describeTable(ctx context.Context, db *sql.DB, flavor, dbName, name string) (*tableDesc, error) {
	qn := dbName + "." + name
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IFNULL(CHARACTER_SET_NAME, ''), EXTRA,
		IS_NULLABLE = 'YES', IFNULL(NUMERIC_PRECISION, 0), IFNULL(NUMERIC_SCALE, 0), IFNULL(DATETIME_PRECISION, 0),
		IFNULL(CHARACTER_OCTET_LENGTH, 0), COLUMN_DEFAULT
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, dbName, name)
	if err != nil {
		return nil, fmt.Errorf("mysql: describe %s: %w", qn, err)
	}
	var infos []infoColumn
	for rows.Next() {
		c := infoColumn{QuotedDefault: flavor == FlavorMariaDB}
		if err := rows.Scan(&c.Name, &c.DataType, &c.ColumnType, &c.Charset, &c.Extra, &c.Nullable, &c.Precision, &c.Scale,
			&c.FSP, &c.OctetLength, &c.Default); err != nil {
			rows.Close()
			return nil, fmt.Errorf("mysql: describe %s: %w", qn, err)
		}
		infos = append(infos, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: describe %s: %w", qn, err)
	}
	if len(infos) == 0 {
		return nil, &TableError{Table: qn, Err: fmt.Errorf("no such table (or no privilege to see it): create it, "+
			"GRANT SELECT ON %s TO the dsn's user, or remove it from source.mysql.tables", qn)}
	}
	if flavor == FlavorMariaDB {
		if err := markJSONChecks(ctx, db, dbName, name, infos); err != nil {
			return nil, err
		}
	}
	key, err := primaryKey(ctx, db, dbName, name)
	if err != nil {
		return nil, err
	}
	return buildDesc(dbName, name, infos, key)
}

// buildDesc maps information-schema columns and key names into a table.
func buildDesc(dbName, name string, infos []infoColumn, key []string) (*tableDesc, error) {
	qn := dbName + "." + name
	d := &tableDesc{db: dbName, name: name, table: &schema.Table{Namespace: dbName, Name: name}}
	for _, c := range infos {
		t, err := fromInfo(c)
		if err == nil {
			var col schema.Column
			if col, err = t.column(); err == nil {
				d.cols = append(d.cols, t)
				d.table.Columns = append(d.table.Columns, col)
				continue
			}
		}
		return nil, &TableError{Table: qn, Column: c.Name, Type: c.ColumnType,
			Err: fmt.Errorf("%w; change the column's type or exclude the table", err)}
	}
	if len(key) == 0 {
		return nil, &TableError{Table: qn, Err: errors.New("no primary key: every captured table needs one " +
			"(ALTER TABLE … ADD PRIMARY KEY (…)), or remove the table from source.mysql.tables")}
	}
	for _, k := range key {
		i := d.table.ColumnIndex(k)
		if i < 0 {
			return nil, &TableError{Table: qn, Err: fmt.Errorf("primary-key column %q not among the columns", k)}
		}
		d.table.Key = append(d.table.Key, i)
		d.table.Columns[i].Nullable = false // a zero date in a key column is refused when read
	}
	return d, nil
}

func primaryKey(ctx context.Context, db *sql.DB, dbName, name string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION`, dbName, name)
	if err != nil {
		return nil, fmt.Errorf("mysql: primary key of %s.%s: %w", dbName, name, err)
	}
	defer rows.Close()
	var key []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("mysql: primary key of %s.%s: %w", dbName, name, err)
		}
		key = append(key, c)
	}
	return key, rows.Err()
}

// markJSONChecks flags MariaDB JSON columns: a longtext with the check
// json_valid(`col`) that MariaDB adds for the JSON alias.
func markJSONChecks(ctx context.Context, db *sql.DB, dbName, name string, infos []infoColumn) error {
	rows, err := db.QueryContext(ctx, `SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS
		WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?`, dbName, name)
	if err != nil {
		return fmt.Errorf("mysql: check constraints of %s.%s: %w", dbName, name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var clause string
		if err := rows.Scan(&clause); err != nil {
			return fmt.Errorf("mysql: check constraints of %s.%s: %w", dbName, name, err)
		}
		for i := range infos {
			if clause == "json_valid(`"+strings.ReplaceAll(infos[i].Name, "`", "``")+"`)" {
				infos[i].JSONCheck = true
			}
		}
	}
	return rows.Err()
}

// checkSelect checks the user may read the table (the load needs it).
func checkSelect(ctx context.Context, db *sql.DB, d *tableDesc) error {
	_, err := db.ExecContext(ctx, "SELECT 1 FROM "+quoteIdent(d.db)+"."+quoteIdent(d.name)+" LIMIT 0")
	if code := serverCode(err); code == 1142 || code == 1143 {
		return &PreconditionError{What: fmt.Sprintf("the user may not SELECT from %s", d.qualified()),
			Fix: fmt.Sprintf("GRANT SELECT ON %s.%s TO <the dsn's user>", quoteIdent(d.db), quoteIdent(d.name))}
	} else if err != nil {
		return fmt.Errorf("mysql: read %s: %w", d.qualified(), err)
	}
	return nil
}

// quoteIdent quotes an identifier with backticks.
func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// serverPosition reads the server's current GTID position: MariaDB's
// @@gtid_binlog_pos, MySQL's @@gtid_executed.
func serverPosition(ctx context.Context, db *sql.DB, flavor string) (string, error) {
	name := "gtid_executed"
	if flavor == FlavorMariaDB {
		name = "gtid_binlog_pos"
	}
	v, err := globalVar(ctx, db, name)
	return strings.ReplaceAll(strings.ReplaceAll(v, "\n", ""), " ", ""), err
}

// checkPurged refuses a MySQL resume set that misses purged transactions
// (gtid_purged not contained in it). MariaDB says so when the dump starts
// (error 1236).
func checkPurged(ctx context.Context, db *sql.DB, st gtidState) error {
	if st.flavor != FlavorMySQL {
		return nil
	}
	v, err := globalVar(ctx, db, "gtid_purged")
	if err != nil {
		return err
	}
	purged, err := parseGTIDSet(FlavorMySQL, strings.ReplaceAll(strings.ReplaceAll(v, "\n", ""), " ", ""))
	if err != nil {
		return err
	}
	if !st.set.Contain(purged) {
		return &PurgedError{Resume: st.String(), Detail: "gtid_purged " + purged.String() + " is not contained in it"}
	}
	return nil
}
