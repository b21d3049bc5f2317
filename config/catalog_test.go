package config

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// Catalog and storage keys: rest credentials, the s3 section.

const (
	catalogLine   = "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}"
	warehouseLine = "    warehouse: file:///var/lib/cdcd/warehouse"
	// s3Lines replace warehouseLine: the warehouse stays on line 17, the
	// s3 keys are lines 18 to 24.
	s3Lines = `    warehouse: s3://lake/cdc
    s3:
      endpoint: http://127.0.0.1:9000
      region: us-east-1
      path_style: true
      access_key_id: ${AWS_ACCESS_KEY_ID}
      secret_access_key: ${AWS_SECRET_ACCESS_KEY}`
)

var storageEnv = WithLookupEnv(func(name string) (string, bool) {
	v, ok := map[string]string{
		"PGPASSWORD":            "s3cret",
		"AWS_ACCESS_KEY_ID":     "AKIDs3cret",
		"AWS_SECRET_ACCESS_KEY": "wJalrs3cret",
		"CATALOG_TOKEN":         "tok-s3cret",
		"CATALOG_CREDENTIAL":    "cdcd:cred-s3cret",
	}[name]
	return v, ok
})

func parseWith(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), "cdcd.yaml", storageEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return c
}

func TestValidateCatalogAndStorage(t *testing.T) {
	s3Edit := func(old, new string) string {
		return edit(t, warehouseLine, strings.Replace(s3Lines, old, new, 1))
	}
	cases := []struct {
		name, src string
		w         want
	}{
		{"credential on sql", edit(t, catalogLine, "    catalog: {type: sql, credential: 'a:b'}"),
			want{"sink.iceberg.catalog.credential", 16, 26, ErrInvalid, "is for rest catalogs only"}},
		{"token on sql", edit(t, catalogLine, "    catalog: {token: abc}"),
			want{"sink.iceberg.catalog.token", 16, 15, ErrInvalid, "is for rest catalogs only"}},
		{"credential and token", edit(t, catalogLine, "    catalog: {type: rest, uri: 'http://c', credential: 'a:b', token: abc}"),
			want{"sink.iceberg.catalog.token", 16, 63, ErrInvalid, "set credential (OAuth2 client credentials, exchanged for a token) or token (a bearer token), not both (credential is set at line 16)"}},
		{"s3 without s3 warehouse", edit(t, warehouseLine, warehouseLine+"\n    s3: {region: us-east-1}"),
			want{"sink.iceberg.s3", 18, 5, ErrInvalid, "applies to s3:// warehouses, but the warehouse is file:// at line 17"}},
		{"s3 endpoint scheme", s3Edit("http://127.0.0.1:9000", "127.0.0.1:9000"),
			want{"sink.iceberg.s3.endpoint", 19, 7, ErrInvalid, "must be an http:// or https:// URL"}},
		{"s3 endpoint host", s3Edit("http://127.0.0.1:9000", "'http://'"),
			want{"sink.iceberg.s3.endpoint", 19, 7, ErrInvalid, "is not a URL with a host"}},
		{"s3 region", s3Edit("us-east-1", "'us east'"),
			want{"sink.iceberg.s3.region", 20, 7, ErrInvalid, `"us east" is not a region name`}},
		{"s3 key without secret", s3Edit("      secret_access_key: ${AWS_SECRET_ACCESS_KEY}", "      # no secret"),
			want{"sink.iceberg.s3.secret_access_key", 18, 5, ErrInvalid, "required with access_key_id"}},
		{"s3 secret without key", s3Edit("      access_key_id: ${AWS_ACCESS_KEY_ID}", "      # no key"),
			want{"sink.iceberg.s3.access_key_id", 18, 5, ErrInvalid, "required with secret_access_key"}},
		{"s3 path style type", s3Edit("path_style: true", "path_style: sometimes"),
			want{"sink.iceberg.s3.path_style", 21, 7, ErrType, "expected"}},
		{"s3 unknown key", s3Edit("region:", "regoin:"),
			want{"sink.iceberg.s3.regoin", 20, 7, ErrUnknownKey, "did you mean region?"}},
		{"rest warehouse with spaces", edit(t, catalogLine, "    catalog: {type: rest, uri: 'https://c'}\n    warehouse: ' prod '\n    namespace: cdc"),
			want{"sink.iceberg.warehouse", 17, 5, ErrInvalid, "surrounding spaces"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "credential and token" || tc.name == "rest warehouse with spaces" {
				tc.src = strings.Replace(tc.src, warehouseLine+"\n", "", 1)
			}
			errs := problemsWith(t, tc.src)
			for _, e := range errs {
				if e.Path == tc.w.path && strings.Contains(e.Msg, tc.w.substr) {
					if e.Line != tc.w.line || tc.w.col != 0 && e.Column != tc.w.col {
						t.Errorf("%s: at %d:%d, want %d:%d", e.Path, e.Line, e.Column, tc.w.line, tc.w.col)
					}
					if !errors.Is(e, tc.w.class) {
						t.Errorf("%v: class %v, want %v", e, e.Err, tc.w.class)
					}
					return
				}
			}
			t.Errorf("no problem at %s containing %q; got:\n%v", tc.w.path, tc.w.substr, errs)
		})
	}
}

