package iceberg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/schema"
)

// Primary-key changes in upsert mode.
//
// An UPDATE that changes the key reaches the log as a delete of the old key
// A at position P-1 and an insert of the new key B at P, in the same
// transaction. Under REPLICA IDENTITY DEFAULT a TOASTed value that did not
// change is not in the WAL: the insert then carries schema.Unchanged for it
// and A's key as its Before, and the delete's record is marked with
// schema.HeaderKeyChange. The values come from A as it was just before the key
// change: A's newest image before P-1 in the commit, else A's row in the
// table before the commit; a chain (A→B→C in one commit) follows the
// Before links (upsert.fill).
//
// That is right only when the delete and the insert are committed together:
// every change of A before P-1 precedes the delete in A's partition, so it
// is then either in the commit or already in the table. The two keys
// usually live in different partitions, which the fetcher reads
// round-robin and hands over in batches, so the buffer may hold one half
// without the other — in either order. commitCut keeps each pair together:
// in the partition of a half whose other half is not buffered yet, the
// commit stops before that half, which stays buffered (with everything
// after it in its partition) for the next commit. Holding back a partition
// can separate another pair, so the cut is lowered until no pair straddles
// it. Each half names itself (the insert by its Before and unchanged
// values, the delete by its mark), so neither order of arrival can commit
// one half alone. An insert whose delete was committed without it (a log
// written before deletes were marked) is refused, never resolved from a
// row that is gone.

// needsOldKey reports whether c is the insert half of a key change that
// takes unchanged values from its old key's row.
func (c *change) needsOldKey() bool {
	if c.env != nil {
		if c.env.Op != 'c' || c.env.Before == nil {
			return false
		}
		for _, v := range c.env.After {
			if schema.IsUnchanged(v) {
				return true
			}
		}
		return false
	}
	return c.info.Op == 'c' && c.info.HasBefore && c.info.Unchanged > 0
}

// keyChangeDelete reports whether c is the marked delete half of a key
// change whose insert needs it.
func (c *change) keyChangeDelete() bool { return c.keyChange && c.op() == 'd' }

// adjacentPosition is the position right before (delta -1) or after (+1)
// pos: consecutive changes of one transaction have positions that are
// consecutive integers (PostgreSQL: commit LSN, then the change's index in
// its transaction, big-endian).
func adjacentPosition(pos []byte, delta int) []byte {
	out := append([]byte(nil), pos...)
	for i := len(out) - 1; i >= 0; i-- {
		if delta > 0 {
			out[i]++
			if out[i] != 0 {
				break
			}
		} else {
			out[i]--
			if out[i] != 0xFF {
				break
			}
		}
	}
	return out
}

// commitCut returns the offset per partition below which the buffer can
// be committed with no key change split from its other half (see above).
// It is w.next unless something must wait.
func (w *tableWriter) commitCut() ([]int64, error) {
	cut := append([]int64(nil), w.next...)
	var halves []*change
	for i := range w.buf {
		c := &w.buf[i]
		if !c.skip && (c.keyChangeDelete() || c.needsOldKey()) {
			halves = append(halves, c)
		}
	}
	if len(halves) == 0 {
		return cut, nil
	}
	// Find each half's other half in the buffer, by position.
	partnerPos := make([][]byte, len(halves))
	found := make(map[string]*change, len(halves))
	for i, c := range halves {
		delta := 1
		if c.needsOldKey() {
			delta = -1
		}
		partnerPos[i] = adjacentPosition(c.position(), delta)
		found[string(partnerPos[i])] = nil
	}
	for i := range w.buf {
		if _, ok := found[string(w.buf[i].position())]; ok && !w.buf[i].skip {
			found[string(w.buf[i].position())] = &w.buf[i]
		}
	}
	partners := make([]*change, len(halves))
	for i, c := range halves {
		p := found[string(partnerPos[i])]
		switch {
		case p == nil:
		case c.needsOldKey() && p.op() != 'd':
			return nil, fmt.Errorf("iceberg: %s/%d@%d: an insert takes unchanged values from its old key, but the change before it (%s/%d@%d) is not that key's delete",
				w.cfg.Topic, c.partition, c.offset, w.cfg.Topic, p.partition, p.offset)
		case c.keyChangeDelete() && !p.needsOldKey():
			return nil, fmt.Errorf("iceberg: %s/%d@%d: a delete is marked as half of a key change, but the change after it (%s/%d@%d) is not an insert taking values from it",
				w.cfg.Topic, c.partition, c.offset, w.cfg.Topic, p.partition, p.offset)
		}
		partners[i] = p
	}
	held := func(c *change) bool { return c.offset >= cut[c.partition] }
	for lowered := true; lowered; {
		lowered = false
		for i, c := range halves {
			p := partners[i]
			switch {
			case p == nil && !held(c):
				if c.needsOldKey() {
					if err := w.deleteStillToCome(c, partnerPos[i]); err != nil {
						return nil, err
					}
				}
				cut[c.partition], lowered = c.offset, true
			case p == nil || held(c) == held(p):
			case held(c):
				// Also an unmarked delete (an older log) waits for its insert.
				cut[p.partition], lowered = p.offset, true
			default:
				cut[c.partition], lowered = c.offset, true
			}
		}
	}
	return cut, nil
}

