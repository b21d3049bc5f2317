// Package faultsuite is cdcd's fault-injection suite (issue 24): faults
// outside kill -9 — a replaced or damaged log, a publication changed by
// hand, one bad row, huge values, a full disk, bad input, an open admin port —
// injected into a running pipeline of the real cdcd binary on real
// PostgreSQL. Every test ends in one of two ways, never a third:
//
//   - a correct mirror: every source table equals its Iceberg table read
//     with iceberg-go's scan (internal/mirror), or
//   - a loud, specific stop of the affected table only: the table is
//     paused, CdcdTablePaused (or a more specific alert) names the cause and
//     the fix, the other tables flow — and then the test applies the fix and
//     checks the mirror.
//
// It is all in the package's tests (harness_test.go has the harness):
//
//	CI=true go test ./internal/faultsuite/
package faultsuite
