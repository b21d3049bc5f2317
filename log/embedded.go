package log

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Embedded is the log on local disk: one directory, segment files per
// partition, one writer process (guarded by a lock file) and any number of
// concurrent readers and producers inside it.
type Embedded struct {
	dir       string
	topicsDir string
	opts      Options
	logger    *slog.Logger
	lock      *dirLock
	recovery  RecoveryReport
	logID     string // identity of this log directory ("" read-only, never given one)

	adminMu sync.Mutex // serializes CreateTopic and DeleteTopic
	cleanMu sync.Mutex // one Cleanup at a time

	mu sync.RWMutex
	// Guarded by mu.
	topics map[string]*topic
	closed bool

	groups groupStore

	cleanStop chan struct{}
	cleanDone chan struct{}

	// spare holds batch buffers of earlier Produce calls for later ones
	// (see batchBufs).
	spare batchBufs
}

var (
	_ Log           = (*Embedded)(nil)
	_ AsyncProducer = (*Embedded)(nil)
)

// topic is an open topic.
type topic struct {
	name  string
	id    string // TopicInfo.ID
	cfg   TopicConfig
	dir   string
	parts []*partition
}

// Open opens (creating if needed) the embedded log in dir. It takes the
// directory's lock (a second writer gets a *LockError naming the holder),
// verifies the tail of every partition — a torn tail is truncated, damage
// in synced data quarantined and its offsets recorded as lost (see
// Recovery in the package doc) — loads consumer-group offsets and starts one flusher per
// partition and the background cleaner. With opts.ReadOnly it takes no lock
// and changes nothing on disk. logger may be nil (logs are discarded).
func Open(dir string, opts Options, logger *slog.Logger) (*Embedded, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	l := &Embedded{
		dir: dir, topicsDir: filepath.Join(dir, topicsDirName), opts: opts,
		logger: logger.With("log_dir", dir), topics: map[string]*topic{},
	}
	l.groups.offsets = map[string]map[string]map[int32]int64{}
	l.spare.now = opts.now
	if err := l.prepareDir(); err != nil {
		return nil, err
	}
	if err := l.openTopics(); err != nil {
		l.closeAll()
		return nil, err
	}
	if err := l.openOffsets(); err != nil {
		l.closeAll()
		return nil, err
	}
	if !opts.ReadOnly {
		for _, t := range l.topics {
			for _, p := range t.parts {
				p.start()
			}
		}
		l.startCleaner()
	}
	l.logger.Info("log: opened", "topics", len(l.topics), "truncations", len(l.recovery.Truncations), "losses", len(l.recovery.Losses), "options", opts.String())
	return l, nil
}

// prepareDir creates the directory and takes its lock (read-write), or
// checks that it exists (read-only).
func (l *Embedded) prepareDir() error {
	if l.opts.ReadOnly {
		if _, err := l.opts.FS.Stat(l.topicsDir); err != nil {
			return fmt.Errorf("log: open %s read-only: %w", l.dir, err)
		}
		var err error
		l.logID, err = loadLogID(l.opts.FS, l.dir, true)
		return err
	}
	if err := l.opts.FS.MkdirAll(l.topicsDir, 0o755); err != nil {
		return fmt.Errorf("log: create %s: %w", l.topicsDir, err)
	}
	// A new directory's entry is durable once its parent is synced.
	for _, d := range []string{filepath.Dir(l.dir), l.dir} {
		if err := syncDir(l.opts.FS, d); err != nil {
			return fmt.Errorf("log: sync %s: %w", d, err)
		}
	}
	// A new directory's entry is durable once its parent is synced.
	for _, d := range []string{filepath.Dir(l.dir), l.dir} {
		if err := syncDir(l.opts.FS, d); err != nil {
			return fmt.Errorf("log: sync %s: %w", d, err)
		}
	}
	lock, err := lockDir(l.opts.FS, l.dir)
	if err != nil {
		return err
	}
	l.lock = lock
	if l.logID, err = loadLogID(l.opts.FS, l.dir, false); err != nil {
		_ = lock.release()
		l.lock = nil
		return err
	}
	return nil
}

