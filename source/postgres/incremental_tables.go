package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgpos"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// Tables added to a running pipeline.
//
// The reader keeps the tables it captures (State key
// "postgres/<slot>/tables"): those its initial load read, and those whose
// incremental snapshot is queued or done. A configured table not among
// them is new: it is added to the publication (cdcd's own or one it may
// alter) and an incremental snapshot that replaces its contents is queued,
// while the other tables stream on untouched. A table dropped from the
// config is forgotten, so adding it back snapshots it again (its changes
// in between were not captured).

func (r *Reader) tablesKey() string { return r.stateKey() + "/tables" }

// prepareCapture runs at the start of a session, before the publication
// is checked: it loads the snapshot engine's state, records which tables
// are captured when the pipeline is new, and adds the configured tables
// an existing publication lacks. It returns the tables the publication
// had before (nil when there was none).
func (r *Reader) prepareCapture(ctx context.Context, conn *pgx.Conn, tables []*catalogTable, st *sourceState) (map[string]bool, error) {
	if err := r.inc.Load(ctx); err != nil {
		return nil, err
	}
	var known []string
	found, err := loadJSON(ctx, r.state, r.tablesKey(), &known)
	if err != nil {
		return nil, err
	}
	if !found && !st.SlotCreated {
		// A new pipeline: the initial load (or, incremental, the engine)
		// reads every configured table.
		known = r.configured()
		if r.cfg.Incremental.Load {
			known = []string{}
		}
		if err := saveJSON(ctx, r.state, r.tablesKey(), known); err != nil {
			return nil, err
		}
	}
	had, err := publicationTables(ctx, conn, r.cfg.Publication)
	if err != nil || had == nil {
		return had, err
	}
	if !found && st.SlotCreated {
		known = r.configured() // from before tables were recorded: see queueAdded
		for i := 0; i < len(known); i++ {
			if !had[known[i]] {
				known = slices.Delete(known, i, i+1)
				i--
			}
		}
	}
	// Only tables new to the pipeline join the publication here (all of
	// them before the slot exists): a captured table missing from it lost
	// changes, which ensurePublication reports.
	var missing []*catalogTable
	for _, t := range tables {
		if !had[t.qualified()] && (!st.SlotCreated || !slices.Contains(known, t.qualified())) {
			missing = append(missing, t)
		}
	}
	return had, r.addToPublication(ctx, conn, missing)
}

