package examples

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cdcd-dev/cdcd/config"
)

// TestComposeKafkaProfile: the kafka profile adds Redpanda and a cdcd on
// it, whose mounted config validates, names Redpanda's Kafka API and
// schema registry, and waits for both; without the profile neither runs.
func TestComposeKafkaProfile(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	load := func(profiles ...string) *types.Project {
		p, err := loader.LoadWithContext(t.Context(), types.ConfigDetails{
			WorkingDir:  root,
			ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(root, "docker-compose.yml")}},
			Environment: types.Mapping{},
		}, func(o *loader.Options) { o.SetProjectName("cdcd-demo", true) }, loader.WithProfiles(profiles))
		if err != nil {
			t.Fatalf("docker-compose.yml: %v", err)
		}
		return p
	}
	if p := load(); p.Services["redpanda"].Name != "" || p.Services["cdcd-kafka"].Name != "" {
		t.Fatal("the kafka profile's services run without the profile")
	}
	p := load("kafka")
	rp, ok := p.Services["redpanda"]
	if !ok || !slices.Contains(rp.Command, "--advertise-kafka-addr=internal://redpanda:9092") || rp.HealthCheck == nil {
		t.Fatalf("redpanda: %+v", rp)
	}
	ck, ok := p.Services["cdcd-kafka"]
	if !ok {
		t.Fatal("cdcd-kafka is missing")
	}
	for _, dep := range []string{"postgres", "redpanda"} {
		if d, ok := ck.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("cdcd-kafka does not wait for %s to be healthy", dep)
		}
	}
	var cfgPath string
	for _, v := range ck.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == "/etc/cdcd/cdcd.yaml" {
			cfgPath = v.Source
		}
		if v.Type == types.VolumeTypeVolume {
			if _, ok := p.Volumes[v.Source]; !ok {
				t.Errorf("cdcd-kafka mounts the undeclared volume %s", v.Source)
			}
		}
	}
	env := func(name string) (string, bool) {
		v, ok := ck.Environment[name]
		if !ok || v == nil {
			return "", false
		}
		return *v, true
	}
	cfg, err := config.Load(cfgPath, config.WithLookupEnv(env))
	if err != nil {
		t.Fatalf("the kafka profile's config: %v", err)
	}
	if cfg.Log.Backend != "kafka" || !slices.Equal(cfg.Log.Kafka.Brokers, []string{"redpanda:9092"}) ||
		cfg.SchemaRegistry.URL != "http://redpanda:8081" || cfg.Pipeline == "shop" {
		t.Errorf("backend %s, brokers %v, registry %s, pipeline %s (must differ from the embedded demo's)",
			cfg.Log.Backend, cfg.Log.Kafka.Brokers, cfg.SchemaRegistry.URL, cfg.Pipeline)
	}
}
