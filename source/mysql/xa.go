package mysql

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/go-mysql-org/go-mysql/replication"
)

// XA transactions. A prepared XA transaction is binlogged at its PREPARE,
// as an event group of its own (XA START … rows … XA END, then an
// XA_PREPARE_LOG_EVENT), and resolved later by a group holding only
// "XA COMMIT xid" or "XA ROLLBACK xid". The rows are read at the PREPARE:
// a prepared transaction holds its row locks until it is resolved, so no
// other transaction changes those rows in between, and a COMMIT makes
// them what the mirror already holds. A ROLLBACK must take them back: the
// reader keeps each prepared transaction's changes (up to xaKeepMax) and
// at its rollback emits their inverses in reverse order (an insert's
// delete, a delete's insert of the old row, an update back), which leaves
// the mirror as the rows were before it. A transaction whose changes are
// not kept (too many, or prepared before a restart of the reader: the
// checkpoint keeps only which tables each open one changed) stops those
// tables at its rollback, naming the re-snapshot.
//
// Before, the prepare group was taken as committed only when the next
// group began (with a warning), and a rollback left its rows in the mirror.

// xaKeepMax bounds the changes kept per prepared transaction.
const xaKeepMax = 100_000

// xaOpen is a prepared XA transaction read but not yet resolved.
type xaOpen struct {
	tables  []string        // captured tables it changed
	changes []source.Change // its changes, copied; nil when not kept
	kept    bool            // changes holds all of them
}

// xaID is the xid of an XA statement ("XA START X'31',X”,1" → "X'31',X”,1"),
// as the server writes it in the binlog; "" if q is not one.
func xaID(q string) string {
	rest := skipSpaceAndComments(q)
	w, rest := nextWord(rest)
	if w != "XA" {
		return ""
	}
	_, rest = nextWord(skipSpaceAndComments(rest))
	rest = strings.TrimSpace(rest)
	rest = strings.TrimSuffix(rest, " ONE PHASE")
	return strings.ToLower(strings.TrimSpace(rest))
}

// mariadbPreparedXA is the MariaDB GTID event flag of an XA transaction's
// prepare group (Gtid_log_event::FL_PREPARED_XA): its XA START is not a
// statement of the group, as on MySQL, but implied by the flag.
const mariadbPreparedXA = 64

// xaPrepareID is the xid an XA_PREPARE_LOG_EVENT names, written as the
// server writes it in XA statements ("x'31',x”,1", lower-cased like
// xaID), and whether the transaction committed in one phase.
func xaPrepareID(data []byte) (xid string, onePhase, ok bool) {
	if len(data) < 13 {
		return "", false, false
	}
	format := int32(binary.LittleEndian.Uint32(data[1:]))
	gl, bl := int(binary.LittleEndian.Uint32(data[5:])), int(binary.LittleEndian.Uint32(data[9:]))
	if gl < 0 || bl < 0 || 13+gl+bl > len(data) {
		return "", data[0] != 0, false
	}
	return fmt.Sprintf("x'%x',x'%x',%d", data[13:13+gl], data[13+gl:13+gl+bl], format), data[0] != 0, true
}

// xaStart marks the group begun by an XA START (MySQL) or a GTID event
// flagged mariadbPreparedXA (q "") as an XA transaction.
func (s *streamer) xaStart(q string) {
	s.tx.xa = cmp.Or(xaID(q), "?")
	s.tx.xaChanges, s.tx.xaTables, s.tx.xaOver = s.tx.xaChanges[:0], s.tx.xaTables[:0], false
}

// xaKeep keeps a change of the current XA transaction (add calls it).
func (s *streamer) xaKeep(c source.Change) {
	if c.Table == nil || c.Fault != nil {
		return
	}
	if qn := c.Table.QualifiedName(); !slices.Contains(s.tx.xaTables, qn) {
		s.tx.xaTables = append(s.tx.xaTables, qn)
	}
	if s.tx.xaOver || len(s.tx.xaChanges) >= xaKeepMax {
		s.tx.xaOver, s.tx.xaChanges = true, nil
		return
	}
	c.Before, c.After = cloneRow(c.Before), cloneRow(c.After)
	c.Pos, c.Binlog = nil, nil
	s.tx.xaChanges = append(s.tx.xaChanges, c)
}

