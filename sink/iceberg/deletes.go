package iceberg

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strconv"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/puffin"
	"github.com/apache/iceberg-go/table"
	"github.com/apache/iceberg-go/table/dv"
)

// writeDeletes marks the replaced and deleted rows' old positions: one
// Puffin file of merged deletion vectors (v3) or one position-delete file
// (v2) per commit.
func (u *upsert) writeDeletes(ctx context.Context, w *tableWriter, fs icebergio.IO, wfs icebergio.WriteFileIO, tbl *table.Table, deleted map[string][]int64, p *plan) error {
	if len(deleted) == 0 {
		return nil
	}
	if tbl.Metadata().Version() >= 3 {
		return u.writeDVs(ctx, w, fs, wfs, tbl, deleted, p)
	}
	return u.writePositionDeletes(w, wfs, tbl, deleted, p)
}

// writeDVs loads each touched data file's current vector, merges the new
// positions into it and writes all vectors into one Puffin file; the old
// vectors are removed in the same commit (two live vectors for one data
// file make the table unreadable).
func (u *upsert) writeDVs(ctx context.Context, w *tableWriter, fs icebergio.IO, wfs icebergio.WriteFileIO, tbl *table.Table, deleted map[string][]int64, p *plan) error {
	files := make([]string, 0, len(deleted))
	for f := range deleted {
		files = append(files, f)
	}
	sort.Strings(files)
	var held map[string]bool // vectors taken from the cache: encoded before
	for _, path := range files {
		var bm *dv.RoaringPositionBitmap
		if old, ok := u.dvs[path]; ok {
			if c, ok := u.dvCache[path]; ok && c.puffin == old.FilePath() {
				// The cached vector takes the new positions in place (no
				// copy: big vectors are written at nearly every commit),
				// and leaves the cache: if this commit does not land, the
				// next one reads the live vector from its Puffin file again.
				bm = c.bm
				delete(u.dvCache, path)
				if held == nil {
					held = map[string]bool{}
				}
				held[path] = true
			} else {
				cur, err := dv.ReadDV(fs, old)
				if err != nil {
					return fmt.Errorf("iceberg: read deletion vector of %s: %w", path, err)
				}
				bm = cur
			}
			p.removedDVs = append(p.removedDVs, old)
		}
		bm, err := withPositions(bm, deleted[path])
		if err != nil {
			return fmt.Errorf("iceberg: %s: %w", path, err)
		}
		p.bitmaps[path] = bm
	}
	dvs, err := u.flushDVs(wfs, w.files.data(tbl, "", "puffin"), tbl.Metadata(), files, p.bitmaps, held)
	if err != nil {
		return fmt.Errorf("iceberg: write deletion vectors: %w", err)
	}
	w.failpoint("after-puffin-file")
	for _, d := range dvs {
		if ref := d.ReferencedDataFile(); ref != nil {
			p.newDVs[*ref] = d
		}
	}
	p.deletes = append(p.deletes, dvs...)
	return nil
}

// withPositions returns bm (nil: a new vector) with positions (one
// commit's) marked. A vector encoded before holds run containers
// (encodeDV), and roaring re-picks a run container's kind at every single
// add into it: the positions are gathered in a bitmap of their own first
// and merged in one union per container.
func withPositions(bm *dv.RoaringPositionBitmap, positions []int64) (*dv.RoaringPositionBitmap, error) {
	add := dv.NewRoaringPositionBitmap()
	for _, pos := range positions {
		if pos < 0 {
			return nil, fmt.Errorf("negative row position %d", pos)
		}
		add.Set(uint64(pos))
	}
	if bm == nil {
		return add, nil
	}
	bm.Or(add)
	return bm, nil
}

