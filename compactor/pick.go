package compactor

import (
	"fmt"
	"sort"

	"github.com/apache/iceberg-go"
)

// pick chooses the files of one partition to rewrite: the files with at
// least DeleteRatio of their rows deleted, each due on its own, and the
// small ones (isSmall) in size tiers, up to MaxBytes and MaxRows of input.
// The small files, sorted by size, are cut into buckets of similar size (a
// file joins while it is at most twice the mean of the bucket so far); the
// largest-sized bucket of MinGroup files is merged. A merge's output is
// then at least (MinGroup+1)/2 times its largest input, so a row is
// rewritten about log3(table / commit) times over the table's life.
//
// At most maxFiles files are taken (mergeFiles); capped says whether the
// cap left files of the group for a next compaction.
//
// force (an operator's `cdcd compact`) takes every small file, not a tier.
func pick(cands []File, cc CompactionConfig, force bool, maxFiles int) (picked []iceberg.DataFile, capped bool) {
	byPart := map[string][]File{}
	for _, c := range cands {
		k := fmt.Sprint(c.DataFile.SpecID(), c.DataFile.Partition())
		byPart[k] = append(byPart[k], c)
	}
	keys := make([]string, 0, len(byPart))
	for k := range byPart {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var bytes, rows int64
	for _, k := range keys {
		var small, heavy []iceberg.DataFile
		for _, c := range byPart[k] {
			switch df := c.DataFile; {
			case df.Count() > 0 && float64(c.Deleted)/float64(df.Count()) >= cc.DeleteRatio:
				heavy = append(heavy, df)
			case isSmall(df, cc):
				small = append(small, df)
			}
		}
		bySize(heavy)
		bySize(small)
		group := heavy
		if force {
			if len(small) > 1 || len(heavy) > 0 {
				group = append(group, small...)
			}
		} else if b := pickBucket(small, cc.MinGroup); len(b) >= cc.MinGroup || (len(b) > 0 && len(heavy) > 0) {
			group = append(group, b...)
		}
		for _, df := range group {
			if len(picked) >= maxFiles {
				capped = true
				break
			}
			if (bytes+df.FileSizeBytes() > cc.MaxBytes || rows+df.Count() > cc.MaxRows) && len(picked) > 0 {
				break
			}
			picked = append(picked, df)
			bytes += df.FileSizeBytes()
			rows += df.Count()
		}
		if len(picked) > 0 {
			break // one partition per compaction
		}
	}
	return picked, capped
}

// readBytesPerColumn is what an open input file's column holds during a
// merge: a page as read (compressed) and decoded, 256 KiB each for the
// sink's files (pqPageSize).
const readBytesPerColumn = 512 << 10

// mergeFiles is how many files one merge may read at once within
// cc.MergeMemory for a table of sch's leaf columns; at least MinGroup.
func mergeFiles(cc CompactionConfig, sch *iceberg.Schema) int {
	cols := 1
	if sch != nil {
		st := sch.AsStruct()
		cols = max(1, leafColumns(&st))
	}
	return max(cc.MinGroup, int(cc.MergeMemory/(int64(cols)*readBytesPerColumn)))
}

// leafColumns counts the Parquet leaf columns a type is stored in.
func leafColumns(t iceberg.Type) int {
	switch t := t.(type) {
	case *iceberg.StructType:
		n := 0
		for _, f := range t.FieldList {
			n += leafColumns(f.Type)
		}
		return n
	case *iceberg.ListType:
		return leafColumns(t.Element)
	case *iceberg.MapType:
		return leafColumns(t.KeyType) + leafColumns(t.ValueType)
	default:
		return 1
	}
}

func bySize(g []iceberg.DataFile) {
	sort.Slice(g, func(i, j int) bool {
		if a, b := g[i].FileSizeBytes(), g[j].FileSizeBytes(); a != b {
			return a < b
		}
		return g[i].FilePath() < g[j].FilePath()
	})
}

// isSmall says whether df is a small file: under SmallFileRatio of the
// target size, and at most half of each compaction cap. A file of which
// two do not fit in one compaction is not small: a tier of them would be
// picked, cut to one file by the caps, and either dropped every cycle
// (starving the tiers below it) or rewritten alone again and again.
func isSmall(df iceberg.DataFile, cc CompactionConfig) bool {
	return float64(df.FileSizeBytes()) < cc.SmallFileRatio*float64(cc.TargetFileSize) &&
		2*df.FileSizeBytes() <= cc.MaxBytes && 2*df.Count() <= cc.MaxRows
}

// pickBucket cuts files (sorted by size) into buckets of similar size — a
// file joins a bucket while it is at most twice the bucket's mean — and
// returns the largest-sized bucket of at least min files, or the first
// bucket if none has that many. The largest first: under a steady stream
// the bucket of fresh files qualifies every cycle, so taking the smallest
// first would leave the higher tiers waiting for ever.
func pickBucket(files []iceberg.DataFile, min int) []iceberg.DataFile {
	var first, picked []iceberg.DataFile
	start, sum := 0, int64(0)
	for i := 0; i <= len(files); i++ {
		if i < len(files) && (i == start || files[i].FileSizeBytes()*int64(i-start) <= 2*sum) {
			sum += files[i].FileSizeBytes()
			continue
		}
		b := files[start:i]
		if len(b) >= min {
			picked = b
		}
		if first == nil {
			first = b
		}
		if i < len(files) {
			start, sum = i, files[i].FileSizeBytes()
		}
	}
	if picked == nil {
		return first
	}
	return picked
}
