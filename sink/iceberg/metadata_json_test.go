package iceberg

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// TestMetadataJSONMatchesIceberg: the metadata files the sink writes
// through its cache of snapshot encodings are byte for byte what
// iceberg-go's encoder writes for the same metadata, in both format
// versions, over the sink's own commits and over every other part a
// metadata file can hold (statistics, partition statistics, encryption
// keys, refs with retention, schemas, sort orders, properties that JSON
// escapes), and as snapshots expire (they leave the cache).
func TestMetadataJSONMatchesIceberg(t *testing.T) {
	for _, version := range []int{2, 3} {
		t.Run("v"+string(rune('0'+version)), func(t *testing.T) {
			cat := testCatalog(t)
			sc := cat.(*sqlCatalog)
			w := upsertWriter(t, cat, version, 1)
			defer w.close()
			rng := rand.New(rand.NewPCG(29, uint64(version)))
			want := model{}
			var off int64
			same := func(what string, meta table.Metadata, loc string) {
				t.Helper()
				plain, err := plainMetadataJSON(meta)
				if err != nil {
					t.Fatal(err)
				}
				got := readLocal(t, loc)
				if !bytes.Equal(got, plain) {
					t.Fatalf("%s: the written metadata differs from iceberg-go's encoding\n got: %s\nwant: %s", what, got, plain)
				}
				back, err := table.ParseMetadataBytes(got)
				if err != nil {
					t.Fatalf("%s: iceberg-go cannot parse what was written: %v", what, err)
				}
				if !back.Equals(meta) {
					t.Fatalf("%s: the metadata read back differs", what)
				}
			}
			for round := range 8 {
				w.buf = randomChanges(rng, want, 1+rng.IntN(40), &off)
				w.next[0] = off
				if err := w.commit(t.Context()); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				same("commit "+string(rune('0'+round)), w.tbl.Metadata(), w.tbl.MetadataLocation())
			}
			mc := &w.producer().meta
			if n := len(mc.snaps); n != len(w.tbl.Metadata().Snapshots()) || n < 8 {
				t.Fatalf("the cache holds %d snapshots, the table %d", n, len(w.tbl.Metadata().Snapshots()))
			}
			compareModel(t, want, scanTable(t, cat, w.cfg.Ident))

			snaps := w.tbl.Metadata().Snapshots()
			first, last := snaps[0].SnapshotID, snaps[len(snaps)-1].SnapshotID
			sch := w.tbl.Schema()
			wider := iceberg.NewSchemaWithIdentifiers(sch.ID+1, sch.IdentifierFieldIDs,
				append(sch.Fields(), iceberg.NestedField{ID: 1000, Name: "added <&>", Type: iceberg.PrimitiveTypes.String})...)
			blob := table.BlobMetadata{Type: "apache-datasketches-theta-v1", SnapshotID: last, SequenceNumber: 1, Fields: []int32{1},
				Properties: map[string]string{"ndv": "3"}}
			steps := []struct {
				name    string
				updates []table.Update
			}{
				{"properties", []table.Update{table.NewSetPropertiesUpdate(iceberg.Properties{"html <b>&</b>": "\"q\" \u2028 é", "cdcd.empty": ""})}},
				{"statistics", []table.Update{table.NewSetStatisticsUpdate(table.StatisticsFile{SnapshotID: last,
					StatisticsPath: w.tbl.Location() + "/metadata/s.stats", FileSizeInBytes: 10, FileFooterSizeInBytes: 4,
					BlobMetadata: []table.BlobMetadata{blob}})}},
				{"partition statistics", []table.Update{table.NewSetPartitionStatisticsUpdate(table.PartitionStatisticsFile{SnapshotID: last,
					StatisticsPath: w.tbl.Location() + "/metadata/p.stats", FileSizeInBytes: 7})}},
				{"a tag with retention", []table.Update{table.NewSetSnapshotRefUpdate("kept", first, table.TagRef, 86400000, -1, -1)}},
				{"a branch with retention", []table.Update{table.NewSetSnapshotRefUpdate("audit", last, table.BranchRef, -1, 3600000, 2)}},
				{"a schema", []table.Update{table.NewAddSchemaUpdate(wider), table.NewSetCurrentSchemaUpdate(-1)}},
				{"a sort order", []table.Update{table.NewAddSortOrderUpdate(&table.SortOrder{}), table.NewSetDefaultSortOrderUpdate(0)}},
				{"snapshots expired", []table.Update{table.NewRemoveSnapshotRefUpdate("kept"),
					table.NewRemoveSnapshotsUpdate([]int64{first, snaps[1].SnapshotID}, false)}},
				{"properties removed", []table.Update{table.NewRemovePropertiesUpdate([]string{"cdcd.empty"})}},
			}
			base := w.tbl
			fsys, err := base.FS(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			wfs := fsys.(icebergio.WriteFileIO)
			for _, st := range steps {
				meta, loc, ok, err := sc.commitOn(t.Context(), base, wfs, mc, nil, st.updates)
				if err != nil || !ok {
					t.Fatalf("%s: %v %v", st.name, ok, err)
				}
				same(st.name, meta, loc)
				base = table.New(base.Identifier(), meta, loc, base.FS, cat)
			}
			left := base.Metadata().Snapshots()
			if len(left) != len(snaps)-2 || len(mc.snaps) != len(left) {
				t.Fatalf("after expiry: the table has %d snapshots, the cache %d (were %d)", len(left), len(mc.snaps), len(snaps))
			}
			if _, ok := mc.snaps[first]; ok {
				t.Fatal("an expired snapshot stayed in the cache")
			}
			if b := readLocal(t, base.MetadataLocation()); !strings.Contains(string(b), `\u003cb\u003e\u0026`) {
				t.Fatal("the property's HTML characters were not escaped as iceberg-go escapes them")
			}
		})
	}
}

// TestMetadataJSONEmptyTable: a table without snapshots (v3 writes
// "current-snapshot-id": null, v2 leaves it out), and the cache starts
// afresh for another table.
func TestMetadataJSONEmptyTable(t *testing.T) {
	for _, version := range []int{2, 3} {
		cat := testCatalog(t)
		w := upsertWriter(t, cat, version, 1)
		var off int64
		w.buf = randomChanges(rand.New(rand.NewPCG(29, 1)), model{}, 1, &off)
		if err := w.ensureTable(t.Context()); err != nil {
			t.Fatal(err)
		}
		meta := w.tbl.Metadata()
		plain, err := plainMetadataJSON(meta)
		if err != nil {
			t.Fatal(err)
		}
		mc := &metadataCache{snaps: map[int64][]byte{7: []byte("stale")}}
		got, err := mc.encode(meta)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, plain) {
			t.Fatalf("v%d: got %s\nwant %s", version, got, plain)
		}
		if len(mc.snaps) != 0 || mc.table != meta.TableUUID() {
			t.Fatalf("v%d: the cache kept another table's snapshots", version)
		}
		// A written file's buffer is handed back and the next file is
		// encoded into it.
		mc.done(got)
		again, err := mc.encode(meta)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, plain) || unsafe.SliceData(again) != unsafe.SliceData(got) {
			t.Fatalf("v%d: the second file was not encoded, right, into the first one's buffer", version)
		}
		w.close()
	}
}

