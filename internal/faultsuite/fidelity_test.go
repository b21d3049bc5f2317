package faultsuite

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

// TestPipelineSubjectsKept (issue 22): the registry's HTTP API refuses to
// delete, softly or for good, the subjects of a table the running
// pipeline mirrors (Confluent's registry would let it, and a later
// version would then be registered unchecked), saying which table and
// what to do; a foreign subject follows Confluent's two-step deletion.
// The mirror goes on, across a restart, with the schemas it had; each
// delete left a tombstone in the log (log.tombstones, on by default), which
// the sink passes over.
func TestPipelineSubjectsKept(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{
		DDL:    `CREATE TABLE a (id int PRIMARY KEY, v text); INSERT INTO a SELECT g, 'x' || g FROM generate_series(1, 20) g`,
		Tables: []string{"public.a"},
	})
	p.start()
	p.waitCaughtUp()

	json := map[string]string{"Content-Type": "application/vnd.schemaregistry.v1+json"}
	_, before := p.adminRequest("GET", "/subjects/fault.public.a-value/versions/latest", nil, "")
	for _, tc := range []struct {
		method, path string
		header       map[string]string
		body         string
		code         int
		words        []string
	}{
		{"DELETE", "/subjects/fault.public.a-value", nil, "", 422, []string{"42205", "public.a", "restart cdcd"}},
		{"DELETE", "/subjects/fault.public.a-key/versions/latest", nil, "", 422, []string{"42205", "public.a"}},
		{"DELETE", "/subjects/fault.public.a-value/versions/1?permanent=true", nil, "", 422, []string{"42205"}},
		{"DELETE", "/subjects/fault.public.a-value?permanent=true", nil, "", 422, []string{"42205"}},
		{"GET", "/subjects", nil, "", 200, []string{`"fault.public.a-key"`, `"fault.public.a-value"`}},
		{"POST", "/subjects/scratch-value/versions", json, `{"schema":"\"string\""}`, 200, []string{`"id"`}},
		{"DELETE", "/subjects/scratch-value?permanent=true", nil, "", 404, []string{"40405"}},
		{"DELETE", "/subjects/scratch-value", nil, "", 200, []string{"[1]"}},
		{"GET", "/subjects?deleted=true", nil, "", 200, []string{`"scratch-value"`}},
		{"DELETE", "/subjects/scratch-value?permanent=true", nil, "", 200, []string{"[1]"}},
	} {
		code, body := p.adminRequest(tc.method, tc.path, tc.header, tc.body)
		if code != tc.code || !containsAll(body, tc.words...) {
			t.Errorf("%s %s: %d %.300s, want %d with %q", tc.method, tc.path, code, body, tc.code, tc.words)
		}
	}
	if _, after := p.adminRequest("GET", "/subjects/fault.public.a-value/versions/latest", nil, ""); after != before {
		t.Errorf("the pipeline's value subject changed: %s, was %s", after, before)
	}

	p.exec(`UPDATE a SET v = 'y' || id WHERE id <= 10; DELETE FROM a WHERE id > 15`)
	p.waitCaughtUp()
	p.requireMirror("public.a")
	p.stop()
	if n := countTombstones(t, p, "fault.public.a"); n != 5 {
		t.Errorf("the log holds %d tombstones; 5 rows were deleted", n)
	}
	p.start()
	p.exec(`ALTER TABLE a ADD COLUMN w int; INSERT INTO a VALUES (100, 'new', 1)`)
	p.waitCaughtUp()
	p.requireMirror("public.a")
}

func containsAll(s string, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
}

// countTombstones counts the records of topic without a value in the
// stopped pipeline's log.
func countTombstones(t *testing.T, p *pipeline, topic string) int {
	t.Helper()
	lg, err := log.Open(filepath.Join(p.DataDir, "log"), log.Options{ReadOnly: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(p.ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, part := range info.Partitions {
		for off := part.Start; off < part.End; {
			recs, err := lg.Fetch(p.ctx, topic, part.Partition, off, log.FetchOptions{})
			if err != nil || len(recs) == 0 {
				t.Fatalf("%s/%d at %d: %d records, %v", topic, part.Partition, off, len(recs), err)
			}
			for _, r := range recs {
				if r.Value == nil {
					n++
				}
				off = r.Offset + 1
			}
		}
	}
	return n
}
