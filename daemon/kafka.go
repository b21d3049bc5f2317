package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka"
	"github.com/cdcd-dev/cdcd/schema"
)

// logBackend is what the daemon needs of its log: the contract, and the
// operator's view (where it writes, partition counters, a group's lag).
type logBackend interface {
	log.Log
	Dir() string
	Stats() log.Stats
	TopicLag(ctx context.Context, group, topic string) ([]log.PartitionLag, error)
}

var (
	_ logBackend = (*log.Embedded)(nil)
	_ logBackend = (*kafka.Log)(nil)
)

// embeddedOptions are the embedded log's options from the config.
func embeddedOptions(cfg *config.Config) log.Options {
	var opts log.Options
	if cfg.Log.Compression == "none" {
		opts.Compression = log.CompressionNone
	}
	return opts
}

// openLog opens the configured backend: the embedded log under data_dir,
// or Kafka, whose transactional id fences any other source of the pipeline.
func openLog(ctx context.Context, cfg *config.Config, logger *slog.Logger) (logBackend, error) {
	logger = logger.With("component", "log")
	if cfg.Log.Backend != "kafka" {
		lg, err := log.Open(filepath.Join(cfg.DataDir, "log"), embeddedOptions(cfg), logger)
		if err != nil {
			return nil, err // not a nil *Embedded in the interface: Close would call it
		}
		return lg, nil
	}
	opts, err := kafkaOptions(cfg.Log.Kafka)
	if err != nil {
		return nil, err
	}
	if cfg.Role == config.RoleSink {
		// A sink process writes no table topic: opening the transactional
		// producer would fence the pipeline's source.
		opts.TransactionalID = ""
	}
	kl, err := kafka.Open(ctx, opts, logger)
	if err != nil {
		return nil, err
	}
	return kl, nil
}

// kafkaOptions turns log.kafka into the backend's options.
func kafkaOptions(k *config.Kafka) (kafka.Options, error) {
	opts := kafka.Options{Brokers: k.Brokers, ReplicationFactor: int16(k.ReplicationFactor), TransactionalID: k.TransactionalID}
	if t := k.TLS; t != nil {
		tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				return opts, fmt.Errorf("daemon: log.kafka.tls.ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return opts, fmt.Errorf("daemon: log.kafka.tls.ca_file %s holds no PEM certificate", t.CAFile)
			}
		}
		if t.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				return opts, fmt.Errorf("daemon: log.kafka.tls.cert_file/key_file: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts.TLS = tc
	}
	if s := k.SASL; s != nil {
		var m sasl.Mechanism
		switch s.Mechanism {
		case "PLAIN":
			m = plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
		case "SCRAM-SHA-256":
			m = scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
		default:
			m = scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
		}
		opts.SASL = m
	}
	return opts, nil
}

// openRegistry returns the schema registry and the API the admin listener
// serves for it: the external registry (cdcd's routes, the rest passed
// on) when schema_registry is set, else the embedded one in the log.
func openRegistry(ctx context.Context, cfg *config.Config, lg log.Log) (schema.Client, http.Handler, error) {
	if r := cfg.SchemaRegistry; r != nil {
		rem, err := schema.NewRemote(schema.RemoteConfig{URL: r.URL, Username: r.Username, Password: r.Password})
		if err != nil {
			return nil, nil, err
		}
		h, err := schema.NewRemoteHandler(rem)
		return rem, h, err
	}
	reg, err := schema.OpenRegistry(ctx, schemaStore{lg})
	if err != nil {
		return nil, nil, err
	}
	return reg, schema.NewHandler(reg), nil
}

// recordsAfter is how many offsets of partition p lie from next (a
// consumer's next offset) to its end, counting none when no record is
// there: in a transactional Kafka topic the offsets after a consumer's
// last record may be transaction markers only, which it never reads.
func (d *Daemon) recordsAfter(ctx context.Context, topic string, p log.PartitionInfo, next int64) int64 {
	n := p.End - next
	if _, markers := d.lg.(log.LastReader); n <= 0 || !markers {
		return max(n, 0)
	}
	recs, err := d.lg.Fetch(ctx, topic, p.Partition, max(next, p.Start), log.FetchOptions{MaxBytes: 1})
	if err == nil && len(recs) == 0 {
		return 0
	}
	return n
}
