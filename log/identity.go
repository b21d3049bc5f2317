package log

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// idBytes is the size of the random part of a log or topic identity.
const idBytes = 8

// newID returns a random identity: idBytes random bytes in hex.
func newID() string {
	b := make([]byte, idBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

// validID reports whether s looks like an identity newID made.
func validID(s string) bool {
	if len(s) != 2*idBytes {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// loadLogID reads the log directory's identity from <dir>/log.id, creating
// it (atomically and durably) when the file is missing and the log is
// writable. A read-only log without one gets "" (its topics' IDs are then
// empty too).
func loadLogID(fs FS, dir string, readOnly bool) (string, error) {
	path := filepath.Join(dir, logIDFileName)
	b, err := readFile(fs, path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !validID(id) {
			return "", &CorruptionError{Path: path, Reason: fmt.Sprintf("log identity %q is not %d hex digits; "+
				"remove the file to give the log a new identity (tables mirrored from it will then need a re-snapshot)", id, 2*idBytes)}
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("log: read %s: %w", path, err)
	case readOnly:
		return "", nil
	}
	id := newID()
	if err := replaceFile(fs, path, []byte(id+"\n"), true); err != nil {
		return "", fmt.Errorf("log: write %s: %w", path, err)
	}
	return id, nil
}

// topicID combines the log's and the topic's identities into
// TopicInfo.ID; "" when either is unknown (a read-only log that no writer
// has given identities yet).
func topicID(logID, topic string) string {
	if logID == "" || topic == "" {
		return ""
	}
	return logID + "-" + topic
}
