package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Kafka configures the Kafka (or Redpanda) log backend: log.kafka, used
// when log.backend is kafka.
type Kafka struct {
	// Brokers are seed brokers, host:port. At least one.
	Brokers []string `yaml:"brokers"`
	// TLS, when present, connects over TLS.
	TLS *KafkaTLS `yaml:"tls"`
	// SASL, when present, authenticates every connection.
	SASL *KafkaSASL `yaml:"sasl"`
	// ReplicationFactor of the topics cdcd creates; default -1 (the
	// brokers' default.replication.factor).
	ReplicationFactor int `yaml:"replication_factor"`
	// TransactionalID fences other sources of this pipeline: default
	// cdcd-<pipeline>. Two pipelines on one cluster need different ones.
	TransactionalID string `yaml:"transactional_id"`
	// SessionTimeout: a sink process (role: sink) silent for this long
	// loses its tables to the pipeline's other sink processes; default
	// 10s, within the brokers' group.min.session.timeout.ms (6s) and
	// group.max.session.timeout.ms.
	SessionTimeout time.Duration `yaml:"session_timeout"`
}

// Roles of a process (role).
const (
	RoleAll    = "all"
	RoleSource = "source"
	RoleSink   = "sink"
)

// KafkaTLS configures TLS to the brokers. Every file is PEM; all optional
// (the system's roots verify the brokers by default).
type KafkaTLS struct {
	// CAFile holds the roots that verify the brokers' certificates.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate (mutual TLS); both or
	// neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name verified in the brokers' certificates.
	ServerName string `yaml:"server_name,omitempty"`
	// InsecureSkipVerify turns verification off (tests only).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify,omitempty"`
}

// KafkaSASL configures SASL authentication.
type KafkaSASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	// Password: use ${ENV}; printed as ***.
	Password string `yaml:"password" secret:"all"`
}

// SchemaRegistry configures an external Confluent-compatible schema
// registry (schema_registry). Required with the Kafka backend: the schemas
// then live where other Kafka tools read them.
type SchemaRegistry struct {
	// URL is the registry's http(s) address. Credentials in it are printed
	// redacted.
	URL string `yaml:"url" secret:"true"`
	// Username and Password, if set, are sent as HTTP basic auth; the
	// password is printed as ***.
	Username string `yaml:"username,omitempty"`
	Password string `yaml:"password,omitempty" secret:"all"`
}

// SASL mechanisms log.kafka.sasl.mechanism accepts.
var saslMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

func (c *Config) kafkaDefaults(explicit func(string) bool) {
	orDefault(&c.Role, RoleAll, explicit("role"))
	k := c.Log.Kafka
	if k == nil || c.Log.Backend != "kafka" {
		return
	}
	orDefault(&k.ReplicationFactor, -1, explicit("log.kafka.replication_factor"))
	orDefault(&k.TransactionalID, "cdcd-"+c.Pipeline, explicit("log.kafka.transactional_id"))
	orDefault(&k.SessionTimeout, 10*time.Second, explicit("log.kafka.session_timeout"))
	if s := k.SASL; s != nil {
		s.Mechanism = strings.ToUpper(s.Mechanism)
	}
}

// kafka validates role, log.kafka and schema_registry against
// log.backend.
func (v *validator) kafka() {
	k, reg := v.c.Log.Kafka, v.c.SchemaRegistry
	switch v.c.Role {
	case RoleAll:
	case RoleSource, RoleSink:
		if v.c.Log.Backend != "kafka" {
			v.fail("role", ErrInvalid, "%s runs beside other cdcd processes of the pipeline, which share only a Kafka log: set log.backend: kafka, or role: all (one process with the embedded log)", v.c.Role)
		}
	default:
		v.fail("role", ErrInvalid, "must be all, source or sink, got %s", shortQuote(v.c.Role))
	}
	if v.c.Log.Backend != "kafka" {
		if k != nil {
			v.fail("log.kafka", ErrInvalid, "is used only with log.backend: kafka (the backend is %s); remove it or set the backend", shortQuote(v.c.Log.Backend))
		}
		if reg != nil {
			v.fail("schema_registry", ErrInvalid, "an external registry is used only with log.backend: kafka; the embedded log keeps its own registry")
		}
		return
	}
	if k == nil {
		v.fail("log.kafka", ErrInvalid, "required with log.backend: kafka: add log.kafka: {brokers: [host:9092]}")
	} else {
		v.kafkaBrokers(k)
	}
	if reg == nil || strings.TrimSpace(reg.URL) == "" {
		v.fail("schema_registry.url", ErrInvalid, "required with log.backend: kafka: the URL of a Confluent-compatible registry, like http://registry:8081")
	} else if u, err := url.Parse(reg.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.fail("schema_registry.url", ErrInvalid, "must be an http:// or https:// URL, like http://registry:8081")
	}
}

func (v *validator) kafkaBrokers(k *Kafka) {
	if len(k.Brokers) == 0 {
		v.fail("log.kafka.brokers", ErrInvalid, "at least one broker is required, e.g. brokers: [kafka:9092]")
	}
	for i, b := range k.Brokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || port == "" {
			v.fail(fmt.Sprintf("log.kafka.brokers[%d]", i), ErrInvalid, "%s is not host:port, like kafka:9092", shortQuote(b))
		}
	}
	if k.ReplicationFactor == 0 || k.ReplicationFactor < -1 || k.ReplicationFactor > 32767 {
		v.fail("log.kafka.replication_factor", ErrInvalid, "must be from 1 to 32767, or -1 for the brokers' default; got %d", k.ReplicationFactor)
	}
	if k.SessionTimeout < time.Second || k.SessionTimeout > 30*time.Minute {
		v.fail("log.kafka.session_timeout", ErrInvalid, "must be from 1s to 30m (and within the brokers' group.min/max.session.timeout.ms), got %s", k.SessionTimeout)
	}
	if strings.TrimSpace(k.TransactionalID) == "" {
		v.fail("log.kafka.transactional_id", ErrInvalid, "must not be empty (default cdcd-<pipeline>)")
	}
	if t := k.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		v.fail("log.kafka.tls", ErrInvalid, "cert_file and key_file go together: set both for a client certificate, or neither")
	}
	if s := k.SASL; s != nil {
		ok := false
		for _, m := range saslMechanisms {
			ok = ok || s.Mechanism == m
		}
		if !ok {
			v.fail("log.kafka.sasl.mechanism", ErrInvalid, "must be one of %s, got %s", strings.Join(saslMechanisms, ", "), shortQuote(s.Mechanism))
		}
		if s.Username == "" || s.Password == "" {
			v.fail("log.kafka.sasl", ErrInvalid, "username and password are required (password: use ${ENV})")
		}
	}
}
