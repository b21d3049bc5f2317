package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const outboxBase = `pipeline: shop
source:
  postgres:
    dsn: postgres://cdc:pw@127.0.0.1:5432/shop
    tables: []
outbox:
  table: outbox
  topic: outbox.${aggregatetype} # key = aggregateid, header id = the event id
  headers: [tenant, "trace_id:traceparent"]
  targets:
    - log: {}                    # the embedded log (or Kafka when log.backend is kafka)
    - webhook: {url: "https://svc.example/events", secret: "${HOOK_SECRET}"}
    - webhook: {url: "http://127.0.0.1:9000/hook", give_up_after: 1h}
`

func parseOutbox(t *testing.T, yaml string) (*Config, error) {
	t.Helper()
	return Parse([]byte(yaml), "cdcd.yaml", WithLookupEnv(func(n string) (string, bool) {
		switch n {
		case "HOOK_SECRET":
			return "s3cr3t", true
		case "PREFIX":
			return "acme", true
		}
		return "", false
	}))
}

// TestOutboxConfig: the block from DESIGN.md parses with its defaults, a
// relay may run without mirrored tables, and secrets are redacted.
func TestOutboxConfig(t *testing.T) {
	c, err := parseOutbox(t, outboxBase)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Outbox
	if o.Table != "public.outbox" || o.Topic != "outbox.${aggregatetype}" || o.Payload != PayloadAsIs || o.Columns.AggregateID != "aggregateid" {
		t.Errorf("defaults: %+v", o)
	}
	w1, w2 := o.Targets[1].Webhook, o.Targets[2].Webhook
	if w1.Name != "webhook" || w2.Name != "webhook-2" || w1.Secret != "s3cr3t" || w1.Timeout != 10*time.Second || w1.Concurrency != 16 ||
		w1.GiveUpAfter != 10*time.Minute || w2.GiveUpAfter != time.Hour || w2.DeadLetterTopic != "_cdcd_dead.outbox.webhook-2" {
		t.Errorf("webhooks: %+v %+v", w1, w2)
	}
	if o.Alerts.Lag.Warning != time.Minute || o.Alerts.TableBytes.Critical != 10<<30 {
		t.Errorf("alerts: %+v", o.Alerts)
	}
	s := c.String()
	if strings.Contains(s, "s3cr3t") || !strings.Contains(s, `secret: "***"`) || !strings.Contains(s, "- log: {}") {
		t.Errorf("rendered:\n%s", s)
	}
	if again, err := Parse([]byte(s), "rendered.yaml"); err != nil || again.Outbox.Topic != o.Topic {
		t.Errorf("the rendered config does not parse again the same: %v", err)
	}
	// The template's variable is not the environment's; others are.
	c, err = parseOutbox(t, strings.Replace(outboxBase, "topic: outbox.${aggregatetype}", `topic: "${PREFIX}.${routedByValue}.$${aggregatetype}"`, 1))
	if err != nil || c.Outbox.Topic != "acme.${routedByValue}.${aggregatetype}" {
		t.Errorf("topic with ${PREFIX}: %v %q", err, c.Outbox.Topic)
	}
}

// TestOutboxValidate: each mistake is named at its key path.
func TestOutboxValidate(t *testing.T) {
	cases := []struct{ name, old, new, path, msg string }{
		{"no way in", "  table: outbox\n", "", "outbox", "set table"},
		{"no targets", "  targets:\n", "  targets: []\n  x:\n", "outbox.targets", "at least one target"},
		{"two kinds", "    - log: {}", "    - {log: {}, webhook: {url: \"https://a.example\"}}", "outbox.targets[0]", "exactly one of"},
		{"http outside", "http://127.0.0.1:9000/hook", "http://hooks.example/x", "outbox.targets[2].webhook.url", "must be https://"},
		{"no url", "{url: \"https://svc.example/events\", secret: \"${HOOK_SECRET}\"}", "{secret: x}", "outbox.targets[1].webhook.url", "required"},
		{"same name", "give_up_after: 1h}", "give_up_after: 1h, name: webhook}", "outbox.targets[2].webhook.name", "also the name"},
		{"give up", "give_up_after: 1h", "give_up_after: 1s", "outbox.targets[2].webhook.give_up_after", "at least the timeout"},
		{"header", "trace_id:traceparent", "trace_id:Idempotency-Key", "outbox.headers[1]", "the relay's own"},
		{"topic", "topic: outbox.", "topic: _x.", "outbox.topic", "cdcd's own topics"},
		{"topic chars", "topic: outbox.", "topic: a b.", "outbox.topic", "not a topic template"},
		{"payload", "  table: outbox\n", "  table: outbox\n  payload: raw\n", "outbox.payload", "as_is or expanded"},
		{"columns", "  table: outbox\n", "  table: outbox\n  columns: {type: aggregateid}\n", "outbox.columns.type", "also columns.aggregate_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(outboxBase, tc.old) {
				t.Fatalf("%q is not in the base config", tc.old)
			}
			_, err := parseOutbox(t, strings.Replace(outboxBase, tc.old, tc.new, 1))
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("no errors: %v", err)
			}
			for _, e := range errs {
				if e.Path == tc.path && strings.Contains(e.Msg, tc.msg) {
					return
				}
			}
			t.Errorf("want %s: ...%s..., got %v", tc.path, tc.msg, err)
		})
	}
	mysql := `pipeline: shop
source:
  mysql: {dsn: "mysql://cdc:pw@127.0.0.1:3306/shop", tables: [], snapshot: never}
outbox: {message_prefix: app, table: outbox, targets: [{log: {}}]}
`
	_, err := parseOutbox(t, mysql)
	if err == nil || !strings.Contains(err.Error(), "outbox.message_prefix") || !strings.Contains(err.Error(), "outbox.table: \"outbox\" is not a table name") {
		t.Errorf("MySQL with a message prefix and a bare table: %v", err)
	}
	// Without an outbox, tables stay required.
	if _, err := parseOutbox(t, strings.Split(outboxBase, "outbox:")[0]); err == nil || !strings.Contains(err.Error(), "at least one table") {
		t.Errorf("no tables and no outbox: %v", err)
	}
}
