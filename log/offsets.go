package log

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Consumer-group offset records in OffsetsTopic. Frozen.
//
//	key:   version(1) | uvarint len | group | uvarint len | topic | partition int32 big-endian
//	value: version(1) | next offset int64 big-endian | commit time Unix ms int64 big-endian
//
// A nil value (tombstone) deletes the commit; compaction keeps the latest.
const offsetRecordVersion = 1

// groupStore holds every group's committed offsets in memory, rebuilt from
// OffsetsTopic at Open.
type groupStore struct {
	mu sync.Mutex // serializes commits so the map follows the topic's order
	// Guarded by mu: group → topic → partition → next offset.
	offsets map[string]map[string]map[int32]int64
}

func offsetKey(group, topic string, partition int32) []byte {
	k := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(group)+len(topic)+4)
	k = append(k, offsetRecordVersion)
	k = binary.AppendUvarint(k, uint64(len(group)))
	k = append(k, group...)
	k = binary.AppendUvarint(k, uint64(len(topic)))
	k = append(k, topic...)
	return binary.BigEndian.AppendUint32(k, uint32(partition))
}

var errBadOffsetRecord = errors.New("bad consumer-offset record")

func parseOffsetKey(k []byte) (group, topic string, partition int32, err error) {
	if len(k) < 1 || k[0] != offsetRecordVersion {
		return "", "", 0, errBadOffsetRecord
	}
	d := decoder{buf: k[1:]}
	str := func() (string, error) {
		n, err := d.uvarint()
		if err != nil || n > uint64(len(d.buf)-d.pos) {
			return "", errBadOffsetRecord
		}
		s := string(d.buf[d.pos : d.pos+int(n)])
		d.pos += int(n)
		return s, nil
	}
	if group, err = str(); err != nil {
		return
	}
	if topic, err = str(); err != nil {
		return
	}
	if len(d.buf)-d.pos != 4 {
		return "", "", 0, errBadOffsetRecord
	}
	return group, topic, int32(binary.BigEndian.Uint32(d.buf[d.pos:])), nil
}

func offsetValue(off int64, at time.Time) []byte {
	v := make([]byte, 0, 17)
	v = append(v, offsetRecordVersion)
	v = binary.BigEndian.AppendUint64(v, uint64(off))
	return binary.BigEndian.AppendUint64(v, uint64(at.UnixMilli()))
}

// openOffsets creates OffsetsTopic if needed and loads every commit.
func (l *Embedded) openOffsets() error {
	if _, ok := l.topics[OffsetsTopic]; !ok {
		if l.opts.ReadOnly {
			return nil
		}
		cfg := TopicConfig{Partitions: 1, Cleanup: CleanupCompact, DeleteRetention: DefaultDeleteRetention}
		cfg, _ = normalizeConfig(OffsetsTopic, cfg)
		dir, err := createTopicDir(l.opts.FS, l.topicsDir, OffsetsTopic, cfg)
		if err != nil {
			return fmt.Errorf("log: create %s: %w", OffsetsTopic, err)
		}
		t, err := l.openTopic(dir)
		if err != nil {
			return err
		}
		l.topics[OffsetsTopic] = t
	}
	p := l.topics[OffsetsTopic].parts[0]
	p.mu.Lock()
	off, end := p.boundsLocked()
	p.mu.Unlock()
	for off < end {
		recs, err := p.fetch(context.Background(), off, FetchOptions{MaxBytes: 4 << 20})
		var dl *DataLossError
		if errors.As(err, &dl) {
			// Group offsets serve lag metrics only: go on without the lost
			// commits (a group may show an older position).
			l.logger.Warn("log: consumer-group offsets lost; groups may show older positions", "from", dl.From, "to", dl.To)
			off = dl.To
			continue
		}
		if err != nil {
			return fmt.Errorf("log: load consumer offsets: %w", err)
		}
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			l.applyOffsetRecord(r)
		}
		off = recs[len(recs)-1].Offset + 1
	}
	return nil
}

