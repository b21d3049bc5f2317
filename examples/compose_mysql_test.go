package examples

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cdcd-dev/cdcd/config"
)

// TestComposeMySQLProfile: the mysql profile adds MariaDB with the binlog
// settings cdcd checks at start, its shop schema (with the grants and the
// signal table the config names), and a cdcd on it whose mounted config
// validates and names that server, user and database; without the profile
// neither runs.
func TestComposeMySQLProfile(t *testing.T) {
	load := func(profiles ...string) *types.Project {
		p, _ := loadCompose(t, profiles...)
		return p
	}
	if p := load(); p.Services["mariadb"].Name != "" || p.Services["cdcd-mysql"].Name != "" {
		t.Fatal("the mysql profile's services run without the profile")
	}
	p := load("mysql")
	mdb, ok := p.Services["mariadb"]
	if !ok || mdb.HealthCheck == nil {
		t.Fatalf("mariadb: %+v", mdb)
	}
	for _, arg := range []string{"--log-bin=mariadb-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL"} {
		if !slices.Contains(mdb.Command, arg) {
			t.Errorf("mariadb runs %q: it needs %s", mdb.Command, arg)
		}
	}
	var schema string
	for _, v := range mdb.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/") {
			schema = v.Source
		}
	}
	b, err := os.ReadFile(schema)
	if err != nil {
		t.Fatalf("mariadb's schema %q: %v", schema, err)
	}
	sql := string(b)
	for _, want := range []string{"CREATE TABLE customers", "CREATE TABLE orders", "CREATE TABLE debezium_signal", "GRANT REPLICATION SLAVE, BINLOG MONITOR"} {
		if !strings.Contains(sql, want) {
			t.Errorf("%s lacks %q", schema, want)
		}
	}
	ck, ok := p.Services["cdcd-mysql"]
	if !ok {
		t.Fatal("cdcd-mysql is missing")
	}
	if d, ok := ck.DependsOn["mariadb"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Error("cdcd-mysql does not wait for mariadb to be healthy")
	}
	env := func(k string) (string, bool) {
		v, ok := ck.Environment[k]
		if !ok || v == nil {
			return "", false
		}
		return *v, true
	}
	var cfgPath string
	for _, v := range ck.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == "/etc/cdcd/cdcd.yaml" {
			cfgPath = v.Source
		}
		if v.Type == types.VolumeTypeVolume {
			if _, ok := p.Volumes[v.Source]; !ok {
				t.Errorf("cdcd-mysql mounts the undeclared volume %s", v.Source)
			}
		}
	}
	cfg, err := config.Load(cfgPath, config.WithLookupEnv(env))
	if err != nil {
		t.Fatalf("cdcd-mysql's config: %v", err)
	}
	my := cfg.Source.MySQL
	user, pw := "", ""
	if v := mdb.Environment["MARIADB_USER"]; v != nil {
		user = *v
	}
	if v := mdb.Environment["MARIADB_PASSWORD"]; v != nil {
		pw = *v
	}
	if my == nil || !strings.HasPrefix(my.DSN, "mysql://"+user+":"+pw+"@mariadb:3306/shop") || cfg.Pipeline == "shop" ||
		my.Incremental.SignalTable != "shop.debezium_signal" || !slices.Equal(my.Tables, []string{"shop.customers", "shop.orders"}) {
		t.Errorf("cdcd-mysql's source %+v (pipeline %s): want MariaDB's user and database, the signal table, a pipeline of its own", my, cfg.Pipeline)
	}
}
