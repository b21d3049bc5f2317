package postgres

import (
	"strings"
	"testing"
	"time"
)

// TestLargeTransactionWhilePublicationCheckDue: a transaction still
// arriving when the publication check comes due (here every 20 ms) is
// read to its end: the check waits for it, and so must no receive.
// Before, the due check made every receive's deadline one already past,
// so a transaction with a message larger than what was buffered (a large
// value) was never read on (found with a 20 MB value, the daemon stuck
// in "streaming" for minutes).
func TestLargeTransactionWhilePublicationCheckDue(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"big"}, false, c, func(cfg *Config) { cfg.PublicationCheckInterval = 20 * time.Millisecond })
	defer stop()
	e.exec(t, `INSERT INTO big VALUES (0, 'before')`)
	c.wait(t, 1)
	large := strings.Repeat("abcdefghij", 1<<20) // 10 MB, uncompressed in the WAL: no two alike
	tx, err := e.conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := tx.Exec(t.Context(), `INSERT INTO big VALUES ($1, $2)`, i, large[i:]+large[:i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := c.wait(t, 4)
	for i, ch := range got[1:] {
		if v, _ := ch.After[1].(string); len(v) != len(large) {
			t.Errorf("change %d: value of %d bytes, want %d", i+1, len(v), len(large))
		}
	}
}
