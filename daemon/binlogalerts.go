package daemon

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// AlertBinlogRetention: the MySQL reader is so far behind that the server
// may purge the binlog it still has to read (binlog_expire_logs_seconds /
// expire_logs_days); once purged, the pipeline stops and the tables need a
// re-snapshot. Warning at half the retention, critical at 80%.
const AlertBinlogRetention = "CdcdBinlogRetention"

// evaluateBinlog returns the binlog-retention alert b calls for (nil for
// PostgreSQL, a reader caught up, or a server that keeps binlogs forever).
func evaluateBinlog(b *BinlogStatus) []Alert {
	if b == nil || b.LagBytes <= 0 || b.RetentionSeconds <= 0 {
		return nil
	}
	share := b.LagSeconds / b.RetentionSeconds
	sev := ""
	switch {
	case share >= 0.8:
		sev = SeverityCritical
	case share >= 0.5:
		sev = SeverityWarning
	default:
		return nil
	}
	lag := time.Duration(b.LagSeconds * float64(time.Second)).Round(time.Second)
	keep := time.Duration(b.RetentionSeconds * float64(time.Second)).Round(time.Second)
	return []Alert{{Name: AlertBinlogRetention, Severity: sev, Subject: b.File,
		Summary: fmt.Sprintf("the MySQL reader is %s behind (%s of binlog) and the server keeps binlogs %s: "+
			"once the binlog it still has to read is purged, changes are lost to the pipeline", lag, humanBytes(b.LagBytes), keep),
		Action: "find what holds the pipeline back (cdcd status, the daemon's log); raise binlog_expire_logs_seconds on the server " +
			"(SET GLOBAL binlog_expire_logs_seconds = ..., and in its config file) so the binlogs outlive the lag",
		Value: share}}
}

var (
	descBinlogLag       = desc("cdcd_binlog_lag_bytes", "MySQL source: binlog bytes between the reader and the server's binlog end.")
	descBinlogLagSec    = desc("cdcd_binlog_lag_seconds", "MySQL source: age of the newest change the reader emitted.")
	descBinlogRetention = desc("cdcd_binlog_retention_seconds", "MySQL source: how long the server keeps binlogs (0: forever).")
)

// collectBinlog reports the MySQL reader's binlog gauges (nothing for
// PostgreSQL).
func (c *collector) collectBinlog(ch chan<- prometheus.Metric) {
	b := c.d.binlogStatus()
	if b == nil {
		return
	}
	gauge(ch, descBinlogLag, float64(b.LagBytes))
	gauge(ch, descBinlogLagSec, b.LagSeconds)
	gauge(ch, descBinlogRetention, b.RetentionSeconds)
}
