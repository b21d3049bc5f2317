package dbtest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how a test was ended.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Fatalf(f string, args ...any) { r.failed = fmt.Sprintf(f, args...) }
func (r *recorder) Skip(args ...any)             { r.skipped = fmt.Sprint(args...) }

func TestMissingBinaries(t *testing.T) {
	missing := errors.New("x is missing: install the x-server package")
	for _, tc := range []struct {
		ci         string
		wantFailed bool
	}{{"true", true}, {"1", true}, {"", false}, {"false", false}} {
		t.Setenv("CI", tc.ci)
		r := &recorder{TB: t}
		MissingBinaries(r, missing)
		got := r.skipped
		if tc.wantFailed {
			got = r.failed
		}
		if (r.failed != "") != tc.wantFailed || (r.skipped != "") == tc.wantFailed || !strings.Contains(got, "x-server") {
			t.Errorf("CI=%q: failed %q, skipped %q; want failed=%v with the package named", tc.ci, r.failed, r.skipped, tc.wantFailed)
		}
	}
}

func TestUniqueName(t *testing.T) {
	for _, tc := range []struct {
		test, kind string
		n          uint64
		want       string
	}{
		{"TestFoo", "db", 1, "db_testfoo_1"},
		{"TestFoo/Sub-Case #2", "slot", 12, "slot_testfoo_sub_case_2_12"},
		{"///", "pub", 3, "pub_3"},
	} {
		if got := UniqueName(tc.test, tc.kind, tc.n); got != tc.want {
			t.Errorf("UniqueName(%q, %q, %d) = %q, want %q", tc.test, tc.kind, tc.n, got, tc.want)
		}
	}
	long := UniqueName("Test"+strings.Repeat("VeryLong_", 20), "slot", 123456)
	if len(long) > 63 || !strings.HasSuffix(long, "_123456") || strings.Contains(long, "__") {
		t.Errorf("long name %q (%d bytes)", long, len(long))
	}
}
