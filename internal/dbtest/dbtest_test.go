package dbtest

import (
	"context"
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

// fakeServer records what the helpers did to it.
type fakeServer struct{ created, dropped, stopped []string }

func (f *fakeServer) Stop() error { f.stopped = append(f.stopped, "stop"); return nil }
func (f *fakeServer) CreateDatabase(_ context.Context, name string) error {
	f.created = append(f.created, name)
	return nil
}
func (f *fakeServer) DropDatabase(_ context.Context, name string) error {
	f.dropped = append(f.dropped, name)
	return nil
}
func (f *fakeServer) DSN(name string) string { return "fake://" + name }

func TestSharedNeedsMain(t *testing.T) {
	s := &Shared[*fakeServer]{Name: "faketest", Start: func() (*fakeServer, error) { return &fakeServer{}, nil }}
	r := &recorder{TB: t}
	s.Server(r) // the recorder's Fatalf returns, so Server goes on
	if !strings.Contains(r.failed, "faketest.Main(m)") {
		t.Errorf("Server without Main: failed %q, want the TestMain line to add", r.failed)
	}
}

func TestSharedOwnAndNewDB(t *testing.T) {
	s := &Shared[*fakeServer]{Name: "faketest"}
	var srv *fakeServer
	var dsn string
	t.Run("inner", func(t *testing.T) {
		srv = s.Own(t, func() (*fakeServer, error) { return &fakeServer{}, nil })
		dsn = s.NewDBOn(t, srv)
		if len(srv.created) != 1 || dsn != "fake://"+srv.created[0] || len(srv.dropped)+len(srv.stopped) != 0 {
			t.Fatalf("during the test: created %v, dropped %v, stopped %v, dsn %q", srv.created, srv.dropped, srv.stopped, dsn)
		}
	})
	if len(srv.dropped) != 1 || srv.dropped[0] != srv.created[0] || len(srv.stopped) != 1 {
		t.Errorf("after the test: created %v, dropped %v, stopped %v", srv.created, srv.dropped, srv.stopped)
	}
}