// openTopics opens every topic directory, removing leftovers of
// interrupted creates and deletes.
func (l *Embedded) openTopics() error {
	ents, err := l.opts.FS.ReadDir(l.topicsDir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) || strings.HasPrefix(name, deletedPrefix) {
			if !l.opts.ReadOnly {
				_ = l.opts.FS.RemoveAll(filepath.Join(l.topicsDir, name))
			}
			continue
		}
		if !e.IsDir() {
			continue
		}
		t, err := l.openTopic(filepath.Join(l.topicsDir, name))
		if err != nil && l.opts.ReadOnly && errors.Is(err, os.ErrNotExist) {
			continue // deleted by the writer since the listing
		}
		if err != nil {
			return err
		}
		l.topics[t.name] = t
	}
	return nil
}

func (l *Embedded) openTopic(dir string) (*topic, error) {
	st, err := readMeta(l.opts.FS, dir)
	if err != nil {
		return nil, fmt.Errorf("log: open topic %s: %w", dir, err)
	}
	if st.id == "" && !l.opts.ReadOnly {
		st.id = newID()
		if err := writeMeta(l.opts.FS, dir, st); err != nil {
			return nil, fmt.Errorf("log: open topic %s: give it an identity: %w", dir, err)
		}
		l.logger.Info("log: topic given an identity", "topic", st.name, "id", topicID(l.logID, st.id))
	}
	name, cfg := st.name, st.cfg
	t := &topic{name: name, id: topicID(l.logID, st.id), cfg: cfg, dir: dir}
	for i := int32(0); i < cfg.Partitions; i++ {
		p, found, err := openPartition(partitionConfig{
			dir: filepath.Join(dir, strconv.Itoa(int(i))), root: l.dir, topic: name, id: i,
			contiguous: cfg.Cleanup != CleanupCompact, opts: &l.opts, logger: l.logger,
		})
		if err != nil {
			t.close()
			return nil, fmt.Errorf("log: open %s/%d: %w", name, i, err)
		}
		l.recovery.Truncations = append(l.recovery.Truncations, found.truncs...)
		for _, r := range found.losses {
			l.recovery.Losses = append(l.recovery.Losses, Loss{Topic: name, Partition: i, LostRange: r})
		}
		t.parts = append(t.parts, p)
	}
	return t, nil
}

func (t *topic) close() {
	for _, p := range t.parts {
		p.close()
	}
}

// Recovery reports what Open dropped: torn tails, and offsets lost to
// damage (found at this Open; PartitionInfo.Lost has all of them).
func (l *Embedded) Recovery() RecoveryReport { return l.recovery }

// Dir is the data directory.
func (l *Embedded) Dir() string { return l.dir }

// ID is the identity of the log directory, created with it (see
// TopicInfo.ID); "" for a read-only log that no writer has given one.
func (l *Embedded) ID() string { return l.logID }

// lookup returns an open topic.
func (l *Embedded) lookup(name string) (*topic, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	t, ok := l.topics[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	return t, nil
}

func (l *Embedded) lookupPartition(name string, partition int32) (*partition, error) {
	t, err := l.lookup(name)
	if err != nil {
		return nil, err
	}
	if partition < 0 || int(partition) >= len(t.parts) {
		return nil, fmt.Errorf("%w: %s has %d partitions, not %d", ErrUnknownPartition, name, len(t.parts), partition)
	}
	return t.parts[partition], nil
}

// writable checks that the log accepts writes to a user topic.
func (l *Embedded) writable(name string) error {
	switch {
	case l.opts.ReadOnly:
		return ErrReadOnly
	case name == OffsetsTopic:
		return fmt.Errorf("%w: %q holds consumer-group offsets; use CommitOffsets", ErrReservedTopic, name)
	}
	return nil
}

// CreateTopic implements Log. The topic's directory appears atomically.
func (l *Embedded) CreateTopic(ctx context.Context, name string, cfg TopicConfig) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.writable(name); err != nil {
		return err
	}
	return l.createTopic(name, cfg)
}

func (l *Embedded) createTopic(name string, cfg TopicConfig) error {
	if err := validateTopicName(name); err != nil {
		return err
	}
	cfg, err := normalizeConfig(name, cfg)
	if err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	if _, err := l.lookup(name); err == nil {
		return fmt.Errorf("%w: %q", ErrTopicExists, name)
	} else if !errors.Is(err, ErrUnknownTopic) {
		return err
	}
	dir, err := createTopicDir(l.opts.FS, l.topicsDir, name, cfg)
	if err != nil {
		return fmt.Errorf("log: create topic %s: %w", name, err)
	}
	t, err := l.openTopic(dir)
	if err != nil {
		return err
	}
	for _, p := range t.parts {
		p.start()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		t.close()
		return ErrClosed
	}
	l.topics[name] = t
	l.logger.Info("log: topic created", "topic", name, "partitions", cfg.Partitions, "cleanup", cfg.Cleanup)
	return nil
}

