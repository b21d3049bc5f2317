package examples

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/internal/promtooltest"
)

// No Docker engine runs here: these tests load docker-compose.yml with
// compose-go (the library docker compose uses) and check what the engine
// would need: the build context and Dockerfile, every file the Dockerfile
// copies or builds, the mounted files, and the mounted cdcd config, which
// must validate.

// loadCompose loads docker-compose.yml with profiles enabled and returns it
// with the repository's root.
func loadCompose(t *testing.T, profiles ...string) (*types.Project, string) {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("cdcd-demo", true) }, loader.WithProfiles(profiles))
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p, root
}

func TestComposeFile(t *testing.T) {
	p, root := loadCompose(t)
	for _, name := range []string{"postgres", "workload", "cdcd"} {
		if _, ok := p.Services[name]; !ok {
			t.Fatalf("service %s is missing", name)
		}
	}
	pg := p.Services["postgres"]
	if !slices.Contains(pg.Command, "wal_level=logical") {
		t.Errorf("postgres runs %q: it needs -c wal_level=logical", pg.Command)
	}
	cd := p.Services["cdcd"]
	if cd.Build == nil || cd.Build.Context != root || cd.Build.Dockerfile != "Dockerfile" {
		t.Fatalf("cdcd is not built from the repository's Dockerfile: %+v", cd.Build)
	}
	if w := p.Services["workload"]; w.Build == nil || w.Image != cd.Image || !slices.Contains(w.Entrypoint, "/usr/local/bin/cdcd-workload") {
		t.Errorf("the workload runs %v from %q, want the cdcd image's cdcd-workload", w.Entrypoint, w.Image)
	}
	if _, ok := cd.DependsOn["postgres"]; !ok {
		t.Error("cdcd does not wait for postgres")
	}

	// Mounts: bind sources exist; the data volume is declared.
	var cfgPath string
	dataVolume := false
	for _, svc := range p.Services {
		for _, v := range svc.Volumes {
			switch v.Type {
			case types.VolumeTypeBind:
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("%s mounts %s, which does not exist", svc.Name, v.Source)
				}
				if svc.Name == "cdcd" && v.Target == "/etc/cdcd/cdcd.yaml" {
					cfgPath = v.Source
				}
			case types.VolumeTypeVolume:
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s mounts the undeclared volume %s", svc.Name, v.Source)
				}
				if svc.Name == "cdcd" && v.Target == "/var/lib/cdcd" {
					dataVolume = true
				}
			}
		}
	}
	if !dataVolume {
		t.Error("cdcd keeps no volume at /var/lib/cdcd (its log and warehouse)")
	}
	if cfgPath == "" {
		t.Fatal("cdcd mounts no config at /etc/cdcd/cdcd.yaml")
	}

	// The mounted config validates with the service's environment, keeps
	// its data in the volume, listens where the port is published, and
	// stops within the grace period compose gives it.
	env := func(name string) (string, bool) {
		v, ok := cd.Environment[name]
		if !ok || v == nil {
			return "", false
		}
		return *v, true
	}
	cfg, err := config.Load(cfgPath, config.WithLookupEnv(env))
	if err != nil {
		t.Fatalf("the compose demo's config: %v", err)
	}
	if cfg.DataDir != "/var/lib/cdcd" || !strings.HasSuffix(cfg.Admin.Listen, ":8089") {
		t.Errorf("data_dir %s, admin.listen %s", cfg.DataDir, cfg.Admin.Listen)
	}
	if !strings.Contains(cfg.Source.Postgres.DSN, "@postgres:5432/") {
		t.Errorf("the DSN does not name the postgres service")
	}
	if cd.StopGracePeriod == nil || time.Duration(*cd.StopGracePeriod) <= cfg.Shutdown.Deadline {
		t.Errorf("stop_grace_period %v must exceed shutdown.deadline %s, or docker kills cdcd mid-stop", cd.StopGracePeriod, cfg.Shutdown.Deadline)
	}
	checkDockerfile(t, root, filepath.Join(root, cd.Build.Dockerfile))
}

// checkDockerfile checks that every local file the Dockerfile copies and
// every package it builds exists in the build context and is not excluded
// by .dockerignore, that it has a build stage and a final stage, and that
// the final stage runs as a non-root user.
func checkDockerfile(t *testing.T, context, path string) {
	t.Helper()
	ignored := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(context, ".dockerignore")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				ignored[strings.TrimPrefix(l, "/")] = true
			}
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var froms []string
	user := ""
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(text, "\\"); ok {
			line += cont + " "
			continue
		}
		line += text
		fields := strings.Fields(line)
		line = ""
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			froms = append(froms, fields[1])
			user = ""
		case "USER":
			user = fields[1]
		case "COPY", "ADD":
			args := fields[1:]
			if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--from=") }) {
				continue
			}
			var srcs []string
			for _, a := range args {
				if !strings.HasPrefix(a, "--") {
					srcs = append(srcs, a)
				}
			}
			for _, src := range srcs[:len(srcs)-1] {
				if src == "." {
					continue
				}
				if _, err := os.Stat(filepath.Join(context, src)); err != nil {
					t.Errorf("the Dockerfile copies %s, which is not in the build context", src)
				}
				if ignored[src] {
					t.Errorf("the Dockerfile copies %s, which .dockerignore excludes", src)
				}
			}
		case "RUN":
			for _, a := range fields {
				if pkg, ok := strings.CutPrefix(a, "./"); ok && a != "./" {
					if st, err := os.Stat(filepath.Join(context, pkg)); err != nil || !st.IsDir() {
						t.Errorf("the Dockerfile builds %s, which is not a directory of the context", a)
					}
				}
			}
		}
	}
	if len(froms) < 2 {
		t.Errorf("the Dockerfile has %d stages; want a build stage and a small final one", len(froms))
	}
	if user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") {
		t.Errorf("the final stage runs as %q; it must be a non-root user", user)
	}
	for _, must := range []string{"go.mod", "go.sum", "cmd", "examples"} {
		if ignored[must] {
			t.Errorf(".dockerignore excludes %s, which the build needs", must)
		}
	}
}

// TestPrometheusRules: the rules file passes promtool and has exactly the
// alerts cdcd raises itself.
func TestPrometheusRules(t *testing.T) {
	promtooltest.CheckRules(t, "prometheus-rules.yml")
	b, err := os.ReadFile("prometheus-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), "# Shows: ") {
		t.Error("the first line must say what it shows (# Shows: ...)")
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(strings.TrimSpace(l), "- alert: "); ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	want := []string{"CdcdBinlogRetention", "CdcdCommitsFailing", "CdcdConsumerLag", "CdcdLogDataLost", "CdcdLogRetentionNear", "CdcdLogWriteFailing", "CdcdSlotLagBytes", "CdcdSlotLagTime", "CdcdSlotLost",
		"CdcdSlotSafeWALLow", "CdcdSlotWALUnreserved", "CdcdTablePaused"}
	if !slices.Equal(names, want) {
		t.Errorf("alerts %v, want %v (the daemon's, see daemon/alerts.go)", names, want)
	}
}
