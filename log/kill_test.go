package log_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/log"
)

const killChildEnv = "CDCD_LOG_KILL_CHILD_DIR"

// killValue is the deterministic value of a producer's n-th record.
func killValue(producer, n int) []byte {
	size := 10 + (producer*7919+n*104729)%1500
	v := make([]byte, size)
	copy(v, fmt.Sprintf("p%d-n%d-", producer, n))
	for i := len(fmt.Sprintf("p%d-n%d-", producer, n)); i < size; i++ {
		v[i] = byte('a' + (i+n)%26)
	}
	return v
}

// TestKillChild is the child of TestKillDuringAppend: it appends until it
// is killed, printing every acknowledged record as "ack P O producer n".
func TestKillChild(t *testing.T) {
	dir := os.Getenv(killChildEnv)
	if dir == "" {
		t.Skip("child process of TestKillDuringAppend")
	}
	ctx := context.Background()
	l, err := log.Open(dir, log.Options{SegmentBytes: 64 << 10, IndexIntervalBytes: 1024}, nil)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if err := l.CreateTopic(ctx, "t", log.TopicConfig{Partitions: 3}); err != nil && !strings.Contains(err.Error(), "exists") {
		fmt.Println("error", err)
		os.Exit(2)
	}
	round, _ := strconv.Atoi(os.Getenv("CDCD_LOG_KILL_ROUND"))
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	for p := 0; p < 4; p++ {
		go func() {
			producer := round*10 + p
			rng := rand.New(rand.NewPCG(uint64(producer), 1))
			for n := 0; ; {
				recs := make([]log.Record, 1+rng.IntN(20))
				for i := range recs {
					recs[i] = log.Record{Key: fmt.Appendf(nil, "k%d", rng.IntN(50)), Value: killValue(producer, n+i), Partition: -1}
				}
				if err := l.Produce(ctx, "t", recs); err != nil {
					fmt.Println("error", err)
					os.Exit(2)
				}
				mu.Lock()
				for i, r := range recs {
					fmt.Fprintf(out, "ack %d %d %d %d\n", r.Partition, r.Offset, producer, n+i)
				}
				out.Flush()
				mu.Unlock()
				n += len(recs)
			}
		}()
	}
	select {}
}

type ack struct {
	partition int32
	offset    int64
	producer  int
	n         int
}

// TestKillDuringAppend runs a child that appends continuously, SIGKILLs it
// at a random moment, and checks that every record the child saw
// acknowledged is in the reopened log, intact. Three rounds on one
// directory, so recovery also runs over the previous kills' tails.
func TestKillDuringAppend(t *testing.T) {
	if os.Getenv(killChildEnv) != "" {
		t.Skip("in child")
	}
	dir := t.TempDir()
	var acks []ack
	for round := 0; round < 3; round++ {
		acks = append(acks, runKilledChild(t, dir, round)...)
		l, err := log.Open(dir, log.Options{SegmentBytes: 64 << 10}, nil)
		if err != nil {
			t.Fatal(err)
		}
		verifyAcks(t, l, acks)
		t.Logf("round %d: %d acknowledged records intact; recovery %+v", round, len(acks), l.Recovery())
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func runKilledChild(t *testing.T, dir string, round int) []ack {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), killChildEnv+"="+dir, "CDCD_LOG_KILL_ROUND="+strconv.Itoa(round))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "ready" {
		_ = cmd.Process.Kill()
		t.Fatalf("child did not start: %q", sc.Text())
	}
	killAfter := time.Duration(200+rand.IntN(400)) * time.Millisecond
	timer := time.AfterFunc(killAfter, func() { _ = cmd.Process.Signal(syscall.SIGKILL) })
	defer timer.Stop()
	var acks []ack
	for sc.Scan() {
		var a ack
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %d %d %d", &a.partition, &a.offset, &a.producer, &a.n); err != nil {
			t.Fatalf("child said %q", sc.Text())
		}
		acks = append(acks, a)
	}
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, not by SIGKILL", err)
	}
	if len(acks) == 0 {
		t.Fatal("child acknowledged nothing before it was killed")
	}
	return acks
}

func verifyAcks(t *testing.T, l *log.Embedded, acks []ack) {
	t.Helper()
	ctx := context.Background()
	got := map[int32]map[int64]log.Record{}
	info, err := l.DescribeTopic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Partitions {
		got[p.Partition] = map[int64]log.Record{}
		for off := p.Start; off < p.End; {
			recs, err := l.Fetch(ctx, "t", p.Partition, off, log.FetchOptions{MaxBytes: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				got[p.Partition][r.Offset] = r
			}
			off = recs[len(recs)-1].Offset + 1
		}
	}
	for _, a := range acks {
		r, ok := got[a.partition][a.offset]
		if !ok {
			t.Fatalf("acknowledged record %d/%d (producer %d #%d) lost", a.partition, a.offset, a.producer, a.n)
		}
		if want := killValue(a.producer, a.n); string(r.Value) != string(want) {
			t.Fatalf("record %d/%d = %q, want %q", a.partition, a.offset, r.Value[:min(20, len(r.Value))], want[:20])
		}
	}
}
