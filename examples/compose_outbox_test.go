package examples

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/outbox"
)

// TestComposeOutboxService: the demo's outbox service runs from the cdcd
// image on the shop's database, the shop's schema creates the outbox table
// the service writes, and cdcd's config relays that table.
func TestComposeOutboxService(t *testing.T) {
	p, _ := loadCompose(t)
	svc, ok := p.Services["outbox-service"]
	if !ok {
		t.Fatal("service outbox-service is missing")
	}
	cd := p.Services["cdcd"]
	if svc.Build == nil || svc.Image != cd.Image || !slices.Contains(svc.Entrypoint, "/usr/local/bin/cdcd-outbox-service") {
		t.Errorf("outbox-service runs %v from %q, want the cdcd image's cdcd-outbox-service", svc.Entrypoint, svc.Image)
	}
	if url := svc.Environment["DATABASE_URL"]; url == nil || !strings.Contains(*url, "@postgres:5432/shop") {
		t.Errorf("outbox-service's DATABASE_URL %v does not name the shop on the postgres service", url)
	}
	if _, ok := svc.DependsOn["postgres"]; !ok {
		t.Error("outbox-service does not wait for postgres")
	}

	// schema.sql creates the table as outbox.Writer{}.DDL() does.
	schema, err := os.ReadFile("compose/schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.ReplaceAll(outbox.Writer{}.DDL(), `"`, ""); !strings.Contains(string(schema), want) {
		t.Errorf("compose/schema.sql does not create the outbox table as the service writes it:\n%s", want)
	}

	env := func(name string) (string, bool) {
		if v := cd.Environment[name]; v != nil {
			return *v, true
		}
		return "", false
	}
	cfg, err := config.Load("compose/cdcd.yaml", config.WithLookupEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Outbox == nil || cfg.Outbox.Table != "public.outbox" || len(cfg.Outbox.Targets) == 0 || cfg.Outbox.Targets[0].Log == nil {
		t.Errorf("cdcd.yaml does not relay public.outbox to the log: %+v", cfg.Outbox)
	}
}
