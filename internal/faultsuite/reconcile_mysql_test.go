package faultsuite

import (
	"testing"
)

// The reconcile on a MariaDB source (issue 21): the same proofs as on
// PostgreSQL, with the source changed behind the pipeline's back through
// SET sql_log_bin = 0 (the change never reaches the binlog).

// myTypesDDL has a column of each type docs/types.md's MySQL table maps,
// with their edge values: unsigned bigint above 2^63, exact decimals,
// DATETIME and TIMESTAMP with microseconds, TIME beyond 24 h and
// negative, BIT, ENUM and SET, JSON, BINARY padding, zero dates.
var myTypesDDL = []string{
	`CREATE TABLE typed (id BIGINT UNSIGNED PRIMARY KEY, ti TINYINT, si SMALLINT UNSIGNED, mi MEDIUMINT, i INT UNSIGNED, bi BIGINT,
	  ub BIGINT UNSIGNED, d DECIMAL(12,3), du DECIMAL(5,2) UNSIGNED, dl DECIMAL(50,10), b1 BIT(1), b12 BIT(12), y YEAR,
	  dt DATE, dtm DATETIME(6), ts TIMESTAMP(3) NULL, tm TIME(6), ch CHAR(5), vc VARCHAR(20), tx TEXT, l1 VARCHAR(10) CHARACTER SET latin1,
	  bn BINARY(4), vb VARBINARY(8), bl BLOB, e ENUM('sad','ok'), st SET('x','y','z'), js JSON)`,
	`SET SESSION sql_mode = ''`,
	`INSERT INTO typed VALUES
	 (18446744073709551615, -128, 65535, -8388608, 4294967295, -9223372036854775808, 9223372036854775808, -0.5, 999.99,
	  '-12345678901234567890123456789.0123456789', b'1', b'101010101010', 2024, '2024-02-29', '1999-12-31 23:59:59.999999',
	  '2038-01-19 03:14:07.123', '838:59:59.000000', 'ab', 'héllo, "x"', 'N', 'café', X'01', X'00ff', X'', 'ok', 'x,z', '{"a": 1,  "b":[1,2]}'),
	 (1, 0, 0, 0, 0, 0, 0, 0, 0, 0, b'0', b'0', 0, '0000-00-00', '0000-00-00 00:00:00', '1970-01-01 00:00:01', '-838:59:58.5', '', '', '', '',
	  X'', X'', X'', '', '', '[]'),
	 (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, '2024-00-10', '0001-01-01 00:00:00', NULL, '00:00:00', NULL, NULL,
	  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
	 (3, 1, 1, 1, 1, 1, 1, 1.5, 0.01, 1, b'1', b'1', 1999, '1969-12-31', '1969-12-31 23:59:59.5', NULL, '-00:00:01', 'a', 'a,b', 'x', 'x', X'ff', X'ff', X'ff', 'sad', '', 'null')`,
	`CREATE TABLE plain (id INT PRIMARY KEY, v VARCHAR(20))`,
	`INSERT INTO plain SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000`,
}

// TestReconcileMyEqualTypes: a MariaDB mirror of every type, equal to its
// source, is reported equal (exit 0), every row and column compared, while
// the daemon runs and after it stopped.
func TestReconcileMyEqualTypes(t *testing.T) {
	t.Parallel()
	p := newMyPipeline(t, myTypesDDL, []string{"typed", "plain"}, "")
	p.start()
	p.waitLoaded(p.name + ".typed")
	p.waitLoaded(p.name + ".plain")
	p.waitMirror("plain")
	check := func(when string) {
		t.Helper()
		reps, code := p.reconcileReport()
		for name, rows := range map[string]int64{"typed": 4, "plain": 3000} {
			r := reps[p.name+"."+name]
			if r == nil || !r.Equal() || r.Rows != rows || r.Unchecked != 0 || len(r.Skipped) != 0 || r.Error != "" {
				t.Errorf("%s: %s: %+v, want equal with %d rows, every column compared", when, name, r, rows)
				if r != nil {
					t.Logf("differences: %v; skipped %v", r.Differences(), r.Skipped)
				}
			}
		}
		if code != 0 {
			t.Fatalf("%s: exit %d, want 0", when, code)
		}
	}
	check("daemon running")
	p.stop()
	check("daemon stopped")
}
