package mariadbtest_test

import (
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
)

func TestMain(m *testing.M) { mariadbtest.Main(m) }

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSettings(t *testing.T) {
	t.Parallel()
	db := open(t, mariadbtest.NewDB(t))
	for name, want := range map[string]string{
		"log_bin":             "ON",
		"binlog_format":       "ROW",
		"binlog_row_image":    "FULL",
		"binlog_row_metadata": "FULL",
		"gtid_strict_mode":    "ON",
		"server_id":           "1",
		"bind_address":        "127.0.0.1",
	} {
		var v string
		if err := db.QueryRowContext(t.Context(),
			"SELECT variable_value FROM information_schema.global_variables WHERE variable_name = ?",
			strings.ToUpper(name)).Scan(&v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	var version string
	if err := db.QueryRowContext(t.Context(), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Errorf("VERSION() = %q, want a MariaDB", version)
	}
	t.Logf("version %s", version)
}

// binlogStatus runs SHOW BINLOG STATUS and returns the file and position.
func binlogStatus(t *testing.T, db *sql.DB, stmt string) (string, uint64) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), stmt)
	if err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	if !rows.Next() {
		t.Fatalf("%s returned no row (%v)", stmt, rows.Err())
	}
	vals := make([]any, len(cols))
	file, pos := new(string), new(uint64)
	vals[0], vals[1] = file, pos
	for i := 2; i < len(vals); i++ {
		vals[i] = new(sql.RawBytes)
	}
	if err := rows.Scan(vals...); err != nil {
		t.Fatal(err)
	}
	return *file, *pos
}

func TestReplUser(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Server(t)
	db := open(t, srv.ReplDSN(""))
	for _, stmt := range []string{"SHOW BINLOG STATUS", "SHOW MASTER STATUS"} {
		if file, pos := binlogStatus(t, db, stmt); !strings.HasPrefix(file, "mariadb-bin.") || pos == 0 {
			t.Errorf("%s as %s: file %q pos %d", stmt, mariadbserver.ReplUser, file, pos)
		}
	}
	var grants []string
	rows, err := db.QueryContext(t.Context(), "SHOW GRANTS")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	rows.Close()
	all := strings.Join(grants, "\n")
	for _, priv := range []string{"REPLICATION SLAVE", "BINLOG MONITOR"} {
		if !strings.Contains(all, priv) {
			t.Errorf("replication user lacks %s: %s", priv, all)
		}
	}
}

// TestRowInBinlog: an inserted row shows up in the binlog as an annotated
// row event.
func TestRowInBinlog(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Server(t)
	db := open(t, mariadbtest.NewDB(t))
	repl := open(t, srv.ReplDSN(""))
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))"); err != nil {
		t.Fatal(err)
	}
	file, pos := binlogStatus(t, repl, "SHOW BINLOG STATUS")
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES (1, 'one')"); err != nil {
		t.Fatal(err)
	}
	rows, err := repl.QueryContext(ctx, fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d", file, pos))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var seen []string
	write, annotate := false, false
	for rows.Next() {
		var (
			log, typ, info string
			p, serverID    uint64
			end            uint64
		)
		if err := rows.Scan(&log, &p, &typ, &serverID, &end, &info); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, typ+": "+info)
		write = write || strings.HasPrefix(typ, "Write_rows")
		annotate = annotate || typ == "Annotate_rows" && strings.Contains(info, "INSERT INTO t")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !write || !annotate {
		t.Errorf("binlog after the insert has no Write_rows and Annotate_rows events:\n%s", strings.Join(seen, "\n"))
	}
}

// TestNewDB: parallel tests get different databases, each dropped after
// its test although a connection in an open transaction holds a metadata
// lock on one of its tables.
func TestNewDB(t *testing.T) {
	t.Parallel()
	srv := mariadbtest.Server(t)
	var (
		mu    sync.Mutex
		dbs   []string
		pools []*sql.DB // closed only after the drops
	)
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	t.Run("group", func(t *testing.T) {
		for i := range 2 {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				db, err := mariadbserver.OpenDSN(mariadbtest.NewDB(t))
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				pools = append(pools, db)
				mu.Unlock()
				if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
					t.Fatal(err)
				}
				tx, err := db.Begin() // left open on purpose
				if err != nil {
					t.Fatal(err)
				}
				var name string
				if err := tx.QueryRow("SELECT DATABASE() FROM t UNION ALL SELECT DATABASE()").Scan(&name); err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				dbs = append(dbs, name)
				mu.Unlock()
			})
		}
	})
	if len(dbs) != 2 || dbs[0] == dbs[1] {
		t.Fatalf("parallel tests got databases %q, want two different ones", dbs)
	}
	db := open(t, srv.DSN(""))
	var n int
	if err := db.QueryRowContext(t.Context(),
		"SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name IN (?, ?)", dbs[0], dbs[1]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d of the databases %q survived their tests", n, dbs)
	}
}

func TestServerIDs(t *testing.T) {
	t.Parallel()
	a, b := mariadbtest.ServerID(t), mariadbtest.ServerID(t)
	if a == b || a <= 1 || b <= 1 {
		t.Errorf("server ids %d, %d: want distinct and not the server's own", a, b)
	}
}
