package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/daemon"
)

// TestSnapshotCommand: flags may follow the tables (as the docs write
// `cdcd snapshot -c FILE TABLE --where SQL`); the request reaches the
// daemon's API as JSON; --replace with --where is refused before asking.
func TestSnapshotCommand(t *testing.T) {
	var got []daemon.SnapshotRequest
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		var req daemon.SnapshotRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		got = append(got, req)
		if r.URL.Path == "/cdcd/snapshot" {
			w.WriteHeader(http.StatusAccepted)
		}
		_, _ = w.Write([]byte("{}\n"))
	}))
	defer srv.Close()
	var out, errb bytes.Buffer
	if code := run(t.Context(), []string{"snapshot", "--admin", srv.URL, "public.a", "--where", "id > 5", "b"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if code := run(t.Context(), []string{"snapshot", "--admin", srv.URL, "--replace", "c"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if code := run(t.Context(), []string{"snapshot", "stop", "--admin", srv.URL, "c"}, nil, &out, &errb); code != exitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := []daemon.SnapshotRequest{{Tables: []string{"public.a", "b"}, Where: "id > 5"}, {Tables: []string{"c"}, Replace: true}, {Tables: []string{"c"}}}
	if len(got) != 3 || !equalReq(got[0], want[0]) || !equalReq(got[1], want[1]) || !equalReq(got[2], want[2]) {
		t.Fatalf("requests %+v, want %+v", got, want)
	}
	if paths[2] != "POST /cdcd/snapshot/stop" {
		t.Fatalf("stop went to %s", paths[2])
	}
	errb.Reset()
	if code := run(t.Context(), []string{"snapshot", "--admin", srv.URL, "--replace", "--where", "x", "c"}, nil, &out, &errb); code != exitUsage ||
		!strings.Contains(errb.String(), "use one") || len(got) != 3 {
		t.Fatalf("--replace with --where: exit %d, %q, %d requests", code, errb.String(), len(got))
	}
}

func equalReq(a, b daemon.SnapshotRequest) bool {
	return strings.Join(a.Tables, ",") == strings.Join(b.Tables, ",") && a.Where == b.Where && a.Replace == b.Replace
}
