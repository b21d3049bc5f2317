package iceberg

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"

	"github.com/cdcd-dev/cdcd/internal/restcatalog"
	"github.com/cdcd-dev/cdcd/internal/s3test"
)

// s3Config reaches srv with its keys.
func s3Config(srv *s3test.Server) S3Config {
	return S3Config{Endpoint: srv.URL, Region: s3test.Region, PathStyle: true,
		AccessKeyID: s3test.AccessKeyID, SecretAccessKey: s3test.SecretAccessKey}
}

// fileKinds counts a bucket's objects under prefix by what they are.
func fileKinds(t *testing.T, srv *s3test.Server, bucket, prefix string) map[string]int {
	t.Helper()
	keys, err := srv.Keys(bucket, prefix)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, k := range keys {
		base := k[strings.LastIndexByte(k, '/')+1:]
		switch {
		case strings.Contains(k, "/data/") && strings.HasSuffix(k, ".parquet"):
			kinds["data parquet"]++
		case strings.Contains(k, "/data/") && strings.HasSuffix(k, ".puffin"):
			kinds["puffin"]++
		case strings.Contains(k, "/metadata/") && strings.HasSuffix(k, ".metadata.json"):
			kinds["metadata.json"]++
		case strings.Contains(k, "/metadata/") && strings.HasPrefix(base, "snap-") && strings.HasSuffix(k, ".avro"):
			kinds["manifest list"]++
		case strings.Contains(k, "/metadata/") && strings.HasSuffix(k, ".avro"):
			kinds["manifest"]++
		case strings.HasPrefix(base, probeName):
			kinds["probe"]++
		default:
			kinds["other: "+k]++
		}
	}
	return kinds
}

// TestS3Warehouse runs the upsert workload (v3 and v2) on the SQLite
// catalog with the warehouse on an in-process S3, reading back through
// iceberg-go's scan; then every file the sink and the catalog wrote (data,
// deletion vectors or position deletes, manifests, manifest lists,
// metadata) is in the bucket, and nothing in the local directory.
func TestS3Warehouse(t *testing.T) {
	srv := s3test.New(t, "lake")
	dir := t.TempDir()
	cat := openTest(t, CatalogConfig{Type: "sql", URI: "sqlite://" + filepath.Join(dir, "catalog.db"), Name: "s3",
		Warehouse: "s3://lake/warehouse", S3: s3Config(srv)})
	for _, version := range []int{3, 2} {
		ident := randomizedUpsert(t, cat, version, 25)
		tbl, err := cat.LoadTable(t.Context(), ident)
		if err != nil {
			t.Fatal(err)
		}
		prefix := fmt.Sprintf("warehouse/ns.db/kv_v%d/", version)
		if want := "s3://lake/" + strings.TrimSuffix(prefix, "/"); tbl.Location() != want {
			t.Errorf("table at %s, want %s", tbl.Location(), want)
		}
		kinds := fileKinds(t, srv, "lake", prefix)
		t.Logf("v%d: %v", version, kinds)
		for _, k := range []string{"data parquet", "metadata.json", "manifest list", "manifest"} {
			if kinds[k] == 0 {
				t.Errorf("v%d: no %s in the bucket: %v", version, k, kinds)
			}
		}
		if version == 3 && kinds["puffin"] == 0 {
			t.Errorf("v3: no deletion vectors (puffin) in the bucket: %v", kinds)
		}
		for k := range kinds {
			if strings.HasPrefix(k, "other") || k == "probe" {
				t.Errorf("v%d: unexpected object %s", version, k)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "catalog.db") {
			t.Errorf("local file %s: everything but the catalog belongs in the bucket", e.Name())
		}
	}
}

// TestRESTCatalogOnS3: the REST catalog server writes its metadata files
// into the bucket, the sink its data and manifests, both through S3.
func TestRESTCatalogOnS3(t *testing.T) {
	srv := s3test.New(t, "lake")
	s3 := s3Config(srv)
	rc := restcatalog.New(restcatalog.Options{Warehouse: "s3://lake/rest", IOProps: s3Props(s3)})
	hs := httptest.NewServer(rc)
	t.Cleanup(hs.Close)
	cat := openTest(t, CatalogConfig{Type: "rest", URI: hs.URL, Name: "rest", Warehouse: "s3://lake/rest", S3: s3})
	randomizedUpsert(t, cat, 3, 7)
	kinds := fileKinds(t, srv, "lake", "rest/ns.db/kv_v3/")
	t.Logf("%v", kinds)
	if kinds["metadata.json"] < 7 || kinds["data parquet"] == 0 || kinds["puffin"] == 0 || kinds["manifest list"] == 0 {
		t.Errorf("files missing from the bucket: %v", kinds)
	}
}

// TestS3WarehouseErrors: a missing bucket, wrong keys and an endpoint
// nobody listens on are caught by OpenCatalog's probe, with their class
// and what to do; a good warehouse leaves no probe object behind.
func TestS3WarehouseErrors(t *testing.T) {
	srv := s3test.New(t, "lake")
	closed := httptest.NewServer(nil)
	closed.Close()
	good := s3Config(srv)
	with := func(f func(*S3Config)) S3Config {
		c := good
		f(&c)
		return c
	}
	cases := []struct {
		name      string
		warehouse string
		s3        S3Config
		class     error
		says      []string
	}{
		{"no bucket", "s3://nolake/wh", good, ErrBucketMissing,
			[]string{`bucket "nolake" at the S3 endpoint ` + srv.URL + " (region us-east-1)", "create the bucket, or fix sink.iceberg.warehouse"}},
		{"wrong key id", "s3://lake/wh", with(func(c *S3Config) { c.AccessKeyID = "AKIAWRONG" }), ErrStorageAuth,
			[]string{"refused the credentials for bucket \"lake\" (InvalidAccessKeyId", "check sink.iceberg.s3.access_key_id and secret_access_key"}},
		{"wrong secret", "s3://lake/wh", with(func(c *S3Config) { c.SecretAccessKey = "wrong-s3cret" }), ErrStorageAuth,
			[]string{"(SignatureDoesNotMatch", "check sink.iceberg.s3.access_key_id and secret_access_key"}},
		{"unreachable", "s3://lake/wh", with(func(c *S3Config) { c.Endpoint = closed.URL }), ErrStorageUnreachable,
			[]string{"cannot reach the S3 endpoint " + closed.URL, "connection refused", "check sink.iceberg.s3.endpoint"}},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel() // the unreachable endpoint takes the SDK's retries (seconds)
				start := time.Now()
				cat, err := OpenCatalog(t.Context(), CatalogConfig{URI: "sqlite://" + filepath.Join(t.TempDir(), "c.db"),
					Name: "s3", Warehouse: tc.warehouse, S3: tc.s3})
				if err == nil {
					cat.(catalog.Closer).Close()
					t.Fatal("opened")
				}
				checkOpenError(t, err, start, tc.class, tc.says)
			})
		}
	})
	openTest(t, CatalogConfig{URI: "sqlite://" + filepath.Join(t.TempDir(), "c.db"), Name: "s3", Warehouse: "s3://lake/wh", S3: good})
	if keys, err := srv.Keys("lake", ""); err != nil || len(keys) != 0 {
		t.Errorf("objects left in the bucket: %v %v", keys, err)
	}
}
