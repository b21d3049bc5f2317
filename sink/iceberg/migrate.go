package iceberg

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"
)

// OffsetsMove is what MoveOffsets did to one table.
type OffsetsMove struct {
	Table string
	// From and To are the next offsets per partition before and after;
	// both nil when the table holds none (it does not exist or never
	// committed): it reads the new log from its start.
	From, To []int64
	// FromTopic is the topic id the offsets belonged to.
	FromTopic string
}

// MoveOffsets makes the table of ident read on in another log that holds
// the same records under other offsets (cdcd log migrate): it commits a
// snapshot that changes no rows and records, as the table's offsets, the
// new log's next offsets move(partition, next) under topic id toTopic.
// The table's offsets must belong to fromTopic (the log the records were
// copied from); offsets of another log, or of another pipeline, are
// refused. A table whose offsets already belong to toTopic is left as it
// is (a migration run again).
func MoveOffsets(ctx context.Context, cat catalog.Catalog, ident table.Identifier, pipeline string, partitions int,
	fromTopic, toTopic string, move func(partition int, next int64) (int64, error)) (*OffsetsMove, error) {
	name := identString(ident)
	tbl, err := cat.LoadTable(ctx, ident)
	if errors.Is(err, catalog.ErrNoSuchTable) {
		return &OffsetsMove{Table: name}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("iceberg: load %s: %w", name, err)
	}
	from, snap, err := committedOffsets(tbl, pipeline, partitions)
	if err != nil {
		return nil, err
	}
	out := &OffsetsMove{Table: name}
	if snap == nil {
		return out, nil
	}
	out.From, out.FromTopic = from, topicOf(snap)
	switch out.FromTopic {
	case toTopic:
		out.To = from
		return out, nil
	case fromTopic, "":
	default:
		return nil, fmt.Errorf("iceberg: %s: its offsets belong to log topic %s, not to the log being moved (%s): its mirror must be rebuilt after the move (cdcd snapshot -c FILE --replace %s)",
			name, out.FromTopic, fromTopic, name)
	}
	out.To = make([]int64, partitions)
	for p, next := range from {
		if out.To[p], err = move(p, next); err != nil {
			return nil, fmt.Errorf("iceberg: %s: %w", name, err)
		}
	}
	props := map[string]string{
		PropPipeline: pipeline, PropOffsets: encodeOffsets(out.To), PropTopicID: toTopic,
		PropCommitID: newCommitID(), PropRows: "0",
	}
	if pos, ok := snap.Summary.Properties[PropSourcePosition]; ok {
		props[PropSourcePosition] = pos
	}
	if err := checkCatalog(cat); err != nil {
		return nil, err
	}
	tx := tbl.NewTransaction()
	if err := tx.AddFiles(ctx, nil, props, false); err != nil {
		return nil, fmt.Errorf("iceberg: %s: %w", name, err)
	}
	if _, err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("iceberg: %s: record the moved offsets: %w", name, err)
	}
	return out, nil
}