func problemsWith(t *testing.T, src string) Errors {
	t.Helper()
	_, err := Parse([]byte(src), "cdcd.yaml", storageEnv)
	errs, ok := err.(Errors)
	if !ok || len(errs) == 0 {
		t.Fatalf("want problems, got %v for:\n%s", err, src)
	}
	return errs
}

func TestCatalogAndStorageAccepts(t *testing.T) {
	for _, src := range []string{
		edit(t, warehouseLine, s3Lines),
		edit(t, catalogLine, "    catalog: {type: rest, uri: 'https://c.example.com', credential: '${CATALOG_CREDENTIAL}'}"),
		edit(t, catalogLine, "    catalog: {type: rest, uri: 'https://c.example.com', token: '${CATALOG_TOKEN}'}"),
		// A rest catalog's warehouse may be a name the server knows, and
		// the s3 section applies to the locations it hands out.
		strings.Replace(edit(t, catalogLine, "    catalog: {type: rest, uri: 'https://c.example.com'}"),
			warehouseLine, "    warehouse: prod\n    s3: {region: eu-west-1}", 1),
	} {
		parseWith(t, src)
	}
}

func TestCatalogAndStorageDefaults(t *testing.T) {
	c := parseWith(t, edit(t, warehouseLine, s3Lines))
	s3 := c.Sink.Iceberg.S3
	if s3 == nil || s3.Endpoint != "http://127.0.0.1:9000" || !s3.PathStyle || s3.AccessKeyID != "AKIDs3cret" || s3.SecretAccessKey != "wJalrs3cret" {
		t.Fatalf("s3 = %+v", s3)
	}
	// path_style defaults to true with an endpoint, false without; an
	// explicit false stays.
	for _, tc := range []struct {
		old, new string
		want     bool
	}{
		{"      path_style: true", "      # default", true},
		{"      path_style: true", "      path_style: false", false},
		{"      endpoint: http://127.0.0.1:9000\n      region: us-east-1\n      path_style: true", "      region: us-east-1", false},
	} {
		c := parseWith(t, edit(t, warehouseLine, strings.Replace(s3Lines, tc.old, tc.new, 1)))
		if c.Sink.Iceberg.S3.PathStyle != tc.want {
			t.Errorf("%q: path_style = %t, want %t", tc.new, c.Sink.Iceberg.S3.PathStyle, tc.want)
		}
	}
	// A rest catalog has no default warehouse: the server picks locations.
	c = parseWith(t, strings.Replace(edit(t, catalogLine, "    catalog: {type: rest, uri: 'https://c.example.com'}"), warehouseLine+"\n", "", 1))
	if c.Sink.Iceberg.Warehouse != "" {
		t.Errorf("rest warehouse defaulted to %q", c.Sink.Iceberg.Warehouse)
	}
}

// TestStorageSecretsRedacted: tokens, credentials and keys print as ***
// whichever way the config is printed; unset optional keys are left out.
func TestStorageSecretsRedacted(t *testing.T) {
	for _, cat := range []string{
		"    catalog: {type: rest, uri: 'https://c.example.com', credential: '${CATALOG_CREDENTIAL}'}",
		"    catalog: {type: rest, uri: 'https://c.example.com', token: '${CATALOG_TOKEN}'}",
	} {
		c := parseWith(t, strings.Replace(edit(t, warehouseLine, s3Lines), catalogLine, cat, 1))
		var js bytes.Buffer
		slog.New(slog.NewJSONHandler(&js, nil)).Info("loaded", "config", c)
		for _, out := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%+v", *c), js.String()} {
			if strings.Contains(out, "s3cret") {
				t.Errorf("secret shown:\n%s", out)
			}
			if strings.Count(out, "***") < 3 {
				t.Errorf("want the catalog secret and both keys redacted:\n%s", out)
			}
		}
		back, err := Parse([]byte(c.String()), "rendered.yaml", storageEnv)
		if err != nil {
			t.Fatalf("rendered config does not parse: %v\n%s", err, c)
		}
		if back.Sink.Iceberg.S3.Endpoint != c.Sink.Iceberg.S3.Endpoint || back.Sink.Iceberg.Catalog.Type != "rest" {
			t.Errorf("round trip lost keys:\n%s", back)
		}
	}
	c := parseWith(t, full)
	if out := c.String(); strings.Contains(out, "token") || strings.Contains(out, "credential") || strings.Contains(out, "s3:") {
		t.Errorf("unset optional keys are printed:\n%s", out)
	}
}
