package iceberg

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/iceberg-go/catalog"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// A commit to the SQL catalog without loading the table back.
//
// iceberg-go's SQL catalog commits by loading the table (its row, then
// metadata.json read and parsed), checking the requirements against it,
// applying the updates, writing the new metadata.json and moving the row
// from the loaded location to the new one (an UPDATE … WHERE
// metadata_location = the loaded one). The sink's own commits already
// hold the table they build on: its metadata is the one the previous
// commit wrote, or the one the last reload parsed. So the sink's commit
// checks the requirements against that table, applies the updates to it,
// writes the new file and moves the row only from that table's location:
// if anything else committed in between, the row is elsewhere, nothing
// moves, and the commit fails as a conflict (table.ErrCommitFailed, as
// iceberg-go's catalog reports the row moved), which the sink's loop
// reloads and replays as before. What the catalog holds after a commit is
// exactly what the other way would have written from an unchanged table;
// the parse of metadata.json at every commit (a tenth of the table loop's
// catalog work, 2–2.5 ms a commit at cdcd bench's sizes) is gone.
//
// Only the shapes the other way handles alike take this one: a namespace
// of plain parts (no '.', not iceberg-go's encoded form: its row key is
// the parts joined by '.'), uncompressed metadata, a metadata file name
// that carries its version. Anything else commits through iceberg-go.

// encodedNamespacePrefix marks iceberg-go's encoded namespace keys
// (catalog/sql: namespaceToString); such namespaces commit through it.
const encodedNamespacePrefix = "__iceberg_namespace_v1__:"

