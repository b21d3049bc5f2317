package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
)

// TestKafkaKillNine: the daemon on kfake (transactional) with an external
// registry is killed with SIGKILL four times mid-workload while kfake
// moves partition leaders and answers produce requests with timeouts
// (after applying them) and fetches with NOT_LEADER; every change lands
// in the changelog exactly once, in order per key.
func TestKafkaKillNine(t *testing.T) {
	t.Parallel()
	brokers, kc := kafkatest.Fake(t)
	dsn := pgtest.NewDB(t)
	names := pgtest.Names(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), workloadDDL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	admin := freeAddr(t)
	cfgPath := writeConfig(t, dir, dsn, names.Slot, admin)
	kafkaConfig(t, cfgPath, brokers, externalRegistry(t))
	logFile, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("daemon log:\n%s", b)
		}
	}()
	m := newModel(17)
	work := make(chan error, 1)
	var stopped atomic.Bool
	c := startChild(t, cfgPath, admin, logFile)
	waitFor(t, "first status", func() bool { st, err := c.status(); return err == nil && st.Source.Flushed > 0 }, c.done)
	go func() {
		defer close(work)
		for !stopped.Load() {
			if _, err := m.run(context.Background(), conn, 1, 2*time.Millisecond); err != nil {
				work <- err
				return
			}
		}
	}()
	const kills = 4
	var faults []*kfake.FaultHandle
	for i := 0; i < kills; i++ {
		topic := []string{"e2e.public.acct", "e2e.public.kv"}[i%2]
		faults = append(faults,
			kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: 2}),
			kc.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 2}))
		for p := int32(0); p < 4; p++ {
			if err := kc.MoveTopicPartition(topic, p, (kc.LeaderFor(topic, p)+1)%3); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Duration(400+i*250) * time.Millisecond)
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-c.done
		fmt.Fprintf(logFile, "---- test: killed with SIGKILL (%d/%d)\n", i+1, kills)
		c = startChild(t, cfgPath, admin, logFile)
	}
	stopped.Store(true)
	if err := <-work; err != nil {
		t.Fatal(err)
	}
	lsn, err := m.run(t.Context(), conn, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "caught up", func() bool {
		st, err := c.status()
		return err == nil && st.CaughtUp(lsn)
	}, c.done)
	// The admin listener passes the registry API on to the external registry.
	resp, err := http.Get("http://" + admin + "/subjects")
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	if err := json.NewDecoder(resp.Body).Decode(&subjects); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !slices.Contains(subjects, "e2e.public.acct-value") {
		t.Errorf("/subjects through the admin listener = %v", subjects)
	}
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-c.done; err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	hits := 0
	for _, f := range faults {
		hits += f.Hits()
	}
	if hits == 0 {
		t.Error("no injected broker fault was hit")
	}
	verify(t, dir, m)
	t.Logf("%d broker faults hit", hits)
}
