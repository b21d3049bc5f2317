package log

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// OffsetsTopic is the internal compacted topic holding consumer-group
// offsets. Topics whose names begin with "_" are internal to cdcd.
const OffsetsTopic = "_offsets"

// Limits on topics.
const (
	maxTopicNameLen = 249 // Kafka's limit
	maxPartitions   = 10000
	// DefaultDeleteRetention is TopicConfig.DeleteRetention when 0.
	DefaultDeleteRetention = 24 * time.Hour
)

// IsInternalTopic reports whether a topic name is internal to cdcd
// (begins with "_").
func IsInternalTopic(name string) bool { return strings.HasPrefix(name, "_") }

// validateTopicName accepts Kafka's legal names: 1–249 characters from
// [a-zA-Z0-9._-], not "." or "..", and (here) not starting with ".".
func validateTopicName(name string) error {
	if name == "" || len(name) > maxTopicNameLen {
		return fmt.Errorf("%w: name %q must be 1 to %d characters", ErrInvalidTopic, name, maxTopicNameLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("%w: name %q must not begin with '.'", ErrInvalidTopic, name)
	}
	for _, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			return fmt.Errorf("%w: name %q has %q; use only letters, digits, '.', '_' and '-'", ErrInvalidTopic, name, c)
		}
	}
	return nil
}

// normalizeConfig fills in defaults and rejects bad values.
func normalizeConfig(name string, cfg TopicConfig) (TopicConfig, error) {
	if cfg.Partitions < 1 || cfg.Partitions > maxPartitions {
		return cfg, fmt.Errorf("%w: %s: Partitions %d not in [1, %d]", ErrInvalidTopic, name, cfg.Partitions, maxPartitions)
	}
	if cfg.Retention < 0 || cfg.RetentionBytes < 0 || cfg.DeleteRetention < 0 {
		return cfg, fmt.Errorf("%w: %s: Retention, RetentionBytes and DeleteRetention must not be negative", ErrInvalidTopic, name)
	}
	switch cfg.Cleanup {
	case "":
		cfg.Cleanup = CleanupDelete
	case CleanupDelete, CleanupCompact:
	default:
		return cfg, fmt.Errorf("%w: %s: Cleanup %q is neither %q nor %q", ErrInvalidTopic, name, cfg.Cleanup, CleanupDelete, CleanupCompact)
	}
	if cfg.DeleteRetention == 0 {
		cfg.DeleteRetention = DefaultDeleteRetention
	}
	return cfg, nil
}

// topicMeta is the JSON of topic.json.
type topicMeta struct {
	Version           int    `json:"version"`
	Name              string `json:"name"`
	Partitions        int32  `json:"partitions"`
	RetentionMs       int64  `json:"retention_ms"`
	RetentionBytes    int64  `json:"retention_bytes"`
	Cleanup           string `json:"cleanup"`
	DeleteRetentionMs int64  `json:"delete_retention_ms"`
	// ID is the random identity of this incarnation of the topic (see
	// TopicInfo.ID); absent in topics created before identities existed,
	// which get one at the next writable Open.
	ID string `json:"id,omitempty"`
}

// storedTopic is what topic.json holds.
type storedTopic struct {
	name string
	id   string // "" if the file has none yet
	cfg  TopicConfig
}

func encodeMeta(st storedTopic) []byte {
	name, cfg := st.name, st.cfg
	b, _ := json.MarshalIndent(topicMeta{
		Version: 1, Name: name, Partitions: cfg.Partitions, ID: st.id,
		RetentionMs: cfg.Retention.Milliseconds(), RetentionBytes: cfg.RetentionBytes,
		Cleanup: string(cfg.Cleanup), DeleteRetentionMs: cfg.DeleteRetention.Milliseconds(),
	}, "", "  ")
	return append(b, '\n')
}

func readMeta(fs FS, dir string) (storedTopic, error) {
	path := filepath.Join(dir, topicMetaName)
	b, err := readFile(fs, path)
	if err != nil {
		return storedTopic{}, err
	}
	var m topicMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return storedTopic{}, &CorruptionError{Path: path, Reason: err.Error()}
	}
	if m.Version != 1 {
		return storedTopic{}, &CorruptionError{Path: path, Reason: fmt.Sprintf("unknown version %d", m.Version)}
	}
	if m.ID != "" && !validID(m.ID) {
		return storedTopic{}, &CorruptionError{Path: path, Reason: fmt.Sprintf("topic identity %q is not %d hex digits", m.ID, 2*idBytes)}
	}
	cfg := TopicConfig{
		Partitions: m.Partitions, Retention: time.Duration(m.RetentionMs) * time.Millisecond,
		RetentionBytes: m.RetentionBytes, Cleanup: CleanupPolicy(m.Cleanup),
		DeleteRetention: time.Duration(m.DeleteRetentionMs) * time.Millisecond,
	}
	cfg, err = normalizeConfig(m.Name, cfg)
	if err != nil {
		return storedTopic{}, &CorruptionError{Path: path, Reason: err.Error()}
	}
	return storedTopic{name: m.Name, id: m.ID, cfg: cfg}, nil
}

// writeMeta replaces topic.json atomically and durably.
func writeMeta(fs FS, dir string, st storedTopic) error {
	return replaceFile(fs, filepath.Join(dir, topicMetaName), encodeMeta(st), true)
}

// createTopicDir builds a topic directory under a temporary name (config
// file with a new identity, fsynced; one directory per partition) and
// renames it into place, so a crash leaves either no topic or a whole one.
func createTopicDir(fs FS, topicsDir, name string, cfg TopicConfig) (string, error) {
	tmp, err := mkdirTemp(fs, topicsDir, tmpPrefix+name+"-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = fs.RemoveAll(tmp)
		return "", err
	}
	if err := writeMeta(fs, tmp, storedTopic{name: name, id: newID(), cfg: cfg}); err != nil {
		return fail(err)
	}
	for i := int32(0); i < cfg.Partitions; i++ {
		pdir := filepath.Join(tmp, fmt.Sprint(i))
		if err := fs.Mkdir(pdir, 0o755); err != nil {
			return fail(err)
		}
		if _, err := createSegmentFile(fs, pdir); err != nil {
			return fail(err)
		}
	}
	if err := syncDir(fs, tmp); err != nil {
		return fail(err)
	}
	dst := filepath.Join(topicsDir, name)
	if err := fs.Rename(tmp, dst); err != nil {
		return fail(err)
	}
	return dst, syncDir(fs, topicsDir)
}

// createSegmentFile creates the first (empty) segment of a new partition
// and fsyncs the partition directory.
func createSegmentFile(fs FS, pdir string) (string, error) {
	s, err := createSegment(fs, pdir, 0)
	if err != nil {
		return "", err
	}
	return s.path, s.f.Close()
}

// removeTopicDir renames a topic directory aside (durably) and removes it;
// Open removes leftovers of a crash in between.
func removeTopicDir(fs FS, topicsDir, name string) error {
	aside, err := mkdirTemp(fs, topicsDir, deletedPrefix+name+"-")
	if err != nil {
		return err
	}
	_ = fs.Remove(aside)
	if err := fs.Rename(filepath.Join(topicsDir, name), aside); err != nil {
		return err
	}
	if err := syncDir(fs, topicsDir); err != nil {
		return err
	}
	return fs.RemoveAll(aside)
}
