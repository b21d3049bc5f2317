package compactor

import (
	"strings"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// The files an expiry leaves unreferenced are removed by the compactor,
// not by iceberg-go's ExpireSnapshots, whose clean-up after the commit
// reads every manifest of every kept snapshot, each time. The sink
// rewrites a table's delete manifest at every commit that touches a
// deletion vector, so every kept snapshot has a delete manifest of its
// own, one entry per data file with a vector: read again at every expiry,
// they would be a large share of a long stream's CPU (BENCHMARKS.md). The
// same rule here, with each manifest's entries recorded as the writer
// writes it (Manifests.Record), or read once, and kept (manifests never
// change) while a kept snapshot names the manifest.

// manifestRef is what the clean-up needs of one manifest entry.
type manifestRef struct {
	path    string // the data, delete or Puffin file
	deleted bool   // a DELETED entry, which keeps nothing alive
}

// Manifests holds the entries of the manifests the kept snapshots name, by
// manifest path: those the writer wrote, recorded as it wrote them, and
// those the expiry had to read. File paths are interned (a vector's Puffin
// file is named by many manifests). At most maxCachedRefs entries are
// held; past that a manifest is read each time it is needed.
type Manifests struct {
	refs   map[string][]manifestRef
	intern map[string]string
	n      int // entries held
}

// maxCachedRefs bounds a table's cache: 3,000 data files with vectors and
// 60 kept snapshots, each with a delete manifest of its own, hold 180,000.
const maxCachedRefs = 1 << 19

// entries returns the entries of mf, read once.
func (c *Manifests) entries(fs icebergio.IO, mf iceberg.ManifestFile) ([]manifestRef, error) {
	if refs, ok := c.refs[mf.FilePath()]; ok {
		return refs, nil
	}
	var refs []manifestRef
	for e, err := range mf.Entries(fs, false) {
		if err != nil {
			return nil, err
		}
		refs = append(refs, manifestRef{path: c.path(e.DataFile().FilePath()), deleted: e.Status() == iceberg.EntryStatusDELETED})
	}
	c.put(mf.FilePath(), refs)
	return refs, nil
}

// path returns p interned.
func (c *Manifests) path(p string) string {
	if c.intern == nil {
		c.intern = map[string]string{}
	}
	if s, ok := c.intern[p]; ok {
		return s
	}
	p = strings.Clone(p)
	c.intern[p] = p
	return p
}

// put records the entries of the manifest at path, within the bound.
func (c *Manifests) put(path string, refs []manifestRef) {
	if c.n+len(refs) > maxCachedRefs {
		return
	}
	if c.refs == nil {
		c.refs = map[string][]manifestRef{}
	}
	if old, ok := c.refs[path]; ok {
		c.n -= len(old)
	}
	c.refs[path] = refs
	c.n += len(refs)
}

// Record starts recording a manifest the writer writes: Add each entry as
// it is written, then Done with the manifest's path.
func (c *Manifests) Record() *ManifestRecord { return &ManifestRecord{c: c} }

// ManifestRecord is one manifest's entries being recorded.
type ManifestRecord struct {
	c    *Manifests
	refs []manifestRef
}

// Add records entry e.
func (r *ManifestRecord) Add(e iceberg.ManifestEntry) {
	r.refs = append(r.refs, manifestRef{path: r.c.path(e.DataFile().FilePath()), deleted: e.Status() == iceberg.EntryStatusDELETED})
}

// Done keeps the entries recorded as the manifest at path's.
func (r *ManifestRecord) Done(path string) { r.c.put(path, r.refs) }

// retain drops every manifest not in live, and the interned paths only
// they named.
func (c *Manifests) retain(live map[string]bool) {
	for p, refs := range c.refs {
		if !live[p] {
			delete(c.refs, p)
			c.n -= len(refs)
		}
	}
	if len(c.intern) > 2*len(c.refs)+1024 {
		intern := map[string]string{}
		for _, refs := range c.refs {
			for _, r := range refs {
				intern[r.path] = r.path
			}
		}
		c.intern = intern
	}
}

// expiredFiles returns the files the expiry from pre to post left
// unreferenced: the expired snapshots' manifest lists and statistics, their
// manifests that no kept snapshot names, and the files those manifests name
// that no kept manifest names in a live entry — iceberg-go's rule
// (removeSnapshotsUpdate.PostCommit).
func (c *Manifests) expiredFiles(fs icebergio.IO, pre, post table.Metadata) ([]string, error) {
	kept := map[int64]bool{}
	for _, s := range post.Snapshots() {
		kept[s.SnapshotID] = true
	}
	drop := map[string]bool{}
	expired := map[int64]bool{}
	for _, s := range pre.Snapshots() {
		if !kept[s.SnapshotID] {
			expired[s.SnapshotID] = true
			drop[s.ManifestList] = true
		}
	}
	if len(expired) == 0 {
		return nil, nil
	}
	for sf := range pre.Statistics() {
		if expired[sf.SnapshotID] && sf.StatisticsPath != "" {
			drop[sf.StatisticsPath] = true
		}
	}
	for psf := range pre.PartitionStatistics() {
		if expired[psf.SnapshotID] && psf.StatisticsPath != "" {
			drop[psf.StatisticsPath] = true
		}
	}
	live := map[string]bool{}
	var keptManifests []iceberg.ManifestFile
	for _, s := range post.Snapshots() {
		mfs, err := s.Manifests(fs)
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			if !live[mf.FilePath()] {
				live[mf.FilePath()] = true
				keptManifests = append(keptManifests, mf)
			}
		}
	}
	seen := map[string]bool{}
	for _, s := range pre.Snapshots() {
		if !expired[s.SnapshotID] {
			continue
		}
		mfs, err := s.Manifests(fs)
		if err != nil {
			return nil, err
		}
		for _, mf := range mfs {
			p := mf.FilePath()
			if live[p] || seen[p] {
				continue
			}
			seen[p] = true
			drop[p] = true
			refs, err := c.entries(fs, mf)
			if err != nil {
				return nil, err
			}
			for _, r := range refs {
				drop[r.path] = true
			}
		}
	}
	if len(drop) > 0 {
		for _, mf := range keptManifests {
			refs, err := c.entries(fs, mf)
			if err != nil {
				return nil, err
			}
			for _, r := range refs {
				if !r.deleted {
					delete(drop, r.path)
				}
			}
		}
		for sf := range post.Statistics() {
			delete(drop, sf.StatisticsPath)
		}
		for psf := range post.PartitionStatistics() {
			delete(drop, psf.StatisticsPath)
		}
	}
	c.retain(live)
	files := make([]string, 0, len(drop))
	for p := range drop {
		files = append(files, p)
	}
	return files, nil
}
