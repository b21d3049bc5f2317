package postgres

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/internal/failpoint/fptest"
	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
)

// This file runs the reader the way the daemon does, into the embedded
// log, for the kill -9, memory and benchmark tests: logEmitter encodes
// changes as the daemon's emitter does (Avro key and envelope, the
// position header, partitions by key, the per-partition dedupe), and
// logState keeps the reader's state in a compacted topic of the same log.
// It is a model: the daemon's emitter also registers schemas, masks, holds
// paused tables and writes more headers, and daemon's BenchmarkLoadIntoLog
// measures the load through it.

const (
	headerPos   = "cdcd.pos"
	stateTopic  = "_state"
	topicPrefix = "cdc."
)

// logEmitter appends changes to the log, one topic per table.
type logEmitter struct {
	lg    log.Log
	parts int32
	last  map[string][]source.Position // topic -> partition -> newest stored
	buf   []byte

	names             map[*schema.Table]string
	one               [1]int32
	pipe              source.Pipeline
	produced, dropped int64         // written by the pipeline: read after Sync
	produceTime       time.Duration // in Produce
}

var _ source.Tracker = (*logEmitter)(nil)

func newLogEmitter(lg log.Log, parts int32) *logEmitter {
	return &logEmitter{lg: lg, parts: parts, last: map[string][]source.Position{}, names: map[*schema.Table]string{}}
}

// topic makes sure a table's topic exists and knows its newest positions.
func (e *logEmitter) topic(ctx context.Context, t *schema.Table) (string, []source.Position, error) {
	if name, ok := e.names[t]; ok {
		return name, e.last[name], nil
	}
	name := topicPrefix + t.QualifiedName()
	if last, ok := e.last[name]; ok {
		e.names[t] = name
		return name, last, nil
	}
	err := e.lg.CreateTopic(ctx, name, log.TopicConfig{Partitions: e.parts})
	if err != nil && !errors.Is(err, log.ErrTopicExists) {
		return "", nil, err
	}
	last, err := lastPositions(ctx, e.lg, name)
	if err != nil {
		return "", nil, err
	}
	e.last[name] = last
	e.names[t] = name
	return name, last, nil
}

// lastPositions reads the position of the last record of every partition.
func lastPositions(ctx context.Context, lg log.Log, topic string) ([]source.Position, error) {
	info, err := lg.DescribeTopic(ctx, topic)
	if err != nil {
		return nil, err
	}
	last := make([]source.Position, len(info.Partitions))
	for _, p := range info.Partitions {
		if p.End <= p.Start {
			continue
		}
		recs, err := lg.Fetch(ctx, topic, p.Partition, p.End-1, log.FetchOptions{MaxBytes: 1})
		if err != nil {
			return nil, err
		}
		if len(recs) > 0 {
			last[p.Partition] = source.Position(recs[len(recs)-1].Header(headerPos))
		}
	}
	return last, nil
}

func (e *logEmitter) Emit(ctx context.Context, batch []source.Change) error {
	if err := e.Submit(ctx, batch); err != nil {
		return err
	}
	return e.Sync(ctx)
}

func (e *logEmitter) Sync(ctx context.Context) error { return e.pipe.Wait(ctx) }

// SubmitTracked is Submit returning the batch's number (source.Tracker).
func (e *logEmitter) SubmitTracked(ctx context.Context, batch []source.Change) (uint64, error) {
	if err := e.Submit(ctx, batch); err != nil {
		return 0, err
	}
	return e.pipe.Queued(), nil
}

// Durable returns the newest batch durable with all before it.
func (e *logEmitter) Durable() (uint64, error) { return e.pipe.Done() }