// xaPrepare ends a prepare group (an XA_PREPARE_LOG_EVENT): a two-phase
// one stays open until its XA COMMIT or XA ROLLBACK; a one-phase commit
// is an ordinary commit.
func (s *streamer) xaPrepare(ctx context.Context, ev *replication.GenericEvent) error {
	xid, onePhase, ok := xaPrepareID(ev.Data)
	if !ok {
		xid = s.tx.xa
	}
	if s.tx.xa != "" && xid != "" && !onePhase && len(s.tx.xaTables) > 0 {
		if s.xa == nil {
			s.xa = map[string]*xaOpen{}
		}
		o := &xaOpen{tables: slices.Clone(s.tx.xaTables), kept: !s.tx.xaOver}
		if o.kept {
			o.changes = slices.Clone(s.tx.xaChanges)
		}
		s.xa[xid] = o
	}
	s.tx.xa = ""
	return s.commit(ctx)
}

// xaResolve handles an XA COMMIT or XA ROLLBACK group's statement.
func (s *streamer) xaResolve(q string, rollback bool) {
	xid := xaID(q)
	o := s.xa[xid]
	if o == nil {
		return // prepared before the reader's start position, or it changed no captured table
	}
	// Removed last: a checkpoint taken while the inverses are added (the
	// first change of a batch) is one from before this group, with the
	// transaction open.
	defer delete(s.xa, xid)
	if !rollback {
		return
	}
	if o.kept {
		for i := len(o.changes) - 1; i >= 0; i-- {
			c := o.changes[i]
			switch c.Op {
			case source.OpCreate:
				c.Op, c.Before, c.After = source.OpDelete, c.After, nil
			case source.OpDelete:
				c.Op, c.Before, c.After = source.OpCreate, nil, c.Before
			case source.OpUpdate:
				c.Before, c.After = c.After, c.Before
			default:
				continue
			}
			c.Pos, c.TxID, c.CommitTime = s.position(), s.tx.ord, s.tx.ts
			s.add(c)
			s.tx.idx++
		}
		s.r.logger.Info("an XA transaction was rolled back after its PREPARE: its changes taken back", "xid", xid,
			"changes", len(o.changes), "tables", o.tables)
		return
	}
	for _, qn := range o.tables {
		if !s.stoppable(qn) || s.captured[qn] == nil {
			continue
		}
		s.stopTable(qn, s.shape(qn), &source.Fault{
			Reason: fmt.Sprintf("XA transaction %s, whose prepared changes of %s are in the mirror, was rolled back, and its changes "+
				"were not kept to take back (more than %d, or prepared before cdcd's last start)", xid, qn, xaKeepMax),
			Fix: resnapshot(qn),
		}, "xid", xid)
		s.tx.idx++
	}
}

// xaTables is what a checkpoint keeps of the open prepared transactions:
// the tables each changed.
func (s *streamer) xaTables() map[string][]string {
	if len(s.xa) == 0 {
		return nil
	}
	out := make(map[string][]string, len(s.xa))
	for _, xid := range slices.Sorted(maps.Keys(s.xa)) {
		out[xid] = slices.Clone(s.xa[xid].tables)
	}
	return out
}

// xaResumed restores the open prepared transactions a checkpoint kept
// (their changes were not kept).
func xaResumed(tables map[string][]string) map[string]*xaOpen {
	if len(tables) == 0 {
		return nil
	}
	out := make(map[string]*xaOpen, len(tables))
	for xid, ts := range tables {
		out[xid] = &xaOpen{tables: slices.Clone(ts)}
	}
	return out
}
