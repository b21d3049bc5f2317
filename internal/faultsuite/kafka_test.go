package faultsuite

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcd-dev/cdcd/daemon"
	"github.com/cdcd-dev/cdcd/internal/cdcdtest"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
	"github.com/cdcd-dev/cdcd/schema"
)

// A pipeline on Kafka (kfake) run as separate processes: one source
// (role: source) and sink processes (role: sink) sharing the tables.

// roleProc is one `cdcd run` of the pipeline with its own config (role,
// data_dir, admin listener) and log file.
type roleProc struct {
	name, role string
	cfgPath    string
	admin      string
	logFile    *os.File
	child      *cdcdtest.Child
}

// rolePipeline is p run as one source process and sinks sink processes on
// the Kafka cluster at brokers, with an external registry.
type rolePipeline struct {
	p     *pipeline
	procs []*roleProc // procs[0] is the source
}

// memRegistryStore keeps the test registry's records in memory.
type memRegistryStore struct {
	mu   sync.Mutex
	recs [][2][]byte
}

func (s *memRegistryStore) Load(_ context.Context, fn func(key, value []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.recs {
		if err := fn(r[0], r[1]); err != nil {
			return err
		}
	}
	return nil
}

func (s *memRegistryStore) Append(_ context.Context, key, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, [2][]byte{key, value})
	return nil
}

