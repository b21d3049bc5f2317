package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/source/mysql"
)

// TestMySQLKeyReadsFreshLow: a range read may take its Low from a
// checkpoint read a moment ago, a read of keys takes a fresh one. A key
// read is mostly a retry of keys that changed after the last Low; with
// that Low they were left out again, every retry within a second of it,
// and a repair's check, coming quickly after the repair, called all its
// keys unchecked (TestReconcileMyDamage failed so now and then). The
// cache lasts an hour here, so the old code fails every time.
func TestMySQLKeyReadsFreshLow(t *testing.T) {
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	root, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var db string
	if err := root.QueryRow("SELECT DATABASE()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE TABLE kv (id INT PRIMARY KEY, v VARCHAR(10))", "INSERT INTO kv VALUES (1, 'a'), (2, 'b')"} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var ordinal atomic.Uint64
	ordinal.Store(10)
	m, err := OpenMySQL(t.Context(), MySQLConfig{
		DSN: fmt.Sprintf("mysql://%s:%s@%s/%s", mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), db),
		Checkpoint: func(ctx context.Context) ([]byte, error) {
			return json.Marshal(myCheckpoint{Flavor: mysql.FlavorMariaDB, GTID: "0-1-1", Ordinal: ordinal.Load()})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.lowMax = time.Hour
	tb, err := m.Describe(t.Context(), db+".kv", []MirrorColumn{{"id", iceberg.PrimitiveTypes.Int32}, {"v", iceberg.PrimitiveTypes.String}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, first, err := m.Sums(t.Context(), 0, tb, nil, nil, 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	ordinal.Store(20) // the pipeline moves on
	_, again, err := m.Sums(t.Context(), 0, tb, nil, nil, 100, 10)
	if err != nil {
		t.Fatal(err)
	}
	rows, keys, err := m.Rows(t.Context(), tb, []Range{{Eq: Key{"1"}, EqC: Key{"1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("the key read found %d rows, want 1", len(rows))
	}
	if want := mysql.Position(11, 0); !slices.Equal(first.Low, want) || !slices.Equal(again.Low, want) {
		t.Errorf("range reads' Low %x, %x; want both %x (the checkpoint read first, cached)", first.Low, again.Low, want)
	}
	if want := mysql.Position(21, 0); !slices.Equal(keys.Low, want) {
		t.Errorf("a key read's Low is %x, want %x: one past the checkpoint as it is now", keys.Low, want)
	}
}

// TestMySQLCoveredAsksTheDaemon: with no binlog dump listed, the pipeline
// is taken for running only when MySQLConfig.Running says its daemon
// runs. A daemon just started has not connected its reader yet; taken
// for stopped, its table was called not comparable ("the pipeline is
// stopped") by a reconcile run right after the start.
func TestMySQLCoveredAsksTheDaemon(t *testing.T) {
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	dsn := mariadbtest.NewDBOn(t, srv)
	root, err := mariadbserver.OpenDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var db, gtid string
	if err := root.QueryRow("SELECT DATABASE(), @@GLOBAL.gtid_binlog_pos").Scan(&db, &gtid); err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	for _, daemon := range []bool{false, true} {
		m, err := OpenMySQL(t.Context(), MySQLConfig{
			DSN:        fmt.Sprintf("mysql://%s:%s@%s/%s", mariadbserver.ReplUser, mariadbserver.ReplPassword, srv.Addr(), db),
			Checkpoint: func(context.Context) ([]byte, error) { return nil, nil }, // the pipeline read nothing yet
			Running:    func(context.Context) bool { asked.Add(1); return daemon },
		})
		if err != nil {
			t.Fatal(err)
		}
		covered, running, err := m.Covered(t.Context(), m.myHigh(gtid))
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		if covered || running != daemon {
			t.Errorf("no binlog dump, the daemon running %v: covered %v, running %v; want not covered, running %v", daemon, covered, running, daemon)
		}
	}
	if asked.Load() != 2 {
		t.Errorf("Running was asked %d times, want 2 (once per Covered without a dump)", asked.Load())
	}
}
