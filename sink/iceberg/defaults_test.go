package iceberg

import (
	"log/slog"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
)

// TestDefaultsAgreeWithConfig: the sink's own defaults (for direct users)
// are the config package's, which the daemon passes in.
func TestDefaultsAgreeWithConfig(t *testing.T) {
	c, err := config.Parse([]byte("pipeline: p\nsource:\n  postgres:\n    dsn: postgres://u@h/db\n    tables: [t]\n"), "cdcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ice := c.Sink.Iceberg
	cc := CompactionConfig{}.WithDefaults()
	mc := MaintenanceConfig{}.WithDefaults()
	s := New(Config{}, nil, nil, nil, slog.New(slog.DiscardHandler))
	for _, d := range []struct {
		name       string
		sink, conf any
	}{
		{"interval", cc.Interval, ice.Compaction.Interval},
		{"small_file_percent", int(cc.SmallFileRatio * 100), ice.Compaction.SmallFilePercent},
		{"min_files", cc.MinGroup, ice.Compaction.MinFiles},
		{"delete_percent", int(cc.DeleteRatio * 100), ice.Compaction.DeletePercent},
		{"max_input_mb", cc.MaxBytes, int64(ice.Compaction.MaxInputMB) << 20},
		{"max_input_rows", cc.MaxRows, int64(ice.Compaction.MaxInputRows)},
		{"orphan_age", cc.OrphanAge, ice.Compaction.OrphanAge},
		{"retain_snapshots", mc.RetainSnapshots, ice.Compaction.RetainSnapshots},
		{"target_file_size_mb", s.cfg.TargetFileSize, ice.Compaction.TargetFileSizeMB << 20},
		{"commit_interval", s.cfg.CommitInterval, ice.CommitInterval},
		{"format_version", s.cfg.FormatVersion, ice.FormatVersion},
		{"mode", s.cfg.Mode, ice.Mode},
	} {
		if d.sink != d.conf {
			t.Errorf("sink.iceberg.%s: the sink's default is %v, the config's %v", d.name, d.sink, d.conf)
		}
	}
}
