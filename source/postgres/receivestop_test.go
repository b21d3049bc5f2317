package postgres

import (
	"testing"
	"time"
)

// TestStopEndsAnIdleReceive: a reader waiting for the next message of an
// idle stream stops at once when cancelled, although nothing in its
// schedule (status, heartbeat, publication check) is due for a minute:
// the cancel moves the connection's read deadline, which is all the
// receive waits on.
func TestStopEndsAnIdleReceive(t *testing.T) {
	t.Parallel()
	e := setup(t, `CREATE TABLE idle (id int PRIMARY KEY)`)
	c := newCollector()
	stop, _ := e.startReader(t, []string{"idle"}, false, c, func(cfg *Config) {
		cfg.StatusInterval, cfg.HeartbeatInterval, cfg.PublicationCheckInterval = time.Minute, time.Minute, time.Minute
	})
	e.exec(t, `INSERT INTO idle VALUES (1)`)
	c.wait(t, 1)
	time.Sleep(200 * time.Millisecond) // the reader is back in its receive
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Far below the minute the schedule would wait (and the walsender's keepalive,
	// which without the cancel ended the wait after about 10 s here).
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the reader took %v to stop: the cancel did not end its receive", took)
	}
}
