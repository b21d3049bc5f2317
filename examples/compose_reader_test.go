package examples

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cdcd-dev/cdcd/config"
)

// TestComposeReader: the compose demo's reader service is built from
// examples/compose/reader (a Dockerfile that pins PyIceberg and copies
// read.py), mounts the volume cdcd keeps its data in at cdcd's data_dir,
// and reads the catalog name, the catalog file, the warehouse and the
// namespace that cdcd's config writes — a reader on another name or path
// would find no tables.
func TestComposeReader(t *testing.T) {
	p, root := loadCompose(t)
	rd, ok := p.Services["reader"]
	if !ok {
		t.Fatal("the compose demo has no reader service")
	}
	ctxDir := filepath.Join(root, "examples", "compose", "reader")
	if rd.Build == nil || rd.Build.Context != ctxDir {
		t.Fatalf("reader is not built from %s: %+v", ctxDir, rd.Build)
	}
	df, err := os.ReadFile(filepath.Join(ctxDir, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`pyiceberg\[[^]]*sql-sqlite[^]]*\]==\d+\.\d+\.\d+`).Match(df) {
		t.Errorf("the reader's Dockerfile does not pin pyiceberg with its SQLite extra:\n%s", df)
	}
	if !strings.Contains(string(df), "COPY read.py") {
		t.Error("the reader's Dockerfile does not copy read.py")
	}
	script, err := os.ReadFile(filepath.Join(ctxDir, "read.py"))
	if err != nil {
		t.Fatal(err)
	}

	cd := p.Services["cdcd"]
	var cfgPath, cdcdVolume string
	for _, v := range cd.Volumes {
		switch {
		case v.Target == "/etc/cdcd/cdcd.yaml":
			cfgPath = v.Source
		case v.Type == types.VolumeTypeVolume && v.Target == "/var/lib/cdcd":
			cdcdVolume = v.Source
		}
	}
	env := func(name string) (string, bool) {
		if v := cd.Environment[name]; v != nil {
			return *v, true
		}
		return "", false
	}
	cfg, err := config.Load(cfgPath, config.WithLookupEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	data := ""
	for _, v := range rd.Volumes {
		if v.Type == types.VolumeTypeVolume && v.Source == cdcdVolume {
			data = v.Target
		}
	}
	if data == "" {
		t.Fatalf("reader does not mount cdcd's volume %s", cdcdVolume)
	}
	getenv := func(name string) string {
		if v := rd.Environment[name]; v != nil {
			return *v
		}
		m := regexp.MustCompile(name + `", "([^"]*)"`).FindSubmatch(script)
		if m == nil {
			t.Fatalf("read.py has no default for %s", name)
		}
		return string(m[1])
	}
	ice := cfg.Sink.Iceberg
	want := map[string]string{
		"catalog name": ice.Catalog.Name,
		"catalog uri":  ice.Catalog.URI,
		"warehouse":    ice.Warehouse,
		"namespace":    ice.Namespace,
	}
	// What read.py opens, with the service's environment.
	dataDir := getenv("CDCD_DATA")
	got := map[string]string{
		"catalog name": getenv("CDCD_CATALOG"),
		"catalog uri":  "sqlite://" + dataDir + "/catalog.db",
		"warehouse":    "file://" + dataDir + "/warehouse",
		"namespace":    getenv("CDCD_NAMESPACE"),
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("the reader's %s is %q, cdcd writes %q", k, got[k], want[k])
		}
	}
	if dataDir != data || cfg.DataDir != data {
		t.Errorf("the reader reads %s with the volume at %s; cdcd's data_dir is %s", dataDir, data, cfg.DataDir)
	}
	for _, line := range []string{`uri=f"sqlite:///{DATA}/catalog.db"`, `warehouse=f"file://{DATA}/warehouse"`} {
		if !strings.Contains(string(script), line) {
			t.Errorf("read.py does not open %s", line)
		}
	}
}
