package iceberg

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"

	"github.com/cdcd-dev/cdcd/internal/icemeta"
)

// A table's metadata.json, written at every commit, holds every snapshot
// the table keeps (compaction.retain_snapshots, 100 by default, and all
// younger than snapshot_max_age, an hour: 360 at a 10 s commit interval,
// 3,600 at 1 s), and iceberg-go encodes them all again each time: in cdcd
// bench's MariaDB streaming phase (253 snapshots by its end, a 279 KB
// file) the encoding was 0.56 of 13.5 CPU-s, two thirds of the snapshot
// producer's work, and allocated 121 of the phase's 1,727 MB. A snapshot never
// changes once committed, so metadataCache keeps each one's encoding, by
// id, and a commit encodes only the new one and the small rest of the
// file: the same bytes as iceberg-go's json.Encoder
// (TestMetadataJSONMatchesIceberg), at a cost that no longer grows with
// the snapshots kept.

// metadataCache encodes one table's metadata; the zero value is ready.
type metadataCache struct {
	mu    sync.Mutex // a table's commits are serial; its maintenance's too, but on another path
	table uuid.UUID
	snaps map[int64][]byte // a snapshot's encoding, by snapshot id
	// buf is a written file's buffer, handed back (done) for the next
	// file to be encoded into: a fresh one a commit, grown by doubling
	// past the estimate below, allocated about 1.5 times the file (66 of
	// the 1,422 MB the streaming phase of `cdcd bench -source mariadb`
	// allocated, at ~250 snapshots).
	buf []byte
}

// metaCommon mirrors iceberg-go's commonMetadata's JSON fields in their
// order, less the snapshots (written after, from the cache) and the
// fields a format version's struct shadows (last-sequence-number,
// next-row-id).
type metaCommon struct {
	FormatVersion      int                             `json:"format-version"`
	UUID               uuid.UUID                       `json:"table-uuid"`
	Loc                string                          `json:"location"`
	LastUpdatedMS      int64                           `json:"last-updated-ms"`
	LastColumnID       int                             `json:"last-column-id"`
	Schemas            []*iceberg.Schema               `json:"schemas"`
	CurrentSchemaID    int                             `json:"current-schema-id"`
	Specs              []iceberg.PartitionSpec         `json:"partition-specs"`
	DefaultSpecID      int                             `json:"default-spec-id"`
	LastPartitionID    *int                            `json:"last-partition-id,omitempty"`
	Props              iceberg.Properties              `json:"properties,omitempty"`
	CurrentSnapshotID  *int64                          `json:"current-snapshot-id,omitempty"` // format 2 only: 3 writes it after
	SnapshotLog        []table.SnapshotLogEntry        `json:"snapshot-log,omitempty"`
	MetadataLog        []table.MetadataLogEntry        `json:"metadata-log,omitempty"`
	SortOrders         []table.SortOrder               `json:"sort-orders"`
	DefaultSortOrderID int                             `json:"default-sort-order-id"`
	Refs               map[string]table.SnapshotRef    `json:"refs,omitempty"`
	Statistics         []table.StatisticsFile          `json:"statistics,omitempty"`
	PartitionStats     []table.PartitionStatisticsFile `json:"partition-statistics,omitempty"`
	EncryptionKeys     []table.EncryptionKey           `json:"encryption-keys,omitempty"`
}

// metaV2 and metaV3 are iceberg-go's metadataV2 and metadataV3: their own
// fields first, then the common ones.
type metaV2 struct {
	LastSeqNum int64 `json:"last-sequence-number"`
	metaCommon
}

type metaV3 struct {
	LastSeqNum int64 `json:"last-sequence-number"`
	NextRowID  int64 `json:"next-row-id"`
	metaCommon
}

