package log

import "time"

// ExpiresAt tells when age retention may remove the record at offset of a
// topic's partition: the time its segment's newest record passes the
// topic's Retention (a closed segment goes at the cleaner's next run after
// that; the active one once it is closed). ok is false when nothing will
// remove it by age: the topic keeps records forever or is compacted, the
// offset is not held, or its segment holds no timestamp. Size retention
// (RetentionBytes) is not foreseen here.
func (l *Embedded) ExpiresAt(topic string, partition int32, offset int64) (at time.Time, ok bool) {
	t, err := l.lookup(topic)
	if err != nil || t.cfg.Retention <= 0 || t.cfg.Cleanup == CleanupCompact {
		return time.Time{}, false
	}
	if partition < 0 || int(partition) >= len(t.parts) {
		return time.Time{}, false
	}
	p := t.parts[partition]
	p.mu.Lock()
	defer p.mu.Unlock()
	start, end := p.boundsLocked()
	if offset < start || offset >= end {
		return time.Time{}, false
	}
	s := p.segs[segmentFor(p.segs, offset)]
	if s.maxTs == noTimestamp {
		return time.Time{}, false
	}
	return time.UnixMilli(s.maxTs).Add(t.cfg.Retention), true
}
