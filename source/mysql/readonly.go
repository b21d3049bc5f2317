package mysql

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Read-only snapshots (Config.ReadOnly): where cdcd may not write to the
// source, a watermark is a point of the binlog (a GTID position) instead
// of a row, and the stream meets it once it has read every transaction of
// that position (between transactions, so the changes after it sort after
// the chunk's rows).
//
// Per chunk: the low watermark is the server's position (@@gtid_binlog_pos)
// before the read; the chunk is read in a transaction WITH CONSISTENT
// SNAPSHOT, and MariaDB names the binlog position that snapshot is
// consistent with (binlog_snapshot_file/position, turned into a GTID
// position by BINLOG_GTID_POS): the rows exactly as of that point P, the
// high watermark. Keys changed in the window are dropped from the chunk as
// with watermark rows; a row kept is unchanged from P to where the stream
// meets the high watermark (even when the stream passed P before the
// watermark was registered), so it is emitted there. The one case the chunk
// cannot be placed: the stream met the low watermark after P (it was
// behind and caught up past P before it looked): changes between P and
// there were not tracked, so the chunk is read again (Chunk.Consistent).
// A reset marker stands at the server's position when it is asked for; the
// plan after it is read at a consistent point that must contain where the
// stream placed the marker.
//
// MySQL has no consistent-snapshot binlog position: read-only snapshots
// are MariaDB's.

// gtidMark is a watermark at a GTID position.
type gtidMark struct {
	id  string
	set gomysql.GTIDSet
	// placed, when set, receives the stream's position where it met the
	// mark.
	placed *atomic.Pointer[gomysql.GTIDSet]
	// at, when set, is where a reset marker was placed before a restart:
	// it is placed there again, once the stream has read transaction ord.
	at  source.Position
	ord uint64
}

// gtidMarks are the registered read-only watermarks, in order: the
// engine's goroutine adds, the stream meets them.
type gtidMarks struct {
	mu    sync.Mutex
	queue []gtidMark
}

func (g *gtidMarks) add(m gtidMark) {
	g.mu.Lock()
	g.queue = append(g.queue, m)
	g.mu.Unlock()
}

// meet returns the marks the stream, at live (between transactions, the
// last of ordinal ord), has reached, in order.
func (g *gtidMarks) meet(live gomysql.GTIDSet, ord uint64) []gtidMark {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []gtidMark
	for len(g.queue) > 0 && (g.queue[0].at == nil && live.Contain(g.queue[0].set) || g.queue[0].at != nil && ord >= g.queue[0].ord) {
		m := g.queue[0]
		if m.placed != nil {
			at := live.Clone()
			m.placed.Store(&at)
		}
		out = append(out, m)
		g.queue = g.queue[1:]
	}
	return out
}

// roState is a read-only database's state (the engine's goroutine).
type roState struct {
	marks   *gtidMarks
	resets  *resetPlacements
	lowAt   *atomic.Pointer[gomysql.GTIDSet] // where the stream placed the last low watermark
	point   gomysql.GTIDSet                  // the last chunk's point
	resetAt *atomic.Pointer[gomysql.GTIDSet] // where the stream placed the last reset marker
}

// roWatermark registers a watermark of a read-only database.
func (d *myDatabase) roWatermark(ctx context.Context, id string) error {
	ro := d.ro
	if kind, _, _ := strings.Cut(id, ":"); kind == "H" {
		if ro.point == nil {
			return fmt.Errorf("mysql: read-only watermark %s without its chunk", id)
		}
		ro.marks.add(gtidMark{id: id, set: ro.point})
		ro.point = nil
		return nil
	}
	var pos string
	if err := d.db.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return &connError{fmt.Errorf("mysql: read the binlog position for a watermark: %w", err)}
	}
	set, err := parseGTIDSet(d.flavor, pos)
	if err != nil {
		return err
	}
	placed := new(atomic.Pointer[gomysql.GTIDSet])
	m := gtidMark{id: id, set: set, placed: placed}
	if kind, _, _ := strings.Cut(id, ":"); kind == "L" {
		ro.lowAt = placed
	} else {
		ro.resetAt = placed
		if at, ok := ro.resets.placed(ctx, id); ok {
			// Placed before a restart: there again, or a second truncate
			// would empty the table after its upper bound was read.
			m.at, m.ord, m.set = at.Pos, at.Ord, nil
			ro.resetAt = nil // the plan was read after it, or is read after the stream passes it
		}
	}
	ro.marks.add(m)
	return nil
}

// resetPlacements remembers where the stream placed read-only reset
// markers (State key "mysql/readonly-resets": id → position), saved
// before the marker is emitted.
type resetPlacements struct {
	state State
	mu    sync.Mutex
}

const resetsKey = "mysql/readonly-resets"

type placement struct {
	Ord uint64          `json:"ord"`
	Pos source.Position `json:"pos"`
}

