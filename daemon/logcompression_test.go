package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
)

// TestLogCompressionKey: log.compression reaches the embedded log. The
// same well-compressing records take a fraction of the disk under the
// default (s2) and their plain size under "none", and read back the same
// either way.
func TestLogCompressionKey(t *testing.T) {
	ctx := context.Background()
	recs := make([]log.Record, 2000)
	for i := range recs {
		recs[i] = log.Record{Key: fmt.Appendf(nil, "key-%06d", i),
			Value: fmt.Appendf(nil, `{"id":%d,"name":"customer %d","city":"Amsterdam","status":"active"}`, i, i%50)}
	}
	sizes := map[string]int64{}
	for _, c := range []string{"", "none"} {
		cfg := &config.Config{}
		cfg.Log.Compression = c
		cfg.ApplyDefaults()
		dir := t.TempDir()
		lg, err := log.Open(dir, embeddedOptions(cfg), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := lg.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if err := lg.Produce(ctx, "t", recs); err != nil {
			t.Fatal(err)
		}
		got, err := lg.Fetch(ctx, "t", 0, 0, log.FetchOptions{MaxBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(recs) || string(got[1234].Value) != string(recs[1234].Value) {
			t.Fatalf("compression %q: read %d records back (want %d) or a changed value", cfg.Log.Compression, len(got), len(recs))
		}
		if err := lg.Close(); err != nil {
			t.Fatal(err)
		}
		_ = filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if err == nil && filepath.Ext(path) == ".log" {
				sizes[cfg.Log.Compression] += fi.Size()
			}
			return nil
		})
	}
	if sizes["s2"] == 0 || sizes["none"] == 0 || sizes["s2"]*3 > sizes["none"] {
		t.Fatalf("segment bytes: s2 %d, none %d; want s2 under a third of none", sizes["s2"], sizes["none"])
	}
}