// encode returns meta's metadata.json as json.NewEncoder(w).Encode(meta)
// writes it (trailing newline included).
func (c *metadataCache) encode(meta table.Metadata) ([]byte, error) {
	v := meta.Version()
	if c == nil || (v != 2 && v != 3) || (v == 3 && meta.LastPartitionSpecID() == nil) {
		return plainMetadataJSON(meta)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if id := meta.TableUUID(); id != c.table || c.snaps == nil {
		c.table, c.snaps = id, map[int64][]byte{}
	}
	com := metaCommon{
		FormatVersion: v, UUID: meta.TableUUID(), Loc: meta.Location(), LastUpdatedMS: meta.LastUpdatedMillis(),
		LastColumnID: meta.LastColumnID(), Schemas: meta.Schemas(), CurrentSchemaID: meta.CurrentSchema().ID,
		Specs: meta.PartitionSpecs(), DefaultSpecID: meta.DefaultPartitionSpec(), LastPartitionID: meta.LastPartitionSpecID(),
		Props:       meta.Properties(),
		SnapshotLog: slices.Collect(meta.SnapshotLogs()), MetadataLog: slices.Collect(meta.PreviousFiles()),
		SortOrders: meta.SortOrders(), DefaultSortOrderID: meta.DefaultSortOrder(),
		Refs:       maps.Collect(meta.Refs()),
		Statistics: slices.Collect(meta.Statistics()), PartitionStats: slices.Collect(meta.PartitionStatistics()),
		EncryptionKeys: slices.Collect(meta.EncryptionKeys()),
	}
	// iceberg-go writes these three lists even when empty ("[]"), and
	// every table has at least one of each; anything else goes its way.
	if len(com.Schemas) == 0 || len(com.Specs) == 0 || len(com.SortOrders) == 0 {
		return plainMetadataJSON(meta)
	}
	var current *int64
	if s := meta.CurrentSnapshot(); s != nil {
		id := s.SnapshotID
		current = &id
	}
	var head []byte
	var err error
	if v == 2 {
		com.CurrentSnapshotID = current
		head, err = json.Marshal(metaV2{LastSeqNum: meta.LastSequenceNumber(), metaCommon: com})
	} else {
		head, err = json.Marshal(metaV3{LastSeqNum: meta.LastSequenceNumber(), NextRowID: meta.NextRowID(), metaCommon: com})
	}
	if err != nil {
		return nil, err
	}
	need := len(head) + 64 + c.size()
	out := bytes.NewBuffer(c.buf[:0])
	c.buf = nil                   // the caller's until done
	out.Grow(need + need/8)       // and the new snapshots
	out.Write(head[:len(head)-1]) // without its '}'
	if v == 3 {
		// Written even when null (iceberg-go's metadataV3.MarshalJSON).
		out.WriteString(`,"current-snapshot-id":`)
		if current == nil {
			out.WriteString("null")
		} else {
			out.WriteString(strconv.FormatInt(*current, 10))
		}
	}
	// The ids in place, not Snapshots(): a copy of every snapshot.
	ids := icemeta.SnapshotIDs(meta)
	keep := make(map[int64][]byte, len(ids))
	for i, id := range ids {
		b, ok := c.snaps[id]
		if !ok {
			s := meta.SnapshotByID(id)
			if s == nil {
				return plainMetadataJSON(meta)
			}
			if b, err = json.Marshal(*s); err != nil {
				return nil, err
			}
		}
		keep[id] = b
		if i == 0 {
			out.WriteString(`,"snapshots":[`)
		} else {
			out.WriteByte(',')
		}
		out.Write(b)
	}
	if len(ids) > 0 {
		out.WriteByte(']')
	}
	out.WriteString("}\n")
	c.snaps = keep // expired snapshots leave the cache
	return out.Bytes(), nil
}

// done hands back the bytes encode returned once they are written.
func (c *metadataCache) done(b []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cap(b) > cap(c.buf) {
		c.buf = b[:0]
	}
}

// size is the cached snapshots' bytes.
func (c *metadataCache) size() int {
	n := 0
	for _, b := range c.snaps {
		n += len(b) + 1
	}
	return n
}

// plainMetadataJSON is iceberg-go's encoding (its catalogs': json.Encoder,
// one trailing newline).
func plainMetadataJSON(meta table.Metadata) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(meta); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
