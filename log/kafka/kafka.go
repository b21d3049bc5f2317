package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/cdcd-dev/cdcd/log"
)

// Options configures the Kafka log.
type Options struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// TLS, when set, dials the brokers over TLS with this configuration.
	TLS *tls.Config
	// SASL, when set, authenticates every connection with this mechanism
	// (franz-go's sasl/plain, sasl/scram, ...).
	SASL sasl.Mechanism
	// ClientID is sent to the brokers; default "cdcd".
	ClientID string
	// ReplicationFactor of the topics CreateTopic creates; default -1 (the
	// broker's default.replication.factor).
	ReplicationFactor int16

	// TransactionalID, when set, makes every Produce transactional (see
	// txn.go) under this id. Opening the log fences any other producer with
	// the same id and aborts its open transaction. cdcd derives it from the
	// pipeline, so two sources of one pipeline never both write.
	TransactionalID string
	// TransactionTimeout is how long the broker lets a transaction stay
	// open before aborting it; default 60s.
	TransactionTimeout time.Duration
	// ProgressTopic receives each transaction's progress record (compacted,
	// one partition, created at Open if missing); default "_cdcd_progress".
	ProgressTopic string
	// PositionHeader names the record header whose greatest value (bytes
	// compared) a transaction's progress record carries as its position;
	// default "cdcd.pos" (schema.HeaderPosition).
	PositionHeader string
	// MaxTxnBytes bounds the records of one transaction (more waits for the
	// next); default 16 MiB. One Produce call is never split.
	MaxTxnBytes int
}

func (o *Options) setDefaults() {
	if o.ClientID == "" {
		o.ClientID = "cdcd"
	}
	if o.ReplicationFactor == 0 {
		o.ReplicationFactor = -1
	}
	if o.TransactionTimeout <= 0 {
		o.TransactionTimeout = 60 * time.Second
	}
	if o.ProgressTopic == "" {
		o.ProgressTopic = "_cdcd_progress"
	}
	if o.PositionHeader == "" {
		o.PositionHeader = "cdcd.pos"
	}
	if o.MaxTxnBytes <= 0 {
		o.MaxTxnBytes = 16 << 20
	}
}

// Log is the log.Log contract on a Kafka cluster.
type Log struct {
	opts   Options
	logger *slog.Logger
	cl     *kgo.Client // metadata, fetches, admin; the producer when not transactional
	adm    *kadm.Client
	meta   metaCache
	txn    *txnProducer // nil when not transactional

	mu     sync.RWMutex
	closed bool
}

var (
	_ log.Log           = (*Log)(nil)
	_ log.AsyncProducer = (*Log)(nil)
	_ log.LastReader    = (*Log)(nil)
)

// Open connects to the cluster (it checks that a broker answers) and, with
// a TransactionalID, initialises the transactional producer: this fences
// any older producer of that id. logger may be nil.
func Open(ctx context.Context, opts Options, logger *slog.Logger) (*Log, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts.setDefaults()
	if len(opts.Brokers) == 0 {
		return nil, errors.New("kafka: no brokers given; set log.kafka.brokers to host:port of at least one broker")
	}
	cl, err := kgo.NewClient(append(opts.clientOpts(logger),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client for %s: %w", strings.Join(opts.Brokers, ","), err)
	}
	l := &Log{opts: opts, logger: logger, cl: cl, adm: kadm.NewClient(cl)}
	l.meta.l = l
	if err := cl.Ping(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: no broker of %s answers: %w", strings.Join(opts.Brokers, ","), err)
	}
	if opts.TransactionalID != "" {
		if l.txn, err = startTxn(ctx, l); err != nil {
			cl.Close()
			return nil, err
		}
	}
	return l, nil
}

// clientOpts are the options every client of this log shares.
func (o *Options) clientOpts(logger *slog.Logger) []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ClientID(o.ClientID),
		kgo.WithLogger(kgoLogger{logger.With("component", "kgo")}),
		kgo.RetryTimeout(30 * time.Second),
	}
	if o.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(o.TLS.Clone()))
	}
	if o.SASL != nil {
		opts = append(opts, kgo.SASL(o.SASL))
	}
	return opts
}

// Close finishes the transactions in flight, then releases the clients.
// Later calls return log.ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return log.ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	if l.txn != nil {
		l.txn.close()
	}
	l.cl.Close()
	return nil
}

// check returns ctx's error, or log.ErrClosed once the log is closed.
func (l *Log) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return log.ErrClosed
	}
	return nil
}

// Kafka's own topics, which cdcd may neither create nor delete.
func reserved(name string) bool { return strings.HasPrefix(name, "__") }

// CreateTopic creates a topic with cfg's partitions and cleanup settings.
func (l *Log) CreateTopic(ctx context.Context, name string, cfg log.TopicConfig) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if reserved(name) {
		return fmt.Errorf("%w: %q is Kafka's own", log.ErrReservedTopic, name)
	}
	if cfg.Partitions < 1 {
		return fmt.Errorf("%w: %s: partitions must be at least 1 (got %d)", log.ErrInvalidTopic, name, cfg.Partitions)
	}
	resp, err := l.adm.CreateTopic(ctx, cfg.Partitions, l.opts.ReplicationFactor, topicConfigs(cfg), name)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		l.meta.forget(name)
		return nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		return fmt.Errorf("%w: %s", log.ErrTopicExists, name)
	case errors.Is(err, kerr.InvalidTopicException), errors.Is(err, kerr.InvalidPartitions),
		errors.Is(err, kerr.InvalidConfig), errors.Is(err, kerr.InvalidReplicationFactor):
		return fmt.Errorf("%w: %s: %v", log.ErrInvalidTopic, name, err)
	}
	return fmt.Errorf("kafka: create topic %s: %w", name, l.ctxErr(ctx, err))
}

