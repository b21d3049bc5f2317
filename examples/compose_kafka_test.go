package examples

import (
	"slices"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/cdcd-dev/cdcd/config"
)

// TestComposeKafkaProfile: the kafka profile adds Redpanda and the
// pipeline on it as a source process and two sink processes, whose mounted
// config validates for each role, names Redpanda's Kafka API and schema
// registry and the shared lake, and which wait for what they need; without
// the profile none runs.
func TestComposeKafkaProfile(t *testing.T) {
	load := func(profiles ...string) *types.Project {
		p, _ := loadCompose(t, profiles...)
		return p
	}
	if p := load(); p.Services["redpanda"].Name != "" || p.Services["cdcd-kafka"].Name != "" || p.Services["cdcd-kafka-sink-1"].Name != "" {
		t.Fatal("the kafka profile's services run without the profile")
	}
	p := load("kafka")
	rp, ok := p.Services["redpanda"]
	if !ok || !slices.Contains(rp.Command, "--advertise-kafka-addr=internal://redpanda:9092") || rp.HealthCheck == nil {
		t.Fatalf("redpanda: %+v", rp)
	}
	// One source and two sink processes on one config, each its role from
	// CDCD_ROLE, its own data_dir volume and admin port, one shared lake.
	want := map[string]string{"cdcd-kafka": "source", "cdcd-kafka-sink-1": "sink", "cdcd-kafka-sink-2": "sink"}
	ports, dataVolumes := map[string]string{}, map[string]string{}
	for name, role := range want {
		ck, ok := p.Services[name]
		if !ok {
			t.Fatalf("%s is missing", name)
		}
		deps := []string{"redpanda"}
		if role == "source" {
			deps = append(deps, "postgres")
		}
		for _, dep := range deps {
			if d, ok := ck.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s does not wait for %s to be healthy", name, dep)
			}
		}
		var cfgPath string
		lake := false
		for _, v := range ck.Volumes {
			if v.Type == types.VolumeTypeBind && v.Target == "/etc/cdcd/cdcd.yaml" {
				cfgPath = v.Source
			}
			if v.Type == types.VolumeTypeVolume {
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s mounts the undeclared volume %s", name, v.Source)
				}
				switch v.Target {
				case "/var/lib/cdcd":
					if other := dataVolumes[v.Source]; other != "" {
						t.Errorf("%s and %s share the data_dir volume %s", name, other, v.Source)
					}
					dataVolumes[v.Source] = name
				case "/var/lib/cdcd-lake":
					lake = v.Source == "cdcd-kafka-lake"
				}
			}
		}
		if !lake {
			t.Errorf("%s does not mount the shared lake cdcd-kafka-lake at /var/lib/cdcd-lake", name)
		}
		for _, pt := range ck.Ports {
			if other := ports[pt.Published]; other != "" {
				t.Errorf("%s and %s publish the same port %s", name, other, pt.Published)
			}
			ports[pt.Published] = name
		}
		env := func(k string) (string, bool) {
			v, ok := ck.Environment[k]
			if !ok || v == nil {
				return "", false
			}
			return *v, true
		}
		cfg, err := config.Load(cfgPath, config.WithLookupEnv(env))
		if err != nil {
			t.Fatalf("%s's config: %v", name, err)
		}
		if cfg.Role != role || cfg.Log.Backend != "kafka" || !slices.Equal(cfg.Log.Kafka.Brokers, []string{"redpanda:9092"}) ||
			cfg.SchemaRegistry.URL != "http://redpanda:8081" || cfg.Pipeline == "shop" ||
			cfg.Sink.Iceberg.Catalog.URI != "sqlite:///var/lib/cdcd-lake/catalog.db" {
			t.Errorf("%s: role %s, backend %s, brokers %v, registry %s, pipeline %s (must differ from the embedded demo's), catalog %s",
				name, cfg.Role, cfg.Log.Backend, cfg.Log.Kafka.Brokers, cfg.SchemaRegistry.URL, cfg.Pipeline, cfg.Sink.Iceberg.Catalog.URI)
		}
	}
}
