package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// Changes is the pipeline's log, as the reconcile reads it.
type Changes interface {
	// Describe returns the topic as it is now (a reader of a log another
	// process writes sees the records appended since it last looked).
	Describe(ctx context.Context, topic string) (log.TopicInfo, error)
	Fetch(ctx context.Context, topic string, partition int32, offset int64, opts log.FetchOptions) ([]log.Record, error)
	// SchemaByID returns the registry's schema of an id.
	SchemaByID(id uint32) (string, error)
}

// unsettled collects the keys whose rows the source read and the mirror
// may hold at different points: changed in the log after a read began, or
// not applied to the mirror yet.
type unsettled struct {
	keys map[string]Key
	all  bool // a truncate: every key
	// txs are the source transactions (low 32 bits) of the records at or
	// after the reads' Low: their keys are unsettled already.
	txs map[uint32]bool
}

func newUnsettled() *unsettled { return &unsettled{keys: map[string]Key{}, txs: map[uint32]bool{}} }

func (u *unsettled) has(k Key) bool { return u.all || u.keys[k.id()] != nil }

func (u *unsettled) add(k Key) { u.keys[k.id()] = k }

// keyReader decodes the keys of a table topic's records.
type keyReader struct {
	ch     Changes
	t      *Table
	tables map[uint32]*schema.Table
	// cols maps a schema's key value index to t's key index, per schema id.
	cols map[uint32][]int
	buf  []byte
}

func newKeyReader(ch Changes, t *Table) *keyReader {
	return &keyReader{ch: ch, t: t, tables: map[uint32]*schema.Table{}, cols: map[uint32][]int{}}
}

// read returns a record's key (nil with truncate true for a truncate;
// nil, false for a record without a change, such as a tombstone).
func (kr *keyReader) read(rec *log.Record) (Key, bool, error) {
	if rec.Value == nil {
		return nil, false, nil
	}
	id, body, err := schema.ParseFrame(rec.Value)
	if err != nil {
		return nil, false, err
	}
	st, ok := kr.tables[id]
	if !ok {
		s, err := kr.ch.SchemaByID(id)
		if err != nil {
			return nil, false, err
		}
		if st, err = schema.TableFromValueSchema(s); err != nil {
			return nil, false, err
		}
		kr.tables[id] = st
		idx := make([]int, len(st.Key))
		for i, ci := range st.Key {
			idx[i] = -1
			for j, tk := range kr.t.Key {
				if kr.t.Columns[tk].Name == st.Columns[ci].Name {
					idx[i] = j
				}
			}
		}
		kr.cols[id] = idx
	}
	info, err := schema.ScanEnvelope(st, body)
	if err != nil {
		return nil, false, err
	}
	if info.Op == 't' {
		return nil, true, nil
	}
	if rec.Key == nil {
		return nil, false, nil
	}
	_, kb, err := schema.ParseFrame(rec.Key)
	if err != nil {
		return nil, false, err
	}
	vals, err := schema.DecodeKey(st, kb)
	if err != nil {
		return nil, false, err
	}
	k := make(Key, len(kr.t.Key))
	for i, v := range vals {
		j := kr.cols[id][i]
		if j < 0 {
			return nil, false, fmt.Errorf("reconcile: %s: the log's key has a column %q the source's key lacks",
				kr.t.Name, st.Columns[st.Key[i]].Name)
		}
		kr.buf, err = appendCanon(kr.buf[:0], kr.t.Columns[kr.t.Key[j]], v)
		if err != nil {
			return nil, false, err
		}
		k[j] = string(kr.buf)
	}
	return k, false, nil
}

// collectUnsettled adds to u the key of every record of topic at or after
// position low (per partition: the records from the first one at low) and
// every record from the mirror's offsets on, up to ends, and the
// transaction of each record at or after low.
func collectUnsettled(ctx context.Context, ch Changes, kr *keyReader, topic string, info log.TopicInfo, mirror []int64, low []byte, u *unsettled) error {
	for _, p := range info.Partitions {
		from := p.End
		if int(p.Partition) < len(mirror) {
			from = min(from, mirror[p.Partition])
		}
		at, err := firstAtOrAfter(ctx, ch, topic, p, low)
		if err != nil {
			return err
		}
		from = max(min(from, at), p.Start)
		if err := scanRecords(ctx, ch, topic, p.Partition, from, p.End, func(rec *log.Record) error {
			if rec.Offset >= at {
				if x, err := strconv.ParseUint(string(rec.Header(schema.HeaderTxID)), 10, 64); err == nil {
					u.txs[uint32(x)] = true
				}
			}
			k, trunc, err := kr.read(rec)
			switch {
			case err != nil:
				return fmt.Errorf("reconcile: %s/%d@%d: %w", topic, rec.Partition, rec.Offset, err)
			case trunc:
				u.all = true
			case k != nil:
				u.add(k)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// firstAtOrAfter finds the first offset of partition p whose record's
// position is at or after pos (positions grow with offsets within a
// partition), by bisection; p.End when none is.
func firstAtOrAfter(ctx context.Context, ch Changes, topic string, p log.PartitionInfo, pos []byte) (int64, error) {
	lo, hi := p.Start, p.End
	for lo < hi {
		mid := lo + (hi-lo)/2
		recs, err := ch.Fetch(ctx, topic, p.Partition, mid, log.FetchOptions{MaxBytes: 1})
		var lost *log.DataLossError
		switch {
		case errors.As(err, &lost):
			return p.Start, nil // read from the start: never miss a change
		case err != nil:
			return 0, fmt.Errorf("reconcile: read %s/%d@%d: %w", topic, p.Partition, mid, err)
		case len(recs) == 0:
			return p.Start, nil
		}
		r := recs[0]
		if bytes.Compare(r.Header(schema.HeaderPosition), pos) >= 0 {
			hi = mid
		} else {
			lo = r.Offset + 1
		}
	}
	return lo, nil
}

// scanRecords calls fn for each record of partition p in [from, to).
func scanRecords(ctx context.Context, ch Changes, topic string, p int32, from, to int64, fn func(*log.Record) error) error {
	for off := from; off < to; {
		recs, err := ch.Fetch(ctx, topic, p, off, log.FetchOptions{MaxBytes: 1 << 20})
		var lost *log.DataLossError
		if errors.As(err, &lost) {
			return fmt.Errorf("reconcile: %s/%d: the log lost offsets %d to %d (%s): the mirror cannot be compared at them; re-snapshot the table (cdcd snapshot --replace)",
				topic, p, lost.From, lost.To, lost.Reason)
		}
		if err != nil {
			return fmt.Errorf("reconcile: read %s/%d@%d: %w", topic, p, off, err)
		}
		if len(recs) == 0 {
			return fmt.Errorf("reconcile: %s/%d@%d: no record below the end %d", topic, p, off, to)
		}
		for i := range recs {
			if recs[i].Offset >= to {
				return nil
			}
			if err := fn(&recs[i]); err != nil {
				return err
			}
			off = recs[i].Offset + 1
		}
	}
	return nil
}