// Submit encodes batch and queues its append behind the earlier ones.
func (e *logEmitter) Submit(ctx context.Context, batch []source.Change) error {
	byTopic := map[string][]log.Record{}
	newest := map[string][]source.Position{}
	var order []string
	arena := make([]byte, 0, 256*len(batch)) // the batch's keys and values
	cut := func(start int) []byte { return arena[start:len(arena):len(arena)] }
	headers := make([]log.Header, len(batch))
	now := time.Now().UnixMilli()
	for i := range batch {
		c := &batch[i]
		headers[i] = log.Header{Key: headerPos, Value: c.Pos}
		name, last, err := e.topic(ctx, c.Table)
		if err != nil {
			return err
		}
		env := schema.Envelope{Before: c.Before, After: c.After, Op: byte(c.Op), TsMs: now,
			Source: schema.SourceInfo{Connector: "postgresql", TsMs: c.CommitTime.UnixMilli(), Schema: c.Table.Namespace,
				Table: c.Table.Name, TxID: c.TxID, LSN: c.LSN, Position: c.Pos}}
		start := len(arena)
		if arena, err = schema.AppendEnvelope(schema.AppendFrame(arena, 1), c.Table, &env); err != nil {
			return err
		}
		value := cut(start)
		var key []byte
		var parts []int32
		if c.Op == source.OpTruncate {
			for p := range e.parts {
				parts = append(parts, p)
			}
		} else {
			start = len(arena)
			row := c.After
			if row == nil {
				row = c.Before
			}
			if arena, err = schema.AppendKey(schema.AppendFrame(arena, 1), c.Table, row); err != nil {
				return err
			}
			key = cut(start)
			parts = append(e.one[:0], log.PartitionFor(key, e.parts))
		}
		nw := newest[name]
		if nw == nil {
			nw = make([]source.Position, e.parts)
			newest[name] = nw
		}
		for _, p := range parts {
			if last[p] != nil && c.Pos.Compare(last[p]) <= 0 {
				e.dropped++
				continue
			}
			recs, ok := byTopic[name]
			if !ok {
				order = append(order, name)
				recs = make([]log.Record, 0, len(batch))
			}
			byTopic[name] = append(recs, log.Record{Key: key, Value: value, Partition: p,
				Headers: headers[i : i+1 : i+1], Timestamp: c.CommitTime})
			nw[p] = c.Pos
		}
	}
	for _, name := range order {
		for p, pos := range newest[name] {
			if pos != nil {
				e.last[name][p] = pos
			}
		}
	}
	return e.pipe.Go(ctx, func() error {
		t0 := time.Now()
		defer func() { e.produceTime += time.Since(t0) }()
		for _, name := range order {
			if err := e.lg.Produce(ctx, name, byTopic[name]); err != nil {
				return err
			}
			e.produced += int64(len(byTopic[name]))
		}
		return nil
	})
}

// logState is the reader's State in a compacted topic, as the daemon keeps it.
type logState struct {
	lg     log.Log
	mu     sync.Mutex
	values map[string][]byte
}

func openLogState(ctx context.Context, lg log.Log) (*logState, error) {
	err := lg.CreateTopic(ctx, stateTopic, log.TopicConfig{Partitions: 1, Cleanup: log.CleanupCompact})
	if err != nil && !errors.Is(err, log.ErrTopicExists) {
		return nil, err
	}
	s := &logState{lg: lg, values: map[string][]byte{}}
	err = readTopic(ctx, lg, stateTopic, func(r log.Record) error {
		s.values[string(r.Key)] = r.Value
		return nil
	})
	return s, err
}

func (s *logState) Load(_ context.Context, k string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.values[k], nil
}

func (s *logState) Save(ctx context.Context, k string, v []byte) error {
	if err := s.lg.Produce(ctx, stateTopic, []log.Record{{Key: []byte(k), Value: v, Partition: 0}}); err != nil {
		return err
	}
	s.mu.Lock()
	s.values[k] = v
	s.mu.Unlock()
	return nil
}

// readTopic calls fn for every record of every partition of a topic.
func readTopic(ctx context.Context, lg log.Log, topic string, fn func(log.Record) error) error {
	info, err := lg.DescribeTopic(ctx, topic)
	if err != nil {
		return err
	}
	for _, p := range info.Partitions {
		for off := p.Start; off < p.End; {
			recs, err := lg.Fetch(ctx, topic, p.Partition, off, log.FetchOptions{MaxBytes: 4 << 20})
			if err != nil {
				return err
			}
			if len(recs) == 0 {
				break
			}
			for _, r := range recs {
				if err := fn(r); err != nil {
					return err
				}
				off = r.Offset + 1
			}
		}
	}
	return nil
}