// topicConfigs are Kafka's topic settings for cfg.
func topicConfigs(cfg log.TopicConfig) map[string]*string {
	s := func(v string) *string { return &v }
	ms := func(d time.Duration) *string { return s(fmt.Sprint(d.Milliseconds())) }
	out := map[string]*string{"retention.ms": s("-1")}
	if cfg.Retention > 0 {
		out["retention.ms"] = ms(cfg.Retention)
	}
	if cfg.RetentionBytes > 0 {
		out["retention.bytes"] = s(fmt.Sprint(cfg.RetentionBytes))
	}
	if cfg.Cleanup == log.CleanupCompact {
		out["cleanup.policy"] = s("compact")
		dr := cfg.DeleteRetention
		if dr <= 0 {
			dr = 24 * time.Hour
		}
		out["delete.retention.ms"] = ms(dr)
	}
	return out
}

// DescribeTopic returns the topic's ID, settings and partitions (start:
// log start offset; end: last stable offset).
func (l *Log) DescribeTopic(ctx context.Context, name string) (log.TopicInfo, error) {
	if err := l.check(ctx); err != nil {
		return log.TopicInfo{}, err
	}
	tm, err := l.meta.get(ctx, name, false)
	if err != nil {
		return log.TopicInfo{}, err
	}
	n := int32(len(tm.leaders))
	starts, err := l.listOffsets(ctx, name, n, -2, 0)
	if err != nil {
		return log.TopicInfo{}, err
	}
	ends, err := l.listOffsets(ctx, name, n, -1, 1)
	if err != nil {
		return log.TopicInfo{}, err
	}
	cfg, err := l.topicConfig(ctx, name, tm)
	if err != nil {
		return log.TopicInfo{}, err
	}
	info := log.TopicInfo{Name: name, ID: tm.idString(), Config: cfg}
	for p := int32(0); p < n; p++ {
		info.Partitions = append(info.Partitions, log.PartitionInfo{Partition: p, Start: starts[p], End: max(ends[p], starts[p])})
	}
	return info, nil
}

// topicConfig reads the topic's settings (cached with its metadata: they
// change only through an operator's hand).
func (l *Log) topicConfig(ctx context.Context, name string, tm *topicMeta) (log.TopicConfig, error) {
	if c := tm.config.Load(); c != nil {
		return *c, nil
	}
	rcs, err := l.adm.DescribeTopicConfigs(ctx, name)
	if err != nil {
		return log.TopicConfig{}, fmt.Errorf("kafka: describe configs of %s: %w", name, l.ctxErr(ctx, err))
	}
	rc, err := rcs.On(name, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return log.TopicConfig{}, fmt.Errorf("kafka: describe configs of %s: %w", name, l.ctxErr(ctx, err))
	}
	cfg := log.TopicConfig{Partitions: int32(len(tm.leaders)), Cleanup: log.CleanupDelete}
	for _, c := range rc.Configs {
		v := c.MaybeValue()
		var n int64
		fmt.Sscan(v, &n)
		switch c.Key {
		case "retention.ms":
			cfg.Retention = max(0, time.Duration(n)*time.Millisecond)
		case "retention.bytes":
			cfg.RetentionBytes = max(0, n)
		case "delete.retention.ms":
			cfg.DeleteRetention = time.Duration(n) * time.Millisecond
		case "cleanup.policy":
			if strings.Contains(v, "compact") {
				cfg.Cleanup = log.CleanupCompact
			}
		}
	}
	tm.config.Store(&cfg)
	return cfg, nil
}

// ListTopics returns the names of all topics but Kafka's own, sorted.
func (l *Log) ListTopics(ctx context.Context) ([]string, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	// A metadata request of its own: kadm's ListTopics answers from the
	// client's metadata cache, which lists a deleted topic for a while.
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, l.cl)
	if err != nil {
		return nil, fmt.Errorf("kafka: list topics: %w", l.ctxErr(ctx, err))
	}
	var names []string
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 && !t.IsInternal && !reserved(*t.Topic) {
			names = append(names, *t.Topic)
		}
	}
	sort.Strings(names)
	return names, nil
}

// DeleteTopic deletes a topic.
func (l *Log) DeleteTopic(ctx context.Context, name string) error {
	if err := l.check(ctx); err != nil {
		return err
	}
	if reserved(name) {
		return fmt.Errorf("%w: %q is Kafka's own", log.ErrReservedTopic, name)
	}
	resp, err := l.adm.DeleteTopic(ctx, name)
	if err == nil {
		err = resp.Err
	}
	l.meta.forget(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return fmt.Errorf("%w: %s", log.ErrUnknownTopic, name)
	}
	return fmt.Errorf("kafka: delete topic %s: %w", name, l.ctxErr(ctx, err))
}

// ctxErr prefers the context's error: a call cut short by cancellation
// reports that, whatever the client made of it.
func (l *Log) ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	return err
}

// kgoLogger passes franz-go's log lines to slog, warnings and above.
type kgoLogger struct{ l *slog.Logger }

func (k kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (k kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	k.l.Log(context.Background(), lv, msg, keyvals...)
}