func (p *resetPlacements) load(ctx context.Context) (map[string]placement, error) {
	raw, err := p.state.Load(ctx, resetsKey)
	m := map[string]placement{}
	if err != nil || raw == nil {
		return m, err
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("mysql: stored %s is damaged: %v", resetsKey, err)
	}
	return m, nil
}

// placed returns where reset marker id was placed, if it was.
func (p *resetPlacements) placed(ctx context.Context, id string) (placement, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, err := p.load(ctx)
	if err != nil {
		return placement{}, false
	}
	at, ok := m[id]
	return at, ok
}

// save records where reset marker id is placed (the newest 16 kept).
func (p *resetPlacements) save(ctx context.Context, id string, at placement) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, err := p.load(ctx)
	if err != nil {
		return err
	}
	if len(m) >= 16 {
		clear(m) // ids are per run; a run's marker is placed within its first minutes
	}
	m[id] = at
	raw, _ := json.Marshal(m)
	if err := p.state.Save(ctx, resetsKey, raw); err != nil {
		return fmt.Errorf("mysql: save %s: %w", resetsKey, err)
	}
	return nil
}

// consistentRead runs read in a transaction WITH CONSISTENT SNAPSHOT on
// one connection and returns the GTID position the snapshot is consistent
// with.
func (d *myDatabase) consistentRead(ctx context.Context, read func(querier) error) (gomysql.GTIDSet, error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, &connError{fmt.Errorf("mysql: snapshot connection: %w", err)}
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY"); err != nil {
		return nil, &connError{fmt.Errorf("mysql: start a consistent snapshot: %w", err)}
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	var file, posName string
	var filePos uint64
	rows, err := conn.QueryContext(ctx, "SHOW STATUS LIKE 'binlog_snapshot_%'")
	if err != nil {
		return nil, fmt.Errorf("mysql: read the snapshot's binlog position: %w", err)
	}
	for rows.Next() {
		var name, val string
		if err := rows.Scan(&name, &val); err != nil {
			rows.Close()
			return nil, err
		}
		switch strings.ToLower(name) {
		case "binlog_snapshot_file":
			file = val
		case "binlog_snapshot_position":
			posName = val
			fmt.Sscan(val, &filePos)
		}
	}
	rows.Close()
	if file == "" || posName == "" {
		return nil, &PreconditionError{What: "the server does not report binlog_snapshot_file/position (read-only snapshots need MariaDB)",
			Fix: "set source.mysql.read_only: false and grant the watermark table"}
	}
	var gtid sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT BINLOG_GTID_POS(?, ?)", file, filePos).Scan(&gtid); err != nil {
		return nil, fmt.Errorf("mysql: BINLOG_GTID_POS(%s, %d): %w", file, filePos, err)
	}
	if !gtid.Valid {
		return nil, &connError{fmt.Errorf("mysql: BINLOG_GTID_POS(%s, %d) is NULL (the binlog rotated?)", file, filePos)}
	}
	set, err := parseGTIDSet(d.flavor, gtid.String)
	if err != nil {
		return nil, err
	}
	if err := read(conn); err != nil {
		return nil, err
	}
	return set, nil
}

// roChunk marks a chunk read at point set: its high watermark stands
// there, and it is consistent when the stream met its low watermark at or
// before set.
func (d *myDatabase) roChunk(set gomysql.GTIDSet, res *snapshot.Chunk) {
	d.ro.point = set
	low := d.ro.lowAt
	res.Consistent = func(source.Position) bool {
		placed := low.Load()
		return placed != nil && set.Contain(*placed)
	}
}

// roPlan makes a plan read at point set consistent with the last reset
// marker: set must contain where the stream placed it.
func (d *myDatabase) roPlan(set gomysql.GTIDSet, p *snapshot.Plan) {
	at := d.ro.resetAt
	p.Consistent = func(source.Position) bool {
		if at == nil {
			return true
		}
		placed := at.Load()
		return placed != nil && set.Contain(*placed)
	}
}

// meetMarks emits, between transactions, the read-only watermarks the
// stream has reached.
func (in *incStream) meetMarks(ctx context.Context, s *streamer) error {
	if in == nil || in.ro == nil || s.tx.active {
		return nil
	}
	for _, m := range in.ro.meet(s.live.set, s.live.ord) {
		if m.at != nil {
			for _, c := range in.eng.Watermark(m.id, m.at) {
				s.add(c)
			}
			continue
		}
		// Marks met after one transaction take positions of their own
		// (ordinal, max) ‖ n: two chunks at one position would look like
		// one chunk sent twice, and the log would keep only the first.
		if in.roOrd != s.live.ord {
			in.roOrd, in.roSeq = s.live.ord, 0
		}
		pos := binary.BigEndian.AppendUint32(Position(s.live.ord, math.MaxUint32), in.roSeq)
		in.roSeq++
		rows := in.eng.Watermark(m.id, pos)
		if len(rows) > 0 && rows[0].Reset != "" {
			if err := in.resets.save(ctx, m.id, placement{Ord: s.live.ord, Pos: pos}); err != nil {
				return err
			}
		}
		for _, c := range rows {
			s.add(c)
		}
	}
	return nil
}