// applyOffsetRecord applies one OffsetsTopic record to the map.
func (l *Embedded) applyOffsetRecord(r Record) {
	group, topic, part, err := parseOffsetKey(r.Key)
	if err != nil || (r.Value != nil && (len(r.Value) != 17 || r.Value[0] != offsetRecordVersion)) {
		l.logger.Warn("log: skipping unreadable consumer-offset record", "offset", r.Offset)
		return
	}
	g := l.groups.offsets
	if r.Value == nil {
		delete(g[group][topic], part)
		if len(g[group][topic]) == 0 {
			delete(g[group], topic)
		}
		if len(g[group]) == 0 {
			delete(g, group)
		}
		return
	}
	if g[group] == nil {
		g[group] = map[string]map[int32]int64{}
	}
	if g[group][topic] == nil {
		g[group][topic] = map[int32]int64{}
	}
	g[group][topic][part] = int64(binary.BigEndian.Uint64(r.Value[1:]))
}

// CommitOffsets implements Log. The commit is durable in OffsetsTopic when
// it returns.
func (l *Embedded) CommitOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	if group == "" {
		return fmt.Errorf("log: commit offsets: empty group name")
	}
	t, err := l.lookup(topic)
	if err != nil {
		return err
	}
	now := l.opts.now()
	recs := make([]Record, 0, len(offsets))
	for _, part := range sortedParts(offsets) {
		off := offsets[part]
		if part < 0 || int(part) >= len(t.parts) {
			return fmt.Errorf("%w: %s has %d partitions, not %d", ErrUnknownPartition, topic, len(t.parts), part)
		}
		if off < 0 {
			return fmt.Errorf("%w: commit of negative offset %d for %s/%d", ErrOffsetOutOfRange, off, topic, part)
		}
		recs = append(recs, Record{Key: offsetKey(group, topic, part), Value: offsetValue(off, now), Partition: 0})
	}
	return l.writeOffsets(ctx, recs)
}

// writeOffsets appends records to OffsetsTopic and applies them.
func (l *Embedded) writeOffsets(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	ot, err := l.lookup(OffsetsTopic)
	if err != nil {
		return err
	}
	l.groups.mu.Lock()
	defer l.groups.mu.Unlock()
	if err := l.produce(ctx, ot, recs); err != nil {
		return err
	}
	for _, r := range recs {
		l.applyOffsetRecord(r)
	}
	return nil
}

// CommittedOffsets implements Log.
func (l *Embedded) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := l.lookup(topic); err != nil {
		return nil, err
	}
	l.groups.mu.Lock()
	defer l.groups.mu.Unlock()
	out := map[int32]int64{}
	for p, off := range l.groups.offsets[group][topic] {
		out[p] = off
	}
	return out, nil
}

// ListGroups returns the names of all groups with committed offsets,
// sorted.
func (l *Embedded) ListGroups(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := l.lookup(OffsetsTopic); err != nil && !l.opts.ReadOnly {
		return nil, err
	}
	l.groups.mu.Lock()
	defer l.groups.mu.Unlock()
	names := make([]string, 0, len(l.groups.offsets))
	for g := range l.groups.offsets {
		names = append(names, g)
	}
	sort.Strings(names)
	return names, nil
}

// GroupTopics returns the topics a group has committed offsets for, sorted.
func (l *Embedded) GroupTopics(group string) []string {
	l.groups.mu.Lock()
	defer l.groups.mu.Unlock()
	var names []string
	for t := range l.groups.offsets[group] {
		names = append(names, t)
	}
	sort.Strings(names)
	return names
}

// DeleteGroup removes every committed offset of a group.
func (l *Embedded) DeleteGroup(ctx context.Context, group string) error {
	if l.opts.ReadOnly {
		return ErrReadOnly
	}
	l.groups.mu.Lock()
	var recs []Record
	for topic, parts := range l.groups.offsets[group] {
		for p := range parts {
			recs = append(recs, Record{Key: offsetKey(group, topic, p), Partition: 0})
		}
	}
	l.groups.mu.Unlock()
	return l.writeOffsets(ctx, recs)
}

// forgetTopic deletes every group's offsets for a deleted topic.
func (l *Embedded) forgetTopic(ctx context.Context, topic string) error {
	l.groups.mu.Lock()
	var recs []Record
	for group, topics := range l.groups.offsets {
		for p := range topics[topic] {
			recs = append(recs, Record{Key: offsetKey(group, topic, p), Partition: 0})
		}
	}
	l.groups.mu.Unlock()
	return l.writeOffsets(ctx, recs)
}

func sortedParts(m map[int32]int64) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	return ps
}
