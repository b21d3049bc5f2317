package crashsuite

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdcd-dev/cdcd/reconcile"
)

// The reconcile under the crash suite (issue 21): cdcd reconcile runs
// beside the daemon again and again while the workload writes and the
// daemon is killed and restarted, and once more after the round caught up;
// none of them may report a difference (the mirror is right: the round's
// checks say so). A run that could not compare a table (exit 1: the daemon
// was down too long, the table not created yet) proves nothing and is only
// counted.

// reconcileRun is one cdcd reconcile --json.
type reconcileRun struct {
	code   int
	tables []*reconcile.TableReport
	out    string
}

func runReconcile(bin, cfgPath string, timeout time.Duration) reconcileRun {
	cmd := exec.Command(bin, "reconcile", "-c", cfgPath, "--json")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return reconcileRun{code: -1, out: err.Error()}
	}
	timer := time.AfterFunc(timeout, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	timer.Stop()
	r := reconcileRun{out: out.String() + errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		r.code = -1
	}
	var doc struct {
		Tables []*reconcile.TableReport `json:"tables"`
	}
	if json.Unmarshal(out.Bytes(), &doc) == nil {
		r.tables = doc.Tables
	}
	return r
}

// differences lists what a run reported different.
func (r reconcileRun) differences() []string {
	var out []string
	for _, t := range r.tables {
		for _, d := range t.Differences() {
			out = append(out, t.Table+": "+d)
		}
	}
	return out
}

// reconciler runs cdcd reconcile in a loop until stopped.
type reconciler struct {
	stop chan struct{}
	done chan struct{}

	mu                       sync.Mutex
	runs, compared, unusable int
	rows, unchecked          int64
	reported                 []string // differences reported: each a false report
	whyNot                   string   // the first run that could not compare, in its words
	cfgPath                  string
}

// keep copies the round's directory (its log, warehouse and catalog as
// they are now) and the run's output under $CDCD_CRASH_KEEP, when set, for
// a post-mortem of a false report.
func (rc *reconciler) keep(r reconcileRun) {
	root := os.Getenv("CDCD_CRASH_KEEP")
	if root == "" {
		return
	}
	dst, _ := keepCopy(root, "report-", filepath.Dir(rc.cfgPath))
	if dst == "" {
		return
	}
	_ = os.WriteFile(filepath.Join(dst, "reconcile.out"), []byte(r.out), 0o644)
}

// keepCopy copies dir to root/PREFIXnnn/round and returns root/PREFIXnnn.
func keepCopy(root, prefix, dir string) (string, error) {
	dst, err := os.MkdirTemp(root, prefix)
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("cp", "-a", dir, filepath.Join(dst, "round")).CombinedOutput(); err != nil {
		return dst, fmt.Errorf("copying %s: %v: %s", dir, err, out)
	}
	return dst, nil
}

// keepFailedRound copies a failed round's directory (its log, warehouse,
// catalog, configuration and the daemon's whole log) under
// $CDCD_CRASH_KEEP, when set: a rare failure's records can then be read
// with the log's own tools instead of guessed from the log's tail.
func keepFailedRound(t *testing.T, dir string) {
	root := os.Getenv("CDCD_CRASH_KEEP")
	if root == "" {
		return
	}
	dst, err := keepCopy(root, "failed-", dir)
	if err != nil {
		t.Logf("CDCD_CRASH_KEEP: %v", err)
		return
	}
	t.Logf("the round's directory is kept in %s", dst)
}

func startReconciler(bin, cfgPath string) *reconciler {
	rc := &reconciler{stop: make(chan struct{}), done: make(chan struct{}), cfgPath: cfgPath}
	go func() {
		defer close(rc.done)
		for {
			select {
			case <-rc.stop:
				return
			default:
			}
			rc.record(runReconcile(bin, cfgPath, 3*time.Minute))
			select {
			case <-rc.stop:
			case <-time.After(time.Second): // leave the machine to the daemon a while
			}
		}
	}()
	return rc
}

func (rc *reconciler) record(r reconcileRun) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.runs++
	if d := r.differences(); len(d) > 0 || r.code == 4 {
		rc.reported = append(rc.reported, strings.Join(d, "; ")+" (exit "+strconv.Itoa(r.code)+")")
		rc.keep(r)
		return
	}
	if r.code != 0 {
		rc.unusable++
		if rc.whyNot == "" {
			rc.whyNot = "exit " + strconv.Itoa(r.code)
			for _, t := range r.tables {
				if t.Error != "" {
					rc.whyNot += "; " + t.Table + ": " + t.Error
				}
			}
			if len(r.tables) == 0 {
				rc.whyNot += ": " + r.out[max(0, len(r.out)-300):]
			}
		}
		return
	}
	rc.compared++
	for _, t := range r.tables {
		rc.rows += t.Rows
		rc.unchecked += t.Unchecked
	}
}

// finish stops the loop and fails t for any difference reported while the
// workload and the kills went on: the round's checks prove the mirror
// right at its end, so each is a false report or a loss that later
// changes overwrote (session 11: the load's missing column, found so).
func (rc *reconciler) finish(t *testing.T) {
	t.Helper()
	close(rc.stop)
	<-rc.done
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, f := range rc.reported {
		if i < 5 {
			t.Errorf("cdcd reconcile during the kills reported a difference: %s — a false report, or a loss that later changes "+
				"overwrote before the round's check (rerun with its seed and CDCD_CRASH_KEEP=DIR to keep the round's data)", f)
		}
	}
	t.Logf("reconcile during the kills: %d runs, %d compared every table (%d rows, %d keys unchecked as they kept changing), %d could not compare (the first: %s)",
		rc.runs, rc.compared, rc.rows, rc.unchecked, rc.unusable, rc.whyNot)
}

// requireReconcileEqual runs cdcd reconcile once the round caught up: every
// table equal, every row compared.
func requireReconcileEqual(t *testing.T, bin, cfgPath string) {
	t.Helper()
	r := runReconcile(bin, cfgPath, 5*time.Minute)
	if r.code != 0 || len(r.tables) == 0 {
		t.Errorf("cdcd reconcile after the round: exit %d, want 0 (equal): %s %s", r.code, strings.Join(r.differences(), "; "), r.out)
		return
	}
	for _, tb := range r.tables {
		if !tb.Equal() || tb.Unchecked != 0 {
			t.Errorf("cdcd reconcile after the round: %s: %v, %d unchecked", tb.Table, tb.Differences(), tb.Unchecked)
		}
	}
}