// commitOn commits reqs and updates to base's table, whose metadata
// base's is, writing the new metadata.json through wfs (encoded through
// mc, the table's cache of its snapshots' encodings; nil: none). ok is false when
// the table's shape is not one this way takes (see above): nothing was
// done, and the caller commits through CommitTable.
func (c *sqlCatalog) commitOn(ctx context.Context, base *table.Table, wfs icebergio.WriteFileIO, mc *metadataCache, reqs []table.Requirement, updates []table.Update) (_ table.Metadata, _ string, ok bool, _ error) {
	nsKey, name, plain := c.rowKey(base.Identifier())
	meta, from := base.Metadata(), base.MetadataLocation()
	version := metadataVersion(from)
	if !plain || version < 0 ||
		meta.Properties().Get(table.MetadataCompressionKey, table.MetadataCompressionDefault) != table.MetadataCompressionCodecNone {
		return nil, "", false, nil
	}
	if err := c.file.check(); err != nil {
		return nil, "", true, err
	}
	for _, r := range reqs {
		if err := r.Validate(meta); err != nil {
			return nil, "", true, err
		}
	}
	updated, err := table.UpdateTableMetadata(meta, updates, from)
	if err != nil {
		return nil, "", true, err
	}
	if updated.Properties().Get(table.MetadataCompressionKey, table.MetadataCompressionDefault) != table.MetadataCompressionCodecNone {
		return nil, "", false, nil // the updates turn compression on: nothing written yet
	}
	lp, err := table.LoadLocationProvider(updated.Location(), updated.Properties())
	if err != nil {
		return nil, "", true, err
	}
	to, err := lp.NewTableMetadataFileLocation(version + 1)
	if err != nil {
		return nil, "", true, err
	}
	if err := writeMetadataJSON(wfs, to, updated, mc); err != nil {
		return nil, "", true, err
	}
	q := `UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ?
		WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ?`
	if c.postgres {
		q = `UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2
		WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 AND metadata_location = $6`
	}
	res, err := c.db.ExecContext(ctx, q, to, from, c.name, nsKey, name, from)
	if err != nil {
		return nil, "", true, fmt.Errorf("error updating table information: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, "", true, fmt.Errorf("error updating table information: %w", err)
	}
	if n == 0 {
		// Nothing references the new file; the orphan sweep removes it.
		return nil, "", true, fmt.Errorf("%w: table %s.%s metadata-location moved underneath us", table.ErrCommitFailed, nsKey, name)
	}
	return updated, to, true, nil
}

// rowKey is the table's row in iceberg_tables: its namespace's parts
// joined by '.' and its name. plain is false when that is not how
// iceberg-go keys it (a part with a '.' or empty, iceberg-go's encoded
// form) or the catalog has no name: such tables go through iceberg-go.
func (c *sqlCatalog) rowKey(ident table.Identifier) (nsKey, name string, plain bool) {
	ns, name := catalog.NamespaceFromIdent(ident), catalog.TableNameFromIdent(ident)
	nsKey = strings.Join(ns, ".")
	if c.name == "" || len(ns) == 0 || name == "" || strings.Contains(nsKey, encodedNamespacePrefix) {
		return "", "", false
	}
	for _, part := range ns {
		if part == "" || strings.Contains(part, ".") {
			return "", "", false
		}
	}
	return nsKey, name, true
}

// metadataVersion is the version a metadata file's name carries
// (00012-<uuid>.metadata.json, or v12.metadata.json), -1 if none.
func metadataVersion(loc string) int {
	name := path.Base(loc)
	if strings.HasSuffix(loc, "/") || !strings.HasSuffix(name, ".metadata.json") {
		return -1
	}
	digits := name
	if i := strings.IndexByte(name, '-'); i > 0 {
		digits = name[:i]
	} else if strings.HasPrefix(name, "v") {
		digits = strings.TrimSuffix(name[1:], ".metadata.json")
	} else {
		return -1
	}
	v, err := strconv.Atoi(digits)
	if err != nil || v < 0 || digits[0] == '+' {
		return -1
	}
	return v
}

// writeMetadataJSON writes meta to loc as iceberg-go's catalogs do
// (uncompressed: json.Encoder, one trailing newline), through mc
// (metadata_json.go; nil: iceberg-go's encoder).
func writeMetadataJSON(wfs icebergio.WriteFileIO, loc string, meta table.Metadata, mc *metadataCache) (err error) {
	b, err := mc.encode(meta)
	if err != nil {
		return err
	}
	defer mc.done(b)
	out, err := wfs.Create(loc)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = out.Write(b)
	return err
}

// heldCatalog is the catalog of the tables the snapshot producer makes:
// a transaction on one of them — the compactor's manifest rewrites and
// snapshot expiries (CommitMaintenance) — commits through commitOn on
// the table the writer holds, as the producer's own commits do, instead
// of through iceberg-go's CommitTable, which loads the table back (its
// metadata.json read and parsed) and encodes every snapshot again: at a
// thousand snapshots (1 MB of metadata) that was 1.16 of the last 300
// commits' 9 CPU-s in TestCommitCurve. It is exactly what the loading
// way does when it succeeds: commitOn moves the catalog's row only from
// the held table's location, so it lands only if the held table is the
// catalog's current one, the table the loading way would have loaded.
// Where the held table is not (a requirement it fails, or the row moved:
// a conflict, nothing landed) or commitOn does not take the table's shape,
// the commit goes the loading way, which decides against the table as the
// catalog has it. Any other error is returned as it is: the outcome of a
// failed UPDATE is unknown, and trying again the other way could apply
// the updates twice.
type heldCatalog struct {
	*sqlCatalog
	held func() *table.Table // the writer's table (nil: none)
	mc   *metadataCache
}

func (h *heldCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	if base := h.held(); base != nil && slices.Equal(ident, base.Identifier()) && validOn(base.Metadata(), reqs) {
		if fsys, err := base.FS(ctx); err == nil {
			if wfs, ok := fsys.(icebergio.WriteFileIO); ok {
				meta, loc, ok, err := h.commitOn(ctx, base, wfs, h.mc, reqs, updates)
				if ok && !errors.Is(err, table.ErrCommitFailed) {
					return meta, loc, err
				}
			}
		}
	}
	return h.sqlCatalog.CommitTable(ctx, ident, reqs, updates)
}

// validOn reports whether meta meets every requirement.
func validOn(meta table.Metadata, reqs []table.Requirement) bool {
	for _, r := range reqs {
		if r.Validate(meta) != nil {
			return false
		}
	}
	return true
}