// childEnv carries the configuration of a reader process (JSON).
const childEnv = "CDCD_PG_READER_CHILD"

// childConfig configures a reader process.
type childConfig struct {
	Reader     Config
	Dir        string // the log is Dir/log
	Partitions int32
}

// runChild runs a reader into the log until SIGTERM; TestMain calls it in
// a re-executed test binary.
func runChild(raw string) int {
	var cc childConfig
	if err := json.Unmarshal([]byte(raw), &cc); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { // belt and braces: stop when the test binary is gone
		parent := os.Getppid()
		for ctx.Err() == nil && os.Getppid() == parent {
			time.Sleep(200 * time.Millisecond)
		}
		stop()
	}()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	lg, err := log.Open(filepath.Join(cc.Dir, "log"), log.Options{CleanupInterval: -1}, logger)
	if err != nil {
		logger.Error("open log", "err", err)
		return 1
	}
	defer lg.Close()
	st, err := openLogState(ctx, lg)
	if err != nil {
		logger.Error("open state", "err", err)
		return 1
	}
	err = New(cc.Reader, st, logger).Run(ctx, newLogEmitter(lg, cc.Partitions))
	if err != nil && ctx.Err() == nil {
		logger.Error("run", "err", err)
		return 1
	}
	return 0
}

// readerProc is a reader running in a child process.
type readerProc struct {
	cmd  *exec.Cmd
	done chan error
}

// startChild starts a reader process writing its log to logFile.
func startChild(t *testing.T, cc childConfig, logFile *os.File, env ...string) *readerProc {
	t.Helper()
	raw, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Args[0]
	if fptest.Arms(env) {
		bin = fptest.TestBinary(t)
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+string(raw)), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The child dies with the test binary (a timeout, a crash): the kernel
	// sends SIGKILL when the thread that started it exits, so that thread
	// stays locked until the child is gone (go.dev/issue/27505).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &readerProc{cmd: cmd, done: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.done <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *readerProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func (p *readerProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("reader process: %v", err)
	}
}

// peakRSS returns a process's VmHWM in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range splitLines(string(b)) {
		var kb int64
		if n, _ := fmt.Sscanf(line, "VmHWM: %d kB", &kb); n == 1 {
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != '\n' {
			i++
		}
		out = append(out, s[:i])
		if i < len(s) {
			i++
		}
		s = s[i:]
	}
	return out
}

// durable returns the records in the log (opened read-only) of topic, by
// partition, and the LSN of the newest position stored in any partition.
func durable(ctx context.Context, dir, topic string) (recs [][]log.Record, newest uint64, err error) {
	lg, err := log.Open(filepath.Join(dir, "log"), log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		return nil, 0, err
	}
	defer lg.Close()
	info, err := lg.DescribeTopic(ctx, topic)
	if errors.Is(err, log.ErrUnknownTopic) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	recs = make([][]log.Record, len(info.Partitions))
	err = readTopic(ctx, lg, topic, func(r log.Record) error {
		recs[r.Partition] = append(recs[r.Partition], r)
		if p := source.Position(r.Header(headerPos)); len(p) >= 8 {
			newest = max(newest, uint64FromPos(p))
		}
		return nil
	})
	return recs, newest, err
}

// newestLSN returns the LSN of the newest position stored in the last
// record of any partition (cheap: one record per partition).
func newestLSN(ctx context.Context, dir, topic string) (uint64, error) {
	lg, err := log.Open(filepath.Join(dir, "log"), log.Options{ReadOnly: true, CleanupInterval: -1}, nil)
	if err != nil {
		return 0, err
	}
	defer lg.Close()
	last, err := lastPositions(ctx, lg, topic)
	if errors.Is(err, log.ErrUnknownTopic) {
		return 0, nil
	}
	var newest uint64
	for _, p := range last {
		if len(p) >= 8 {
			newest = max(newest, uint64FromPos(p))
		}
	}
	return newest, err
}

func uint64FromPos(p source.Position) uint64 { return binary.BigEndian.Uint64(p) }
