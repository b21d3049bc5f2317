package log

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// partBuild collects one Produce call's records for one partition.
type partBuild struct {
	p       *partition
	b       batchBuilder
	batches [][]byte
	records int64
	req     *appendReq
	next    int64 // offset for the next record when filling in offsets
	left    int   // encoded size estimate of the records not yet added
	spare   *batchBufs
}

// batchBufs is a free list of batch buffers. Once an append is durable the
// flusher has written its batches and nothing refers to them any more, so
// the next Produce can build its batches in them: an initial load's
// batches were half of the bytes its process allocated, and the
// collections they paced a tenth of its CPU. A buffer is taken only when
// large enough; the list is short, so it holds at most a few MB.
type batchBufs struct {
	once sync.Once
	free chan []byte
}

const spareBatchBufs = 16

func (f *batchBufs) list() chan []byte {
	f.once.Do(func() { f.free = make(chan []byte, spareBatchBufs) })
	return f.free
}

// get returns an empty buffer of capacity n or more.
func (f *batchBufs) get(n int) []byte {
	select {
	case b := <-f.list():
		if cap(b) >= n {
			return b[:0]
		}
	default:
	}
	return make([]byte, 0, n)
}

// put offers b for reuse; the caller no longer refers to it.
func (f *batchBufs) put(b []byte) {
	if cap(b) > 2*softBatchBytes {
		return // a batch of one huge record: not worth keeping
	}
	select {
	case f.list() <- b:
	default:
	}
}

// add encodes a record into the current batch, starting a new batch at
// softBatchBytes. Buffers are sized from pb.left, the estimated encoded
// size of the records still to come, so they do not grow by copying.
func (pb *partBuild) add(r *Record, tsMs int64) {
	if pb.b.buf == nil || len(pb.b.buf) >= softBatchBytes {
		if pb.b.buf != nil {
			pb.batches = append(pb.batches, pb.b.finish())
		}
		pb.b.reset(pb.spare.get(batchHeaderLen + min(pb.left, softBatchBytes+encodedSize(r))))
	}
	pb.left -= encodedSize(r)
	delta := uint32(0)
	if pb.b.count > 0 {
		delta = pb.b.last + 1
	}
	pb.b.add(r, delta, tsMs)
	pb.records++
}

// produce places, encodes, enqueues and waits for recs (see Log.Produce).
func (l *Embedded) produce(ctx context.Context, t *topic, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	if err := l.placeRecords(t, recs); err != nil {
		return err
	}
	builds := l.buildBatches(t, recs)
	for _, pb := range builds {
		pb.batches = append(pb.batches, pb.b.finish())
		pb.req = newAppendReq(pb.batches, pb.records)
		if err := pb.p.enqueue(pb.req); err != nil {
			return l.appendError(t, err)
		}
		// One partition: flush inline if idle. Several: let their flushers
		// fsync in parallel.
		pb.p.flush(len(builds) == 1)
	}
	for _, pb := range builds {
		select {
		case err := <-pb.req.done:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err() // the flusher may still be writing the batches: not recycled
		}
		pb.next = pb.req.base
	}
	for _, pb := range builds {
		for i, b := range pb.batches {
			l.spare.put(b)
			pb.batches[i] = nil
		}
	}
	for i := range recs {
		pb := builds[recs[i].Partition]
		recs[i].Offset = pb.next
		pb.next++
	}
	return nil
}

// placeRecords fills in partitions and timestamps and checks sizes.
func (l *Embedded) placeRecords(t *topic, recs []Record) error {
	n := int32(len(t.parts))
	var now time.Time
	for i := range recs {
		r := &recs[i]
		if r.Partition < 0 {
			r.Partition = PartitionFor(r.Key, n)
		} else if r.Partition >= n {
			return fmt.Errorf("%w: %s has %d partitions; record %d asks for partition %d", ErrUnknownPartition, t.name, n, i, r.Partition)
		}
		if r.Timestamp.IsZero() {
			if now.IsZero() {
				now = time.UnixMilli(l.opts.now().UnixMilli())
			}
			r.Timestamp = now
		}
		if encodedSize(r) > MaxRecordBytes {
			return fmt.Errorf("%w: %s record %d is %d bytes; the limit is %d", ErrRecordTooLarge, t.name, i, encodedSize(r), MaxRecordBytes)
		}
	}
	return nil
}

// buildBatches encodes recs into batches per partition.
func (l *Embedded) buildBatches(t *topic, recs []Record) map[int32]*partBuild {
	builds := make(map[int32]*partBuild, 1)
	for i := range recs {
		r := &recs[i]
		pb := builds[r.Partition]
		if pb == nil {
			pb = &partBuild{p: t.parts[r.Partition], spare: &l.spare}
			builds[r.Partition] = pb
		}
		pb.left += encodedSize(r)
	}
	for i := range recs {
		r := &recs[i]
		builds[r.Partition].add(r, r.Timestamp.UnixMilli())
	}
	return builds
}

// appendError maps a partition closed by DeleteTopic to ErrUnknownTopic.
func (l *Embedded) appendError(t *topic, err error) error {
	if err == ErrClosed {
		if _, lerr := l.lookup(t.name); lerr != nil {
			return lerr
		}
	}
	return err
}