// flushDVs writes the vectors of files into one Puffin file at location and
// returns their delete-file entries. The file is streamed (iceberg-go's
// DVWriter builds it in a growing in-memory buffer, and a large table's
// vectors add up to megabytes a commit). The vectors in held were encoded
// before (see encodeDV).
func (u *upsert) flushDVs(wfs icebergio.WriteFileIO, location string, meta table.Metadata, files []string,
	bms map[string]*dv.RoaringPositionBitmap, held map[string]bool) (_ []iceberg.DataFile, err error) {
	out, err := wfs.Create(location)
	if err != nil {
		return nil, err
	}
	defer func() {
		if out != nil {
			_ = out.Close()
			_ = wfs.Remove(location)
		}
	}()
	if u.dvOut == nil {
		u.dvOut = bufio.NewWriterSize(out, 256<<10)
	}
	bw := u.dvOut
	bw.Reset(out)
	defer bw.Reset(io.Discard) // the buffer stays; the file is not held
	cw := &countingWriter{w: bw}
	pw, err := puffin.NewWriter(cw)
	if err != nil {
		return nil, err
	}
	blobs := make([]puffin.BlobMetadata, len(files))
	for i, path := range files {
		b, err := u.encodeDV(bms[path], !held[path])
		if err != nil {
			return nil, fmt.Errorf("serialize the vector of %s: %w", path, err)
		}
		if blobs[i], err = pw.AddBlob(puffin.BlobMetadataInput{
			Type: puffin.BlobTypeDeletionVector, SnapshotID: -1, SequenceNumber: -1, Fields: []int32{},
			Properties: map[string]string{
				"cardinality":          strconv.FormatInt(bms[path].Cardinality(), 10),
				"referenced-data-file": path,
			},
		}, b); err != nil {
			return nil, err
		}
	}
	if err := pw.Finish(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	err = out.Close()
	out = nil
	if err != nil {
		_ = wfs.Remove(location)
		return nil, err
	}
	dfs := make([]iceberg.DataFile, len(files))
	for i, path := range files {
		df := u.data[path]
		if df == nil {
			return nil, fmt.Errorf("a deletion vector for %s, which is not a live data file", path)
		}
		spec := meta.PartitionSpecByID(int(df.SpecID()))
		if spec == nil {
			return nil, fmt.Errorf("unknown partition spec %d of %s", df.SpecID(), path)
		}
		b, err := iceberg.NewDataFileBuilder(*spec, iceberg.EntryContentPosDeletes, location, iceberg.PuffinFile,
			df.Partition(), nil, nil, bms[path].Cardinality(), cw.n)
		if err != nil {
			return nil, err
		}
		dfs[i] = b.ReferencedDataFile(path).ContentOffset(blobs[i].Offset).ContentSizeInBytes(blobs[i].Length).Build()
	}
	return dfs, nil
}

// encodeDV serializes a deletion vector as the spec lays it out — length
// (big-endian, of magic and bitmap), magic, the portable 64-bit roaring
// bitmap, CRC-32 of magic and bitmap (big-endian) — into a buffer reused
// from one vector to the next (valid until the next call). It converts
// containers to runs where that is smaller (what dv.SerializeDV does every
// time) only when optimize is set: a vector this writer encoded before got
// that at its first encoding, and a large table's big vectors are written
// again at nearly every commit, so re-checking every container each time
// is costly. Positions added since stay in the container kind roaring
// picks for them; readers take every kind.
func (u *upsert) encodeDV(bm *dv.RoaringPositionBitmap, optimize bool) ([]byte, error) {
	if optimize {
		bm.RunLengthEncode()
	}
	b := bytes.NewBuffer(u.dvBuf[:0])
	b.Write([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	binary.LittleEndian.PutUint32(b.Bytes()[4:8], dv.DVMagicNumber)
	if err := bm.Serialize(b); err != nil {
		return nil, err
	}
	n := b.Len() - 4
	if uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("deletion vector of %d bytes", n)
	}
	binary.BigEndian.PutUint32(b.Bytes()[:4], uint32(n))
	crc := crc32.ChecksumIEEE(b.Bytes()[4:])
	b.Write(binary.BigEndian.AppendUint32(nil, crc))
	u.dvBuf = b.Bytes()
	return u.dvBuf, nil
}

// currentDV returns a data file's live deletion vector: from the cache of
// vectors this writer committed, else read from its Puffin file.
func (u *upsert) currentDV(fs icebergio.IO, path string, live iceberg.DataFile) (*dv.RoaringPositionBitmap, error) {
	if c, ok := u.dvCache[path]; ok && c.puffin == live.FilePath() {
		return c.bm, nil
	}
	bm, err := dv.ReadDV(fs, live)
	if err != nil {
		return nil, fmt.Errorf("iceberg: read deletion vector of %s: %w", path, err)
	}
	return bm, nil
}

// cachedDV is a committed deletion vector kept in memory, valid while the
// live vector of its data file is the one in puffin.
type cachedDV struct {
	puffin string
	bm     *dv.RoaringPositionBitmap
}

// writePositionDeletes writes one position-delete file (file_path, pos)
// per partition of the touched data files, sorted as the spec requires.
func (u *upsert) writePositionDeletes(w *tableWriter, wfs icebergio.WriteFileIO, tbl *table.Table, deleted map[string][]int64, p *plan) error {
	fsch, err := newFileSchema(iceberg.PositionalDeleteSchema)
	if err != nil {
		return err
	}
	part, err := newPartitioner(tbl.Schema(), tbl.Spec())
	if err != nil {
		return err
	}
	groups := map[string][]string{}
	var order []string
	for f := range deleted {
		key := fmt.Sprint(u.data[f].Partition())
		if groups[key] == nil {
			order = append(order, key)
		}
		groups[key] = append(groups[key], f)
	}
	sort.Strings(order)
	for _, key := range order {
		files := groups[key]
		sort.Strings(files)
		d := newDataFileWriter(fsch)
		for _, f := range files {
			pos := deleted[f]
			sort.Slice(pos, func(i, j int) bool { return pos[i] < pos[j] })
			for _, x := range pos {
				if err := d.add([]any{f, x}); err != nil {
					return err
				}
			}
		}
		values := u.data[files[0]].Partition()
		partPath := ""
		if part.partitioned() {
			partPath = part.path(values)
		}
		path := w.files.data(tbl, partPath, "parquet")
		df, err := d.finishAs(wfs, path, tbl, iceberg.EntryContentPosDeletes, referenced(files), values)
		if err != nil {
			return err
		}
		p.deletes = append(p.deletes, df)
	}
	w.failpoint("after-puffin-file")
	return nil
}

// referenced returns the single data file a position-delete file applies
// to, or nil when it covers several.
func referenced(files []string) *string {
	if len(files) == 1 {
		return &files[0]
	}
	return nil
}
