package compactor

import (
	"fmt"
	"sort"
	"time"

	"github.com/cdcd-dev/cdcd/internal/icemeta"
)

// Stats are a table's compaction counters.
type Stats struct {
	Runs, FilesIn, FilesOut, BytesIn, BytesOut int64
	// RowsIn counts the rows of the files rewritten.
	RowsIn       int64
	Last         time.Time
	LastDuration time.Duration
	LastErr      string
}

// Status describes a table's files, as `cdcd maintenance status` shows
// them.
type Status struct {
	DataFiles      int     `json:"data_files"`
	DataBytes      int64   `json:"data_bytes"`
	Partitions     int     `json:"partitions"`
	FilesPerPart   float64 `json:"files_per_partition"`
	SizeP10        int64   `json:"size_p10"`
	SizeP50        int64   `json:"size_p50"`
	SizeP90        int64   `json:"size_p90"`
	SmallShare     float64 `json:"small_file_share"`
	Rows           int64   `json:"rows"`
	DeletedRows    int64   `json:"deleted_rows"`
	DeletedRatio   float64 `json:"deleted_ratio"`
	DeleteFiles    int     `json:"delete_files"`
	DataManifests  int     `json:"data_manifests"`
	DelManifests   int     `json:"delete_manifests"`
	Snapshots      int     `json:"snapshots"`
	CompactionRuns int64   `json:"compaction_runs"`
	LastCompaction string  `json:"last_compaction,omitempty"`
	LastError      string  `json:"last_error,omitempty"`
}

// Status computes the table's status; nil when the writer does not track
// the table's files (a changelog) or the table does not exist yet.
func (c *Compactor) Status() *Status {
	tbl, files := c.t.Current(), c.t.Files()
	if tbl == nil || files == nil {
		return nil
	}
	st := Status{DataFiles: len(files), DeleteFiles: c.t.DeleteFiles(),
		Snapshots: icemeta.SnapshotCount(tbl.Metadata()), CompactionRuns: c.stats.Runs, LastError: c.stats.LastErr}
	if !c.stats.Last.IsZero() {
		st.LastCompaction = c.stats.Last.UTC().Format(time.RFC3339)
	}
	sizes := make([]int64, 0, len(files))
	parts := map[string]bool{}
	small := 0
	for _, f := range files {
		df := f.DataFile
		sizes = append(sizes, df.FileSizeBytes())
		st.DataBytes += df.FileSizeBytes()
		st.Rows += df.Count()
		st.DeletedRows += f.Deleted
		parts[fmt.Sprint(df.SpecID(), df.Partition())] = true
		if isSmall(df, c.cc) {
			small++
		}
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	if n := len(sizes); n > 0 {
		st.SizeP10, st.SizeP50, st.SizeP90 = sizes[n/10], sizes[n/2], sizes[n*9/10]
		st.SmallShare = float64(small) / float64(n)
	}
	st.Partitions = len(parts)
	if st.Partitions > 0 {
		st.FilesPerPart = float64(st.DataFiles) / float64(st.Partitions)
	}
	if st.Rows > 0 {
		st.DeletedRatio = float64(st.DeletedRows) / float64(st.Rows)
	}
	st.DataManifests, st.DelManifests = c.t.Manifests()
	return &st
}