// readLocal reads a file:// location.
func readLocal(t *testing.T, loc string) []byte {
	t.Helper()
	f, err := icebergio.LocalFS{}.Open(strings.TrimPrefix(loc, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkMetadataJSON: a commit's metadata.json at 250 snapshots (cdcd
// bench's MariaDB streaming phase ends at 253), iceberg-go's encoder
// against the cache, which encodes only the newest snapshot.
func BenchmarkMetadataJSON(b *testing.B) {
	cat := testCatalog(b)
	w := upsertWriter(b, cat, 3, 1)
	defer w.close()
	var off int64
	w.buf = randomChanges(rand.New(rand.NewPCG(29, 2)), model{}, 20, &off)
	w.next[0] = off
	if err := w.commit(b.Context()); err != nil {
		b.Fatal(err)
	}
	meta := w.tbl.Metadata()
	cur := *meta.CurrentSnapshot()
	grow := func(meta table.Metadata, n int) table.Metadata {
		for range n {
			s := cur
			parent := s.SnapshotID
			s.ParentSnapshotID, s.SnapshotID, s.SequenceNumber = &parent, s.SnapshotID+1, s.SequenceNumber+1
			s.TimestampMs++
			first := *s.FirstRowID + *s.AddedRows
			s.FirstRowID = &first
			next, err := table.UpdateTableMetadata(meta, []table.Update{table.NewAddSnapshotUpdate(&s),
				table.NewSetSnapshotRefUpdate(table.MainBranch, s.SnapshotID, table.BranchRef, -1, -1, -1)}, "")
			if err != nil {
				b.Fatal(err)
			}
			meta, cur = next, s
		}
		return meta
	}
	meta = grow(meta, 249)
	b.Run("iceberg-go", func(b *testing.B) {
		for b.Loop() {
			if _, err := plainMetadataJSON(meta); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cache", func(b *testing.B) {
		mc := &metadataCache{}
		if _, err := mc.encode(meta); err != nil {
			b.Fatal(err)
		}
		next := grow(meta, 1) // a commit: one snapshot more
		for b.Loop() {
			out, err := mc.encode(next)
			if err != nil {
				b.Fatal(err)
			}
			mc.done(out)                     // as writeMetadataJSON does once it wrote the file
			delete(mc.snaps, cur.SnapshotID) // new again at the next call
		}
	})
}

// TestMaintenanceCommitsOnTheHeldTable: the compactor's expiries and
// manifest rewrites commit on the writer's table through commitOn
// (heldCatalog): after every commit and the maintenance it triggers, the
// metadata cache holds exactly the table's snapshots (an expiry that went
// the loading way would leave the expired ones in it) and the file is
// iceberg-go's encoding; the table matches the model. A transaction on a
// held table the catalog has moved past goes the loading way and lands
// on the catalog's table.
func TestMaintenanceCommitsOnTheHeldTable(t *testing.T) {
	cat := testCatalog(t)
	w := upsertWriter(t, cat, 3, 1)
	defer w.close()
	w.s.cfg.Maintenance = MaintenanceConfig{MaxDataManifests: 4, RetainSnapshots: 4, ExpireEvery: 3}.WithDefaults()
	w.s.cfg.Compaction = CompactionConfig{Disabled: true}
	rng := rand.New(rand.NewPCG(29, 7))
	want := model{}
	var off int64
	expired := 0
	for i := range 24 {
		before := 0
		if w.tbl != nil {
			before = len(w.tbl.Metadata().Snapshots())
		}
		w.buf = randomChanges(rng, want, 1+rng.IntN(30), &off)
		w.next[0] = off
		if err := w.commit(t.Context()); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		snaps := w.tbl.Metadata().Snapshots()
		if len(snaps) <= before {
			expired++
		}
		mc := &w.producer().meta
		if len(mc.snaps) != len(snaps) {
			t.Fatalf("commit %d: the cache holds %d snapshots, the table %d: maintenance did not commit through it", i, len(mc.snaps), len(snaps))
		}
		for _, s := range snaps {
			if _, ok := mc.snaps[s.SnapshotID]; !ok {
				t.Fatalf("commit %d: snapshot %d is not in the cache", i, s.SnapshotID)
			}
		}
		plain, err := plainMetadataJSON(w.tbl.Metadata())
		if err != nil {
			t.Fatal(err)
		}
		if got := readLocal(t, w.tbl.MetadataLocation()); !bytes.Equal(got, plain) {
			t.Fatalf("commit %d: the metadata file differs from iceberg-go's encoding", i)
		}
	}
	if expired == 0 || len(w.tbl.Metadata().Snapshots()) > 4+3 {
		t.Fatalf("expiry ran %d times; %d snapshots kept", expired, len(w.tbl.Metadata().Snapshots()))
	}
	compareModel(t, want, scanTable(t, cat, w.cfg.Ident))

	// The catalog moves on without the writer: a transaction on the held
	// table lands on the catalog's.
	held := w.tbl
	if _, _, err := cat.CommitTable(t.Context(), held.Identifier(), nil,
		[]table.Update{table.NewSetPropertiesUpdate(iceberg.Properties{"cdcd.a": "1"})}); err != nil {
		t.Fatal(err)
	}
	tx := held.NewTransaction()
	if err := tx.SetProperties(iceberg.Properties{"cdcd.b": "2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("a transaction on a table the catalog moved past: %v", err)
	}
	got, err := cat.LoadTable(t.Context(), held.Identifier())
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Properties(); p["cdcd.a"] != "1" || p["cdcd.b"] != "2" {
		t.Fatalf("after both commits the table's properties are %v", p)
	}
}