// publicationTables lists a publication's tables; nil when it does not exist.
func publicationTables(ctx context.Context, conn *pgx.Conn, pub string) (map[string]bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", pub).Scan(&exists); err != nil {
		return nil, fmt.Errorf("postgres: look up publication %s: %w", pub, err)
	}
	if !exists {
		return nil, nil
	}
	// Its members as published, and as added (a partitioned table
	// published without publish_via_partition_root shows as its leaves).
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = $1
		UNION SELECT n.nspname || '.' || c.relname FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
		JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = $1`, pub)
	if err != nil {
		return nil, fmt.Errorf("postgres: tables of publication %s: %w", pub, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: tables of publication %s: %w", pub, err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// addToPublication adds tables to the publication.
func (r *Reader) addToPublication(ctx context.Context, conn *pgx.Conn, tables []*catalogTable) error {
	if len(tables) == 0 {
		return nil
	}
	idents := make([]string, len(tables))
	names := make([]string, len(tables))
	for i, t := range tables {
		idents[i], names[i] = t.ident(), t.qualified()
	}
	pub := pgx.Identifier{r.cfg.Publication}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+pub+" ADD TABLE "+strings.Join(idents, ", ")); err != nil {
		return &PublicationError{Publication: r.cfg.Publication, Detail: fmt.Sprintf("does not include %s, and adding it failed (%v); "+
			"run ALTER PUBLICATION %s ADD TABLE %s as its owner", strings.Join(names, ", "), err, pub, strings.Join(idents, ", "))}
	}
	r.logger.Info("added tables to the publication", "publication", r.cfg.Publication, "tables", names)
	return nil
}

// queueAdded runs once the slot is ready: the signal table joins the
// publication, tables new to the pipeline get a replacing snapshot (unless
// snapshot: never), runs of tables no longer configured stop.
func (r *Reader) queueAdded(ctx context.Context, conn *pgx.Conn, had map[string]bool) error {
	if err := r.ensureSignalTable(ctx, conn); err != nil {
		return err
	}
	var known []string
	found, err := loadJSON(ctx, r.state, r.tablesKey(), &known)
	if err != nil {
		return err
	}
	if !found {
		// A pipeline from before tables were recorded: what its
		// publication held was captured.
		for _, t := range r.configured() {
			if had == nil || had[t] {
				known = append(known, t)
			}
		}
	}
	var reqs []snapshot.Request
	origin := "added"
	if len(known) == 0 {
		origin = "initial"
	}
	for _, q := range r.configured() {
		if slices.Contains(known, q) || r.inc.Queued(q) || !(r.cfg.Snapshot || r.cfg.Incremental.Load) {
			continue
		}
		reqs = append(reqs, snapshot.Request{Table: q, Replace: true, Origin: origin})
	}
	if len(reqs) > 0 {
		if err := r.inc.Submit(ctx, reqs...); err != nil {
			return err
		}
	}
	var gone []string
	for _, p := range r.inc.Progress() {
		if p.Finished.IsZero() && !slices.Contains(r.configured(), p.Table) {
			gone = append(gone, p.Table)
		}
	}
	if len(gone) > 0 {
		if _, err := r.inc.Stop(ctx, gone...); err != nil {
			return err
		}
	}
	return saveJSON(ctx, r.state, r.tablesKey(), r.configured())
}

// configured returns the configured tables as "schema.table".
func (r *Reader) configured() []string {
	out := make([]string, len(r.cfg.Tables))
	for i, t := range r.cfg.Tables {
		out[i] = qualify(t)
	}
	return out
}

// ensureSignalTable adds the signal table to the publication.
func (r *Reader) ensureSignalTable(ctx context.Context, conn *pgx.Conn) error {
	name := r.cfg.Incremental.SignalTable
	if name == "" {
		return nil
	}
	had, err := publicationTables(ctx, conn, r.cfg.Publication)
	if err != nil || had[qualify(name)] {
		return err
	}
	ct, err := describeByName(ctx, conn, name)
	if err != nil {
		return &TableError{Table: qualify(name), Err: fmt.Errorf("the signal table (source.postgres.incremental.signal_table): %w; "+
			"create it: CREATE TABLE %s (id varchar(42) PRIMARY KEY, type varchar(32) NOT NULL, data varchar(2048))", err, name)}
	}
	return r.addToPublication(ctx, conn, []*catalogTable{ct})
}

func qualify(name string) string {
	s, t := splitTable(name)
	return s + "." + t
}

// loadReset emits the reset marker that begins table tp's rows in an
// initial load (LoadResets), at (consistent point − 1, seq) ‖ 0x00: after
// the previous chunk's rows and before this one's (every encoded key is
// longer than one byte), a load position like theirs (longer than 12
// bytes).
func (r *Reader) loadReset(ctx context.Context, rel *relation, cp uint64, seq int, started time.Time,
	emit func(context.Context, []source.Change) error) error {
	if !r.cfg.Incremental.LoadResets || rel == nil {
		return nil
	}
	c := source.Change{Table: rel.table, Op: source.OpTruncate, Reset: fmt.Sprintf("load-%X-%s", cp, rel.table.QualifiedName()),
		Pos: append(pgpos.New(cp-1, uint32(seq)), 0), LSN: cp - 1, CommitTime: started} // LSN as its position says
	return emit(ctx, []source.Change{c})
}
