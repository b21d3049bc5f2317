//go:build !cdcd_failpoints

package failpoint

// Enabled reports whether failpoints are compiled into this binary.
const Enabled = false

// Hit does nothing: this binary was built without cdcd_failpoints.
func Hit(string) {}

// Reached returns false: this binary was built without cdcd_failpoints.
func Reached(string) bool { return false }

// Kill does nothing: this binary was built without cdcd_failpoints.
func Kill(string) {}

// Knob returns 0: this binary was built without cdcd_failpoints.
func Knob(string) int { return 0 }
