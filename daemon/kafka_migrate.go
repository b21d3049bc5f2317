package daemon

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"

	"github.com/apache/iceberg-go/table"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// Moving a pipeline from the embedded log to Kafka (cdcd log migrate).
//
// The pipeline is stopped. Its config already names Kafka (log.backend:
// kafka, schema_registry); the embedded log is still under data_dir (or
// at logDir). MigrateLog then
//
//  1. registers every schema of the embedded registry in the external one,
//     subject by subject in version order, noting each schema's new id;
//  2. copies every topic but _schemas and _offsets (the embedded groups'
//     offsets; step 4 moves the sink's) into Kafka, partition by partition in
//     offset order, with keys, values, headers and timestamps as they are
//     except the schema id in each Confluent frame, which becomes the new
//     one. Kafka numbers a new partition's records 0, 1, 2, ...: a record's
//     new offset is its rank in its partition. The target topics must be
//     new or empty (a copy is not resumed: delete them and run it again);
//  3. moves each table's offsets: a snapshot that changes no rows records
//     the Kafka offsets of the same records and the Kafka topic's id, so
//     the table reads on where it stopped, without a re-snapshot;
//  4. moves the sink group's committed offsets (lag metrics) the same way.
//
// The source needs nothing: its last position per partition is in the
// copied records' headers, which is where it looks on start. Offsets the
// embedded log lost (damage) are not in Kafka: a table that had not read
// past such a range is refused, so a loss is never passed over silently.

// MigrateReport says what MigrateLog did.
type MigrateReport struct {
	Schemas int         // schema versions registered
	Topics  []TopicCopy // topics copied
	Tables  []*iceberg.OffsetsMove
}

// TopicCopy is one copied topic: records per partition.
type TopicCopy struct {
	Topic   string
	Records []int64
}

// MigrateLog copies the embedded log at logDir ("" means
// <data_dir>/log) into the Kafka cluster cfg names and moves the tables'
// offsets (see above); progress goes to out.
// REQUIRES: the pipeline is stopped (the embedded log's lock says so).
func MigrateLog(ctx context.Context, cfg *config.Config, logDir string, out io.Writer, logger *slog.Logger) (*MigrateReport, error) {
	if cfg.Log.Backend != "kafka" || cfg.Log.Kafka == nil || cfg.SchemaRegistry == nil {
		return nil, errors.New("cdcd log migrate: the config must name the target: set log.backend: kafka with log.kafka and schema_registry (the embedded log stays where data_dir says, or give --log-dir)")
	}
	if logDir == "" {
		logDir = filepath.Join(cfg.DataDir, "log")
	}
	src, err := log.Open(logDir, log.Options{}, logger.With("component", "embedded log"))
	if err != nil {
		return nil, fmt.Errorf("cdcd log migrate: open the embedded log %s (the pipeline must be stopped): %w", logDir, err)
	}
	defer src.Close()
	opts, err := kafkaOptions(cfg.Log.Kafka)
	if err != nil {
		return nil, err
	}
	opts.TransactionalID = "" // the copy is checked by counting, and must not fence the source
	dst, err := kafka.Open(ctx, opts, logger.With("component", "kafka"))
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	m := &migration{cfg: cfg, src: src, dst: dst, out: out, ids: map[uint32]uint32{}, ranks: map[string][][]int64{}}
	if err := m.schemas(ctx); err != nil {
		return nil, err
	}
	topics, err := src.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range topics {
		if t == TopicSchemas || t == log.OffsetsTopic || strings.HasPrefix(t, "__") {
			continue
		}
		if err := m.copyTopic(ctx, t); err != nil {
			return nil, err
		}
	}
	if err := m.tables(ctx); err != nil {
		return nil, err
	}
	return &m.report, nil
}

type migration struct {
	cfg    *config.Config
	src    *log.Embedded
	dst    *kafka.Log
	out    io.Writer
	reg    *schema.Registry
	remote *schema.Remote
	ids    map[uint32]uint32 // embedded schema id -> external
	// ranks: per topic and partition, the embedded offsets copied, in
	// order; a record's Kafka offset is its index.
	ranks  map[string][][]int64
	lost   map[string][][]log.LostRange
	report MigrateReport
}

