package schema

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestWrongMethod: a path the API serves, asked with a method it does not
// serve there, answers 405 with Confluent's error body and the methods it
// allows; an unknown path answers 404.
func TestWrongMethod(t *testing.T) {
	_, _, url := serve(t, &testStore{})
	for _, tc := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{http.MethodPut, "/subjects", 405, "GET"},
		{http.MethodPatch, "/subjects/s/versions", 405, "GET, POST"},
		{http.MethodPost, "/schemas/ids/1", 405, "GET"},
		{http.MethodPut, "/mode", 405, "GET"},
		{http.MethodGet, "/nothing/here", 404, ""},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, url+tc.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body apiError
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || body.Code != tc.status || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: status %d, body %+v (%v), Allow %q; want %d, error_code %d, Allow %q",
				tc.method, tc.path, resp.StatusCode, body, err, resp.Header.Get("Allow"), tc.status, tc.status, tc.allow)
		}
	}
}

// TestMode: GET /mode and /mode/{subject} answer READWRITE, as Confluent's
// registry does by default (clients ask before they register).
func TestMode(t *testing.T) {
	_, _, url := serve(t, &testStore{})
	for _, path := range []string{"/mode", "/mode/s"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || body["mode"] != "READWRITE" {
			t.Errorf("GET %s: status %d, body %v (%v)", path, resp.StatusCode, body, err)
		}
	}
}