// DescribeTopic implements Log.
func (l *Embedded) DescribeTopic(ctx context.Context, name string) (TopicInfo, error) {
	if err := ctx.Err(); err != nil {
		return TopicInfo{}, err
	}
	t, err := l.lookup(name)
	if err != nil {
		return TopicInfo{}, err
	}
	info := TopicInfo{Name: name, ID: t.id, Config: t.cfg, Partitions: make([]PartitionInfo, len(t.parts))}
	for i, p := range t.parts {
		info.Partitions[i] = p.info()
	}
	return info, nil
}

// ListTopics implements Log; internal topics (names beginning with "_")
// are included.
func (l *Embedded) ListTopics(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return nil, ErrClosed
	}
	names := make([]string, 0, len(l.topics))
	for name := range l.topics {
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// DeleteTopic implements Log. Pending appends finish first; long-polling
// fetchers return ErrClosed; the group offsets of the topic are deleted.
func (l *Embedded) DeleteTopic(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.writable(name); err != nil {
		return err
	}
	l.adminMu.Lock()
	defer l.adminMu.Unlock()
	l.cleanMu.Lock() // no compaction writing into the directory being removed
	defer l.cleanMu.Unlock()
	t, err := l.lookup(name)
	if err != nil {
		return err
	}
	l.mu.Lock()
	delete(l.topics, name)
	l.mu.Unlock()
	t.close()
	if err := removeTopicDir(l.opts.FS, l.topicsDir, name); err != nil {
		return fmt.Errorf("log: delete topic %s: %w", name, err)
	}
	l.logger.Info("log: topic deleted", "topic", name)
	return l.forgetTopic(ctx, name)
}

// Produce implements Log. Records for one partition in one call become one
// or more batches written in a single group commit with other callers'.
func (l *Embedded) Produce(ctx context.Context, topic string, recs []Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.writable(topic); err != nil {
		return err
	}
	t, err := l.lookup(topic)
	if err != nil {
		return err
	}
	return l.produce(ctx, t, recs)
}

// Fetch implements Log. It returns only durable records. At an offset the
// log lost (see LostRange) it returns a *DataLossError (ErrDataLost),
// after the records before it have been returned by earlier calls. A
// batch that fails its CRC in a closed segment (trusted at Open through
// its index) is repaired as Open would (quarantine, lost range) and the
// fetch retried; where that is not possible (the active segment, a
// read-only log) it is reported as a *CorruptionError (ErrCorrupt).
func (l *Embedded) Fetch(ctx context.Context, topic string, partition int32, offset int64, opts FetchOptions) ([]Record, error) {
	p, err := l.lookupPartition(topic, partition)
	if err != nil {
		return nil, err
	}
	recs, err := p.fetch(ctx, offset, opts)
	if err != nil && len(recs) == 0 && l.repairAfter(p, err) {
		recs, err = p.fetch(ctx, offset, opts)
	}
	if errors.Is(err, ErrClosed) {
		_, err = l.lookupPartition(topic, partition) // deleted while waiting?
		if err == nil {
			err = ErrClosed
		}
	}
	return recs, err
}

// OffsetForTime implements Log, at millisecond precision (the stored
// timestamps' unit): ts is rounded up to a whole millisecond.
func (l *Embedded) OffsetForTime(ctx context.Context, topic string, partition int32, ts time.Time) (int64, error) {
	p, err := l.lookupPartition(topic, partition)
	if err != nil {
		return 0, err
	}
	return p.offsetForTime(ctx, ts)
}

// Close implements Log: it stops the cleaner, lets every flusher write what
// is pending, closes the files and releases the lock. Later calls return
// ErrClosed.
func (l *Embedded) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	l.stopCleaner()
	l.adminMu.Lock() // no create or delete in flight
	defer l.adminMu.Unlock()
	l.closeAll()
	l.spare.release()
	l.logger.Info("log: closed")
	return nil
}

// closeAll closes every topic and releases the lock.
func (l *Embedded) closeAll() {
	l.mu.RLock()
	topics := make([]*topic, 0, len(l.topics))
	for _, t := range l.topics {
		topics = append(topics, t)
	}
	l.mu.RUnlock()
	for _, t := range topics {
		t.close()
	}
	_ = l.lock.release()
}
