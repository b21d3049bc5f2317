package config_test

import (
	"fmt"

	"github.com/cdcd-dev/cdcd/config"
)

// Every problem of a file is reported, one per line, as
// file:line:column: key.path: message.
func ExampleErrors() {
	src := `pipeline: shop
source:
  postgres:
    dsn: postgres://cdc:${PGPASSWORD}@db/shop
    tables: [orders]
log:
  partitions: 010
sink:
  iceberg:
    mode: append
    comit_interval: 10
`
	noEnv := func(string) (string, bool) { return "", false }
	_, err := config.Parse([]byte(src), "cdcd.yaml", config.WithLookupEnv(noEnv))
	fmt.Println(err)
	// Output:
	// cdcd.yaml:4:5: source.postgres.dsn: environment variable PGPASSWORD is not set (referenced as ${PGPASSWORD})
	// cdcd.yaml:7:3: log.partitions: 010 is ambiguous: YAML 1.1 reads a leading zero as octal (8), YAML 1.2 as decimal 10; write 10 (or 8 if you meant octal)
	// cdcd.yaml:11:5: sink.iceberg.comit_interval: unknown key comit_interval; did you mean commit_interval?
}

// String prints the effective config with defaults filled in and
// passwords redacted.
func ExampleConfig_String() {
	src := `pipeline: shop
source:
  postgres:
    dsn: host=db user=cdc password=${PGPASSWORD} dbname=shop
    tables: [orders, sales.invoices]
data_dir: /var/lib/cdcd
sink: {iceberg: {mode: append}}
`
	env := func(string) (string, bool) { return "s3cret", true }
	c, err := config.Parse([]byte(src), "cdcd.yaml", config.WithLookupEnv(env))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(c)
	ns, table := c.Sink.Iceberg.TableIdent("sales.invoices")
	fmt.Println("# sales.invoices ->", ns+"."+table)
	// Output:
	// pipeline: shop
	// data_dir: /var/lib/cdcd
	// role: all
	// source:
	//   postgres:
	//     dsn: "host=db user=cdc password=*** dbname=shop"
	//     slot: cdcd_shop
	//     publication: cdcd_shop
	//     tables:
	//       - public.orders
	//       - sales.invoices
	//     snapshot: initial
	//     heartbeat_interval: 10s
	//     incremental:
	//       chunk_rows: 8192
	//       max_rows_per_second: 0
	// log:
	//   backend: embedded
	//   partitions: 8
	//   retention: 168h
	//   tombstones: true
	//   compression: s2
	// sink:
	//   iceberg:
	//     catalog:
	//       type: sql
	//       uri: sqlite:///var/lib/cdcd/catalog.db
	//       name: cdcd
	//     warehouse: file:///var/lib/cdcd/warehouse
	//     namespace: cdc
	//     format_version: 3
	//     mode: append
	//     commit_interval: 10s
	//     retry_interval: 30s
	//     compaction:
	//       enabled: true
	//       interval: 1m
	//       target_file_size_mb: 128
	//       small_file_percent: 75
	//       min_files: 5
	//       delete_percent: 30
	//       max_input_mb: 192
	//       max_input_rows: 2000000
	//       merge_memory_mb: 64
	//       orphan_age: 24h
	//       retain_snapshots: 100
	//       snapshot_max_age: 1h
	// admin:
	//   listen: 127.0.0.1:8089
	// shutdown:
	//   deadline: 30s
	// alerts:
	//   interval: 15s
	//   realert_interval: 10m
	//   slot_lag_bytes:
	//     warning: 1GiB
	//     critical: 10GiB
	//   slot_lag_time:
	//     warning: 5m
	//     critical: 30m
	//   safe_wal_percent:
	//     warning: 50
	//     critical: 20
	//   consumer_lag:
	//     warning: 5m
	//     critical: 30m
	//   table_paused:
	//     warning: 1m
	//     critical: 30m
	//   commit_stall:
	//     warning: 5m
	//     critical: 15m
	// reconcile:
	//   chunk_rows: 8192
	//   block_rows: 256
	//   max_rows_per_second: 0
	//   parallel: 2
	//   statement_timeout: 1m
	//   interval: 0s
	//   repair: false
	// # sales.invoices -> cdc.sales_invoices
}
