// Package crashsuite is cdcd's randomized crash suite (issue 9): a seeded
// workload on real PostgreSQL runs while the cdcd binary is killed with
// SIGKILL at random moments and at armed failpoints (internal/failpoint)
// and restarted; once it has caught up, every Iceberg table must equal its
// source table (read with iceberg-go's scan), the tables' metadata must
// hold cdcd's invariants, every upsert table's key index must point each
// live row's key at that row (sink/iceberg.VerifyIndex), and a check sampled every 100 ms over the whole
// run must never have seen the slot confirm what the log did not hold.
//
// It is all in the package's tests:
//
//	go test ./internal/crashsuite/                     # the CI configuration
//	CDCD_CRASH_KILLS=500 go test -timeout 0 -v ./internal/crashsuite/   # a soak (make soak)
//
// Environment: CDCD_CRASH_SEED replays a seed (printed by every run);
// CDCD_CRASH_KILLS is the number of kills per configuration (CI: 20 for
// upsert-v3, 6 for upsert-v2, changelog and snapshots); CDCD_CRASH_ROUND
// splits them into rounds (default 50; mariadb-snapshots at least 6, which
// its plan needs), each on a fresh database and data directory and checked
// on its own; CDCD_CRASH_CONFIGS picks
// configurations (upsert-v3, upsert-v2, changelog, snapshots: a table
// added to the running pipeline and another re-snapshotted on demand,
// killed mid-snapshot, snapshots_test.go; and TestCrashMariaDB's
// mariadb-upsert, mariadb-changelog, mariadb-snapshots); CDCD_CRASH_BIG_TX sizes the large
// transactions (default 6000 rows; with logical_decoding_work_mem at 64kB
// they are streamed before their commit either way); CDCD_CRASH_KEEP names a
// directory into which a reconcile's report of a difference during the
// kills copies the round's data directory (log, warehouse, catalog) as it
// is then, for a post-mortem, and so does a failed round its directory
// (with the daemon's whole log) at its end.
package crashsuite
