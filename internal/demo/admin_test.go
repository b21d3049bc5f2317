package demo

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitOutput waits until the demo printed want.
func waitOutput(t *testing.T, out *syncBuffer, want string, ran <-chan error) {
	t.Helper()
	deadline := time.Now().Add(4 * time.Minute)
	for !strings.Contains(out.String(), want) {
		select {
		case err := <-ran:
			t.Fatalf("demo ended before %q: %v\n%s", want, err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo did not print %q in time:\n%s", want, out.String())
		}
	}
}

var adminLine = regexp.MustCompile(`Admin listener: (http://127\.0\.0\.1:\d+)  \(writes need the token ([0-9a-f]{32})\)`)

// checkAdmin: the admin listener the demo printed answers /status,
// /metrics and the registry without credentials, refuses a write without
// the token and takes it with the token.
func checkAdmin(t *testing.T, text, subject, table string) {
	t.Helper()
	m := adminLine.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the demo printed no admin listener and token:\n%s", text)
	}
	base, token := m[1], m[2]
	do := func(method, path, token string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]string{"/status": `"pipeline": "demo"`, "/metrics": "cdcd_build_info", "/subjects": subject} {
		if code, body := do(http.MethodGet, path, ""); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s = %d, want 200 with %q: %.300s", path, code, want, body)
		}
	}
	if code, _ := do(http.MethodPost, "/cdcd/compact/"+table, ""); code != http.StatusUnauthorized {
		t.Errorf("a write without the token: %d, want 401", code)
	}
	if code, body := do(http.MethodPost, "/cdcd/compact/"+table, token); code != http.StatusAccepted {
		t.Errorf("a write with the printed token: %d %s, want 202", code, body)
	}
}