// testRegistry serves a Confluent-compatible registry for the test.
func testRegistry(t *testing.T) string {
	reg, err := schema.OpenRegistry(t.Context(), &memRegistryStore{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(schema.NewHandler(reg))
	t.Cleanup(srv.Close)
	return srv.URL
}

// kafkaConfig is p's config moved to the Kafka cluster at brokers with the
// external registry at registry.
func kafkaConfig(t *testing.T, p *pipeline, brokers []string, registry string) string {
	t.Helper()
	base := p.config()
	logBlock := fmt.Sprintf("log:\n  partitions: %d\n", p.opts.Partitions)
	if !strings.Contains(base, logBlock) {
		t.Fatalf("no %q in the config", logBlock)
	}
	base = strings.Replace(base, logBlock, fmt.Sprintf("log:\n  partitions: %d\n  backend: kafka\n  kafka: {brokers: [%s], session_timeout: 2s}\n",
		p.opts.Partitions, `"`+strings.Join(brokers, `", "`)+`"`), 1)
	return base + fmt.Sprintf("schema_registry: {url: %q}\n", registry)
}

func newRolePipeline(t *testing.T, p *pipeline, brokers []string, sinks int) *rolePipeline {
	t.Helper()
	if !p.opts.CatalogOutside {
		t.Fatal("role pipelines share the catalog: set CatalogOutside")
	}
	base := kafkaConfig(t, p, brokers, testRegistry(t))
	rp := &rolePipeline{p: p}
	for i := 0; i <= sinks; i++ {
		pr := &roleProc{name: fmt.Sprintf("sink%d", i), role: "sink", admin: cdcdtest.FreeAddr(t)}
		if i == 0 {
			pr.name, pr.role = "source", "source"
		}
		dir := filepath.Join(p.Dir, pr.name)
		conf := strings.Replace(base, fmt.Sprintf("data_dir: %q", p.DataDir), fmt.Sprintf("data_dir: %q", filepath.Join(dir, "data")), 1)
		conf = strings.Replace(conf, fmt.Sprintf("listen: %q", p.Admin), fmt.Sprintf("listen: %q", pr.admin), 1)
		conf = "role: " + pr.role + "\n" + conf
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		pr.cfgPath = filepath.Join(dir, "cdcd.yaml")
		if err := os.WriteFile(pr.cfgPath, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		if pr.logFile, err = os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			t.Fatal(err)
		}
		rp.procs = append(rp.procs, pr)
	}
	// The harness reads the catalog through p's config: the source's.
	p.CfgPath = rp.procs[0].cfgPath
	t.Cleanup(func() {
		for _, pr := range rp.procs {
			if pr.child != nil {
				pr.child.Kill()
			}
			pr.logFile.Close()
			if t.Failed() {
				b, _ := os.ReadFile(pr.logFile.Name())
				if len(b) > 60_000 {
					b = b[len(b)-60_000:]
				}
				t.Logf("---- %s log (tail):\n%s", pr.name, b)
			}
		}
	})
	return rp
}

func (rp *rolePipeline) start(pr *roleProc) {
	rp.p.t.Helper()
	fmt.Fprintf(pr.logFile, "---- faultsuite: start %s\n", pr.name)
	pr.child = cdcdtest.Start(rp.p.t, binary(rp.p.t), pr.cfgPath, pr.admin, pr.logFile)
}

func (rp *rolePipeline) kill(pr *roleProc) {
	fmt.Fprintf(pr.logFile, "---- faultsuite: kill -9 %s\n", pr.name)
	pr.child.Kill()
}

func (rp *rolePipeline) stop(pr *roleProc) {
	rp.p.t.Helper()
	if err := pr.child.Cmd.Process.Signal(os.Interrupt); err != nil {
		rp.p.t.Fatal(err)
	}
	if !pr.child.Wait(60 * time.Second) {
		pr.child.Kill()
		rp.p.t.Fatalf("%s did not stop within 60s", pr.name)
	}
	if code := pr.child.ExitCode(); code != 0 {
		rp.p.t.Fatalf("%s exited with %d: %v", pr.name, code, pr.child.ExitErr())
	}
}

// statuses fetches /status of every process; ok is false if one does not
// answer.
func (rp *rolePipeline) statuses() (sts []daemon.Status, ok bool) {
	for _, pr := range rp.procs {
		if pr.child == nil || pr.child.Exited() {
			return nil, false
		}
		st, err := pr.child.Status()
		if err != nil {
			return nil, false
		}
		sts = append(sts, st)
	}
	return sts, true
}

// waitCaughtUp waits until the source has made everything committed so
// far durable and every table runs in exactly one sink process, with no
// lag; it fails on a paused table.
func (rp *rolePipeline) waitCaughtUp(timeout time.Duration) (owners map[string]string) {
	p := rp.p
	p.t.Helper()
	lsn := p.markLSN()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		sts, ok := rp.statuses()
		if !ok {
			last = "a process does not answer"
			continue
		}
		if sts[0].Source.Flushed < lsn {
			last = fmt.Sprintf("source flushed %s < %X", sts[0].Source.FlushedLSN, lsn)
			continue
		}
		owners = map[string]string{}
		done := true
		for i, st := range sts[1:] {
			for _, tb := range st.Tables {
				if tb.Paused {
					p.t.Fatalf("table %s paused in %s: %s", tb.Table, rp.procs[i+1].name, tb.PausedReason)
				}
				if prev := owners[tb.Source]; prev != "" {
					last = fmt.Sprintf("%s runs in %s and %s", tb.Source, prev, rp.procs[i+1].name)
					done = false
				}
				owners[tb.Source] = rp.procs[i+1].name
				if tb.Lag != 0 {
					last = fmt.Sprintf("%s lags %d in %s", tb.Source, tb.Lag, rp.procs[i+1].name)
					done = false
				}
			}
		}
		for _, tb := range p.opts.Tables {
			if owners[tb] == "" {
				last, done = tb+" runs nowhere", false
			}
		}
		if done {
			return owners
		}
	}
	p.t.Fatalf("timed out waiting to catch up: %s", last)
	return nil
}

// waitRunsAll waits until pr runs every table.
func (rp *rolePipeline) waitRunsAll(pr *roleProc, timeout time.Duration) {
	rp.p.t.Helper()
	pr.child.WaitUntil(rp.p.t, pr.name+" runs every table", timeout, func() bool {
		st, err := pr.child.Status()
		return err == nil && len(st.Tables) == len(rp.p.opts.Tables)
	})
}

// workload changes rows of tables a and b (id, v, n) in small transactions
// until stop, on its own connection.
func workload(t *testing.T, p *pipeline, stop *atomic.Bool) <-chan error {
	conn := p.connect()
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		r := rand.New(rand.NewPCG(7, 19))
		next := 1_000_000
		for !stop.Load() {
			tx, err := conn.Begin(p.ctx)
			if err != nil {
				errc <- err
				return
			}
			for range 1 + r.IntN(5) {
				tbl := []string{"a", "b"}[r.IntN(2)]
				var sql string
				switch r.IntN(4) {
				case 0, 1:
					next++
					sql = fmt.Sprintf("INSERT INTO %s VALUES (%d, 'w%d', %d)", tbl, next, next, r.IntN(1000))
				case 2:
					sql = fmt.Sprintf("UPDATE %s SET v = v || 'u', n = n + 1 WHERE id = %d", tbl, 1+r.IntN(next))
				default:
					sql = fmt.Sprintf("DELETE FROM %s WHERE id = %d", tbl, 1+r.IntN(next))
				}
				if _, err := tx.Exec(p.ctx, sql); err != nil {
					errc <- err
					return
				}
			}
			if err := tx.Commit(p.ctx); err != nil {
				errc <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return errc
}

// TestKafkaRolesKillNine: a source process and two sink processes of one
// pipeline run through kfake while each is killed with SIGKILL twice and
// kfake moves partition leaders, times out produce requests and answers
// fetches and group heartbeats with errors. The sink processes share the
// tables (each runs in one of them); a killed sink's tables go to the
// other (each claim a new owner epoch); every Iceberg table ends equal to
// its source: nothing lost, nothing twice.
func TestKafkaRolesKillNine(t *testing.T) {
	t.Parallel()
	brokers, kc := kafkatest.Fake(t, kfake.GroupMinSessionTimeout(time.Second))
	p := newPipeline(t, pipelineOptions{
		DDL: `CREATE TABLE a (id int PRIMARY KEY, v text, n int);
		      CREATE TABLE b (id int PRIMARY KEY, v text, n int);
		      INSERT INTO a SELECT g, 'a' || g, g FROM generate_series(1, 2000) g;
		      INSERT INTO b SELECT g, 'b' || g, g FROM generate_series(1, 2000) g;`,
		Tables: []string{"public.a", "public.b"}, Partitions: 3, CatalogOutside: true,
	})
	rp := newRolePipeline(t, p, brokers, 2)
	for _, pr := range rp.procs {
		rp.start(pr)
	}
	owners := rp.waitCaughtUp(3 * time.Minute)
	t.Logf("tables after the load: %v", owners)

	var stop atomic.Bool
	work := workload(t, p, &stop)
	var faults []*kfake.FaultHandle
	const rounds = 2
	for round := range rounds {
		for i, pr := range rp.procs {
			topic := []string{"fault.public.a", "fault.public.b"}[(round+i)%2]
			faults = append(faults,
				kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: 2}),
				kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 2}),
				kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Err: kerr.RequestTimedOut, Count: 1}))
			for part := int32(0); part < 3; part++ {
				if err := kc.MoveTopicPartition(topic, part, (kc.LeaderFor(topic, part)+1)%3); err != nil {
					t.Fatal(err)
				}
			}
			time.Sleep(time.Duration(800+300*i) * time.Millisecond)
			rp.kill(pr)
			if pr.role == "sink" {
				// The other sink process takes the killed one's tables
				// over (after its session timeout) while the writes go on.
				rp.waitRunsAll(rp.procs[3-i], 90*time.Second)
			}
			rp.start(pr)
		}
	}
	time.Sleep(time.Second)
	stop.Store(true)
	if err := <-work; err != nil {
		t.Fatal(err)
	}
	owners = rp.waitCaughtUp(4 * time.Minute)
	t.Logf("tables at the end: %v", owners)
	hits := 0
	for _, f := range faults {
		hits += f.Hits()
	}
	if hits == 0 {
		t.Error("no injected broker fault was hit")
	}
	for _, pr := range rp.procs {
		rp.stop(pr)
	}
	p.requireMirror()
	// Each table moved between the sink processes (a killed one's tables
	// went to the other, claimed with a new epoch each time).
	for _, tb := range []string{"cdc.a", "cdc.b"} {
		for _, pr := range rp.procs[1:] {
			if n := rp.claims(pr, tb); n == 0 {
				t.Errorf("%s never ran %s", pr.name, tb)
			}
		}
		cat := p.openCatalog()
		tbl := p.icebergTable(cat, "public."+tb[len("cdc."):])
		closeCatalog(cat)
		epoch := 0
		for snap := tbl.CurrentSnapshot(); snap != nil && epoch == 0; {
			epoch, _ = strconv.Atoi(snap.Summary.Properties["cdcd.owner-epoch"])
			if snap.ParentSnapshotID == nil {
				break
			}
			snap = tbl.Metadata().SnapshotByID(*snap.ParentSnapshotID)
		}
		t.Logf("%s: owner epoch %d at the end", tb, epoch)
		if epoch < 2*rounds {
			t.Errorf("%s: owner epoch %d at the end, want a claim at least at every sink kill (%d)", tb, epoch, 2*rounds)
		}
	}
	t.Logf("%d broker faults hit", hits)
}

// claims counts the times pr claimed table (its log's claim lines).
func (rp *rolePipeline) claims(pr *roleProc, table string) int {
	b, err := os.ReadFile(pr.logFile.Name())
	if err != nil {
		rp.p.t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "claimed the table") && strings.Contains(line, "table="+table+" ") {
			n++
		}
	}
	return n
}
