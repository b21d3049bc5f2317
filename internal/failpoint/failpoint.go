// Package failpoint kills the process at named points, for crash tests.
//
// Failpoints exist only in binaries built with the build tag
// cdcd_failpoints (BuildTag): `go build -tags cdcd_failpoints ./cmd/cdcd`,
// `go test -tags cdcd_failpoints ./...` (make test does). Without the tag,
// as in `make build` and the release image, Hit compiles to nothing and
// CDCD_FAILPOINTS is never read, so a shipped binary cannot be told to kill
// itself by its environment. Knob (CDCD_KNOB_<name>) is read only there too.
//
// With the tag, points are inert unless the environment variable
// CDCD_FAILPOINTS lists them: "name" kills at the first hit, "name@N" at the
// Nth; several are separated by commas. A hit sends SIGKILL to the process
// itself, so nothing after the point runs — not even deferred functions —
// exactly like a crash at that instruction.
package failpoint

// Env is the environment variable that arms failpoints.
const Env = "CDCD_FAILPOINTS"

// BuildTag is the build tag that compiles failpoints in.
const BuildTag = "cdcd_failpoints"

// KnobPrefix begins the environment variables Knob reads.
const KnobPrefix = "CDCD_KNOB_"