// schemas registers the embedded registry's live versions externally.
func (m *migration) schemas(ctx context.Context) error {
	var err error
	if m.reg, err = schema.OpenRegistry(ctx, schemaStore{m.src}); err != nil {
		return err
	}
	r := m.cfg.SchemaRegistry
	if m.remote, err = schema.NewRemote(schema.RemoteConfig{URL: r.URL, Username: r.Username, Password: r.Password}); err != nil {
		return err
	}
	for _, subject := range m.reg.Subjects() {
		vs, err := m.reg.Versions(subject)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if _, err := m.register(ctx, v); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(m.out, "schemas: %d versions registered at %s\n", m.report.Schemas, r.URL)
	return nil
}

// register registers v externally (accepting it if the external level
// refuses it: the embedded registry had accepted it) and notes its new id.
func (m *migration) register(ctx context.Context, v schema.SubjectVersion) (uint32, error) {
	id, err := m.remote.Register(ctx, v.Subject, v.Schema)
	var ie *schema.IncompatibleError
	if errors.As(err, &ie) {
		var sv schema.SubjectVersion
		sv, err = m.remote.Accept(ctx, v.Subject)
		id = sv.ID
	}
	if err != nil {
		return 0, fmt.Errorf("cdcd log migrate: register %s version %d (id %d) in the external registry: %w", v.Subject, v.Version, v.ID, err)
	}
	m.ids[v.ID] = id
	m.report.Schemas++
	return id, nil
}

// reframe returns b with the schema id of its Confluent frame replaced by
// the external one; b itself when it is not framed by a known schema. A
// schema whose versions were all deleted from the embedded registry is
// registered under subject (the record's topic and part, Confluent's
// TopicNameStrategy).
func (m *migration) reframe(ctx context.Context, b []byte, subject string) ([]byte, error) {
	if len(b) < 5 || b[0] != 0 {
		return b, nil
	}
	old := binary.BigEndian.Uint32(b[1:5])
	id, ok := m.ids[old]
	if !ok {
		text, err := m.reg.SchemaByID(old)
		if err != nil {
			return b, nil // not a schema id of this registry: not a frame
		}
		v := schema.SubjectVersion{Subject: subject, ID: old, Schema: text}
		if uses, err := m.reg.Usages(old); err == nil && len(uses) > 0 {
			v = uses[0]
		}
		if id, err = m.register(ctx, v); err != nil {
			return nil, err
		}
	}
	out := append([]byte(nil), b...)
	binary.BigEndian.PutUint32(out[1:5], id)
	return out, nil
}

// copyTopic copies topic into Kafka (created like the embedded one, or an
// empty one of the same shape).
func (m *migration) copyTopic(ctx context.Context, topic string) error {
	info, err := m.src.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	if err := m.emptyTarget(ctx, topic, info); err != nil {
		return err
	}
	tc := TopicCopy{Topic: topic, Records: make([]int64, len(info.Partitions))}
	m.ranks[topic] = make([][]int64, len(info.Partitions))
	if m.lost == nil {
		m.lost = map[string][][]log.LostRange{}
	}
	m.lost[topic] = make([][]log.LostRange, len(info.Partitions))
	for _, p := range info.Partitions {
		m.lost[topic][p.Partition] = p.Lost
		ranks, err := m.copyPartition(ctx, topic, p)
		if err != nil {
			return err
		}
		m.ranks[topic][p.Partition] = ranks
		tc.Records[p.Partition] = int64(len(ranks))
	}
	// Kafka must hold exactly the copy, numbered from 0.
	got, err := m.dst.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	for _, p := range got.Partitions {
		if p.Start != 0 || p.End != tc.Records[p.Partition] {
			return fmt.Errorf("cdcd log migrate: %s/%d holds offsets [%d, %d) in Kafka after copying %d records: something else writes it; delete the topic and run the migration again",
				topic, p.Partition, p.Start, p.End, tc.Records[p.Partition])
		}
	}
	m.report.Topics = append(m.report.Topics, tc)
	var n int64
	for _, c := range tc.Records {
		n += c
	}
	fmt.Fprintf(m.out, "topic %s: %d records in %d partitions copied\n", topic, n, len(tc.Records))
	return nil
}

// emptyTarget creates topic in Kafka like info, or checks that the one
// there has its partitions and no records.
func (m *migration) emptyTarget(ctx context.Context, topic string, info log.TopicInfo) error {
	err := m.dst.CreateTopic(ctx, topic, info.Config)
	if err == nil {
		return nil
	}
	if !errors.Is(err, log.ErrTopicExists) {
		return fmt.Errorf("cdcd log migrate: create %s in Kafka: %w", topic, err)
	}
	got, err := m.dst.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	if len(got.Partitions) != len(info.Partitions) {
		return fmt.Errorf("cdcd log migrate: %s has %d partitions in Kafka and %d in the embedded log: delete it in Kafka (the copy creates it) and run the migration again",
			topic, len(got.Partitions), len(info.Partitions))
	}
	for _, p := range got.Partitions {
		if p.End > 0 {
			return fmt.Errorf("cdcd log migrate: %s/%d already holds offsets up to %d in Kafka: the copy goes into new or empty topics only; delete the topic in Kafka and run the migration again",
				topic, p.Partition, p.End)
		}
	}
	return nil
}

// copyPartition copies one partition in offset order and returns the
// embedded offsets copied. Lost ranges are stepped over (tables that need
// them are refused in tables).
func (m *migration) copyPartition(ctx context.Context, topic string, p log.PartitionInfo) ([]int64, error) {
	var ranks []int64
	for off := p.Start; off < p.End; {
		recs, err := m.src.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{MaxBytes: 4 << 20})
		var dl *log.DataLossError
		if errors.As(err, &dl) && len(recs) == 0 {
			off = dl.To
			continue
		}
		if err != nil && len(recs) == 0 {
			return nil, fmt.Errorf("cdcd log migrate: read %s/%d at %d: %w", topic, p.Partition, off, err)
		}
		if len(recs) == 0 {
			break
		}
		batch := make([]log.Record, len(recs))
		for i, r := range recs {
			if r.Key, err = m.reframe(ctx, r.Key, topic+"-key"); err != nil {
				return nil, err
			}
			if r.Value, err = m.reframe(ctx, r.Value, topic+"-value"); err != nil {
				return nil, err
			}
			r.Partition = p.Partition
			batch[i] = r
			ranks = append(ranks, r.Offset)
		}
		if err := m.dst.Produce(ctx, topic, batch); err != nil {
			return nil, fmt.Errorf("cdcd log migrate: write %s/%d: %w", topic, p.Partition, err)
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return ranks, nil
}

// kafkaOffset is the Kafka offset that takes the place of the embedded
// next offset next in topic's partition p: the number of copied records
// before it. A lost range at or after next is refused: the reader never
// got those records, and Kafka would not tell it.
func (m *migration) kafkaOffset(topic string, p int, next int64) (int64, error) {
	for _, r := range m.lost[topic][p] {
		if next < r.To {
			return 0, fmt.Errorf("partition %d of %s lost offsets [%d, %d) (%s) that it has not read (it is at %d): re-snapshot it before the move (cdcd snapshot -c FILE --replace TABLE), or after it",
				p, topic, r.From, r.To, r.Reason, next)
		}
	}
	ranks := m.ranks[topic][p]
	return int64(sort.Search(len(ranks), func(i int) bool { return ranks[i] >= next })), nil
}

// tables moves every table's offsets, and the sink group's.
func (m *migration) tables(ctx context.Context) error {
	cat, err := OpenCatalog(ctx, m.cfg)
	if err != nil {
		return err
	}
	if c, ok := cat.(io.Closer); ok {
		defer c.Close()
	}
	ice := m.cfg.Sink.Iceberg
	topicOf := func(ns, tbl string) string { return (&Daemon{cfg: m.cfg}).topicOf(ns, tbl) }
	group := "cdcd-sink-" + m.cfg.Pipeline
	for _, name := range m.cfg.Source.TableNames() {
		topic := topicOf(splitTable(name))
		from, err := m.src.DescribeTopic(ctx, topic)
		if err != nil {
			continue // never created: nothing to move
		}
		to, err := m.dst.DescribeTopic(ctx, topic)
		if err != nil {
			return err
		}
		ns, tbl := ice.TableIdent(name)
		mv, err := iceberg.MoveOffsets(ctx, cat, table.Identifier{ns, tbl}, m.cfg.Pipeline, len(from.Partitions), from.ID, to.ID,
			func(p int, next int64) (int64, error) { return m.kafkaOffset(topic, p, next) })
		if err != nil {
			return fmt.Errorf("cdcd log migrate: %w", err)
		}
		m.report.Tables = append(m.report.Tables, mv)
		if mv.To == nil {
			fmt.Fprintf(m.out, "table %s: no offsets yet (it reads %s from the start)\n", mv.Table, topic)
		} else {
			fmt.Fprintf(m.out, "table %s: offsets %v (embedded %s) -> %v (Kafka %s)\n", mv.Table, mv.From, from.ID, mv.To, to.ID)
		}
		m.moveGroup(ctx, group, topic)
	}
	return nil
}

// moveGroup moves group's committed offsets in topic (they feed lag
// metrics only, so a failure is reported, not fatal).
func (m *migration) moveGroup(ctx context.Context, group, topic string) {
	offs, err := m.src.CommittedOffsets(ctx, group, topic)
	if err != nil || len(offs) == 0 {
		return
	}
	moved := map[int32]int64{}
	for p, next := range offs {
		if o, err := m.kafkaOffset(topic, int(p), next); err == nil {
			moved[p] = o
		}
	}
	if err := m.dst.CommitOffsets(ctx, group, topic, moved); err != nil {
		fmt.Fprintf(m.out, "group %s on %s: offsets not moved (%v); the sink commits them again\n", group, topic, err)
	}
}
