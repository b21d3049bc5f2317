package failpoint

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// hitChildEnv makes TestHitChild run: TestHit starts it in a child process.
const hitChildEnv = "CDCD_FAILPOINT_TEST_CHILD"

// TestHit runs TestHitChild with a point armed at its second hit. With
// failpoints compiled in, the child dies of SIGKILL at that hit and not
// before; without them (the default build), CDCD_FAILPOINTS is ignored and
// the child runs to the end.
func TestHit(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitChild$", "-test.v=false")
	cmd.Env = append(os.Environ(), hitChildEnv+"=1", Env+"=fp.test@2, fp.never")
	out, err := cmd.CombinedOutput()
	t.Logf("tags %q: child output:\n%s", BuildTag, out)
	if !Enabled {
		if err != nil || !strings.Contains(string(out), "hit 3") {
			t.Fatalf("built without %s, an armed CDCD_FAILPOINTS still stopped the child: %v", BuildTag, err)
		}
		return
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the child was not killed: %v", err)
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want SIGKILL", err)
	}
	if !strings.Contains(string(out), "hit 2") || strings.Contains(string(out), "hit 3") {
		t.Fatal("the child did not die at the second hit of fp.test")
	}
	if !strings.Contains(string(out), "failpoint: killing the process at fp.test") {
		t.Fatal("the child did not say where it was killed")
	}
}

// TestHitChild is TestHit's child; it does nothing in a normal run.
func TestHitChild(t *testing.T) {
	if os.Getenv(hitChildEnv) == "" {
		return
	}
	Hit("fp.other")
	fmt.Println("hit 1")
	Hit("fp.test")
	fmt.Println("hit 2")
	Hit("fp.test")
	fmt.Println("hit 3")
}
