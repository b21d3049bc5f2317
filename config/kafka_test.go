package config

import (
	"strings"
	"testing"
	"time"
)

const kafkaBlock = `  backend: kafka
  kafka:
    brokers: ["kafka-1:9092", "kafka-2:9092"]
    tls: {ca_file: /etc/cdcd/ca.pem}
    sasl: {mechanism: scram-sha-512, username: cdcd, password: "${KAFKA_PASSWORD}"}`

const registryBlock = `
schema_registry:
  url: https://cdcd:${REGISTRY_PASSWORD}@registry:8081
  username: cdcd
  password: ${REGISTRY_PASSWORD}
`

// kafkaConfig is the base config on the Kafka backend.
func kafkaConfig(t *testing.T) string {
	return edit(t, "  backend: embedded", kafkaBlock) + registryBlock
}

// TestKafkaConfig: the Kafka backend's keys parse with their defaults, and
// the printed config hides the SASL password and the registry's
// credentials.
func TestKafkaConfig(t *testing.T) {
	env := WithLookupEnv(func(name string) (string, bool) {
		v, ok := map[string]string{"PGPASSWORD": "pg", "KAFKA_PASSWORD": "kafka-s3cret", "REGISTRY_PASSWORD": "reg-s3cret"}[name]
		return v, ok
	})
	c, err := Parse([]byte(kafkaConfig(t)), "cdcd.yaml", env)
	if err != nil {
		t.Fatal(err)
	}
	k := c.Log.Kafka
	if c.Log.Backend != "kafka" || len(k.Brokers) != 2 || k.TLS.CAFile != "/etc/cdcd/ca.pem" || k.SASL.Mechanism != "SCRAM-SHA-512" ||
		k.SASL.Password != "kafka-s3cret" || k.ReplicationFactor != -1 || k.TransactionalID != "cdcd-shop" {
		t.Fatalf("log.kafka = %+v", k)
	}
	if c.Role != RoleAll || k.SessionTimeout != 10*time.Second {
		t.Fatalf("role %q, log.kafka.session_timeout %s: want the defaults all, 10s", c.Role, k.SessionTimeout)
	}
	if c.SchemaRegistry.URL != "https://cdcd:reg-s3cret@registry:8081" || c.SchemaRegistry.Password != "reg-s3cret" {
		t.Fatalf("schema_registry = %+v", c.SchemaRegistry)
	}
	out := c.String()
	if strings.Contains(out, "s3cret") || !strings.Contains(out, "password: '***'") && !strings.Contains(out, `password: "***"`) ||
		!strings.Contains(out, "https://cdcd:***@registry:8081") {
		t.Fatalf("printed config leaks or lacks redaction:\n%s", out)
	}
	again, err := Parse([]byte(out), "printed.yaml", env)
	if err != nil || again.Log.Kafka.TransactionalID != "cdcd-shop" || len(again.Log.Kafka.Brokers) != 2 {
		t.Fatalf("the printed config does not parse back: %v", err)
	}
}

// TestKafkaConfigErrors: each mistake names its key.
func TestKafkaConfigErrors(t *testing.T) {
	base := kafkaConfig(t)
	swap := func(old, new string) string {
		t.Helper()
		if !strings.Contains(base, old) {
			t.Fatalf("no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	for _, c := range []struct {
		src  string
		path string
		msg  string
	}{
		{swap(`brokers: ["kafka-1:9092", "kafka-2:9092"]`, `brokers: [kafka-1]`), "log.kafka.brokers[0]", "not host:port"},
		{swap(`brokers: ["kafka-1:9092", "kafka-2:9092"]`, `brokers: []`), "log.kafka.brokers", "at least one broker"},
		{swap(`mechanism: scram-sha-512`, `mechanism: gssapi`), "log.kafka.sasl.mechanism", "must be one of PLAIN"},
		{swap(`tls: {ca_file: /etc/cdcd/ca.pem}`, `tls: {cert_file: /c.pem}`), "log.kafka.tls", "cert_file and key_file go together"},
		{swap(`url: https://cdcd:${REGISTRY_PASSWORD}@registry:8081`, `url: registry:8081`), "schema_registry.url", "http:// or https://"},
		{strings.TrimSuffix(base, registryBlock), "schema_registry.url", "required with log.backend: kafka"},
		{edit(t, "  backend: embedded", "  backend: kafka"), "log.kafka", "required with log.backend: kafka"},
		{edit(t, "  backend: embedded", "  backend: embedded\n  kafka: {brokers: [\"k:9092\"]}"), "log.kafka", "only with log.backend: kafka"},
		{"role: sink\n" + edit(t, "  backend: embedded", "  backend: embedded"), "role", "set log.backend: kafka"},
		{"role: worker\n" + base, "role", "must be all, source or sink"},
		{swap(`brokers: ["kafka-1:9092", "kafka-2:9092"]`, `brokers: ["kafka-1:9092"]`+"\n    session_timeout: 100ms"), "log.kafka.session_timeout", "from 1s to 30m"},
	} {
		found := false
		for _, e := range problems(t, c.src) {
			found = found || e.Path == c.path && strings.Contains(e.Msg, c.msg) && e.Line > 0
		}
		if !found {
			t.Errorf("%s: no problem %q among %v", c.path, c.msg, problems(t, c.src))
		}
	}
}
