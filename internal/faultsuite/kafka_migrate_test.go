package faultsuite

import (
	"os"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	sinkice "github.com/cdcd-dev/cdcd/sink/iceberg"
)

// summaryOf is the current snapshot's summary of the mirror of src.
func summaryOf(p *pipeline, src string) map[string]string {
	cat := p.openCatalog()
	defer closeCatalog(cat)
	tbl := p.icebergTable(cat, src)
	return map[string]string(tbl.CurrentSnapshot().Summary.Properties)
}

// TestKafkaLogMigrate: a pipeline that ran on the embedded log moves to
// Kafka with cdcd log migrate (the config switched to Kafka): the topics
// are copied with their schemas registered in the external registry, each
// table's offsets are moved to Kafka's (a row-less snapshot naming the
// Kafka topic), and the pipeline goes on on Kafka without a re-snapshot:
// the source loads nothing again, no table pauses, and after more changes
// every mirror equals its source. A second migration is refused, naming
// the topic that already holds records.
func TestKafkaLogMigrate(t *testing.T) {
	t.Parallel()
	brokers, _ := kafkatest.Brokers(t)
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text, n int);
		      CREATE TABLE b (id int PRIMARY KEY, v text, n int);
		      INSERT INTO a SELECT g, 'a' || g, g FROM generate_series(1, 1500) g;
		      INSERT INTO b SELECT g, 'b' || g, g FROM generate_series(1, 500) g;`,
		Tables: []string{"public.a", "public.b"}, Partitions: 3,
	})
	p.start()
	p.waitCaughtUp()
	p.exec(`UPDATE a SET v = v || 'x' WHERE id % 3 = 0`)
	p.exec(`DELETE FROM b WHERE id % 5 = 0`)
	p.exec(`ALTER TABLE a ADD COLUMN note text`)
	p.exec(`INSERT INTO a (id, v, n, note) SELECT g, 'new', g, 'n' || g FROM generate_series(2001, 2300) g`)
	p.waitCaughtUp()
	p.stop()
	before := map[string]map[string]string{"public.a": summaryOf(p, "public.a"), "public.b": summaryOf(p, "public.b")}

	registry := testRegistry(t)
	p.exec(`INSERT INTO b VALUES (9001, 'while stopped', 1)`) // read by the source on Kafka
	cfg := kafkaConfig(t, p, brokers, registry)
	if err := os.WriteFile(p.CfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := p.cdcd("log", "migrate", "-c", p.CfgPath)
	if code != 0 {
		t.Fatalf("cdcd log migrate: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("cdcd log migrate:\n%s", out)
	for _, want := range []string{"topic fault.public.a:", "table cdc.a: offsets", "table cdc.b: offsets", "schemas:"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate's output lacks %q", want)
		}
	}
	for src, old := range before {
		now := summaryOf(p, src)
		if now["cdcd.topic-id"] == "" || now["cdcd.topic-id"] == old["cdcd.topic-id"] || now["cdcd.rows"] != "0" {
			t.Errorf("%s after the move: summary %v, want a row-less snapshot naming the Kafka topic (was %s)", src, now, old["cdcd.topic-id"])
		}
		if now[sinkice.PropSourcePosition] != old[sinkice.PropSourcePosition] {
			t.Errorf("%s: source position %s after the move, was %s", src, now[sinkice.PropSourcePosition], old[sinkice.PropSourcePosition])
		}
	}

	p.start()
	p.exec(`UPDATE a SET note = 'after' WHERE id % 7 = 0`)
	p.exec(`INSERT INTO b SELECT g, 'k', g FROM generate_series(501, 700) g`)
	p.exec(`DELETE FROM a WHERE id % 11 = 0`)
	st := p.waitCaughtUp()
	if st.Source.SnapshotRows != 0 {
		t.Errorf("the source loaded %d rows again on Kafka: the move should need no re-snapshot", st.Source.SnapshotRows)
	}
	p.stop()
	p.requireMirror()

	out, errOut, code = p.cdcd("log", "migrate", "-c", p.CfgPath)
	if code == 0 || !strings.Contains(errOut, "already holds offsets") {
		t.Errorf("a second migration: exit %d, stderr %q; want a refusal naming the topic", code, errOut)
	}
}