// deleteStillToCome checks that the delete (at position del) of the key
// change whose insert is c can still be fetched: its partition has not been
// read past it.
func (w *tableWriter) deleteStillToCome(c *change, del []byte) error {
	env, err := c.envelope()
	if err != nil {
		return err
	}
	key, err := schema.AppendKey(nil, c.table, env.Before)
	if err != nil {
		return err
	}
	p := log.PartitionFor(key, int32(w.partitions))
	if int(p) < len(w.seen) && w.seen[p] != nil && bytes.Compare(w.seen[p], del) >= 0 {
		return fmt.Errorf("iceberg: %s/%d@%d: the insert of a changed primary key takes unchanged values from the old key's row, "+
			"but the old key's delete (partition %d, position %x) was committed without it, so that row is gone "+
			"(the log was written by a cdcd that did not mark key changes); re-snapshot the table to repair it",
			w.cfg.Topic, c.partition, c.offset, p, del)
	}
	return nil
}

// commitHolding commits the buffer below cut and keeps the rest buffered
// for a later commit (see commitCut).
func (w *tableWriter) commitHolding(ctx context.Context, cut []int64) error {
	var now, rest []change
	var nowPos []byte
	restBytes := 0
	for _, c := range w.buf {
		if c.offset < cut[c.partition] {
			now = append(now, c)
			if pos := c.position(); bytes.Compare(pos, nowPos) > 0 {
				nowPos = pos
			}
			continue
		}
		rest = append(rest, c)
		restBytes += len(c.body) + 5 // as fetched: framed
	}
	w.logger.Debug("a key change waits for its other half", "held", len(rest), "offsets", encodeOffsets(cut))
	if len(now) == 0 {
		w.bufAt = time.Now() // try again after the next interval or batch
		w.bufSince = w.bufAt
		return nil
	}
	newest := w.lastPos
	// The changes held back alias some of the buffer's windows, so none
	// is handed back (windows.go): they are left to the collector, their
	// chunks abandoned.
	w.windows.forget(w.held)
	clear(w.held)
	w.held = w.held[:0]
	w.buf, w.lastPos = now, nowPos
	if err := w.commitWith(ctx, cut, w.attempt); err != nil {
		return err
	}
	w.buf, w.bufBytes, w.bufAt, w.lastPos = rest, restBytes, time.Now(), newest
	w.others = 0
	for i := range rest {
		if !rest[i].insert() {
			w.others++
		}
	}
	w.bufSince = w.bufAt
	return nil
}

// loadSeen reads the position of every partition's last committed record,
// for deleteStillToCome; best effort (an unknown position only means an
// insert waits until its partition is read further).
func (w *tableWriter) loadSeen(ctx context.Context) {
	w.seen = make([][]byte, w.partitions)
	for p, off := range w.committed {
		if off == 0 {
			continue
		}
		recs, err := w.s.lg.Fetch(ctx, w.cfg.Topic, int32(p), off-1, log.FetchOptions{MaxBytes: 1})
		if err == nil && len(recs) > 0 && recs[0].Offset == off-1 {
			w.seen[p] = recs[0].Header(schema.HeaderPosition)
		}
	}
}

// errKeyChangeOrigin: the old key's delete of a key change is not in the
// commit (commitCut keeps the two together, so this is a bug).
var errKeyChangeOrigin = errors.New("iceberg: a key change's insert is committed without its old key's delete")

// keyChangeOrigin finds the old key of key change insert c in the commit
// and the index of its delete among that key's changes.
func (u *upsert) keyChangeOrigin(states map[string]*keyState, c *change) (*keyState, int, error) {
	env, err := c.envelope()
	if err != nil {
		return nil, 0, err
	}
	old, err := u.keyOf(c.table, env.Before)
	if err != nil {
		return nil, 0, err
	}
	st := states[string(old)]
	want := adjacentPosition(c.position(), -1)
	for j := 0; st != nil && j < len(st.changes); j++ {
		if d := st.changes[j]; d.op() == 'd' && bytes.Equal(d.position(), want) {
			return st, j, nil
		}
	}
	return nil, 0, fmt.Errorf("%w (%s/%d@%d)", errKeyChangeOrigin, c.table.QualifiedName(), c.partition, c.offset)
}
