package s3test_test

import (
	"errors"
	"io"
	"slices"
	"testing"

	icebergio "github.com/apache/iceberg-go/io"
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	"github.com/aws/smithy-go"

	"github.com/cdcd-dev/cdcd/internal/s3test"
)

func fileIO(t *testing.T, srv *s3test.Server, key, secret string) icebergio.WriteFileIO {
	t.Helper()
	fsys, err := icebergio.LoadFS(t.Context(), map[string]string{
		icebergio.S3EndpointURL: srv.URL, icebergio.S3Region: s3test.Region,
		icebergio.S3AccessKeyID: key, icebergio.S3SecretAccessKey: secret,
	}, "s3://lake/")
	if err != nil {
		t.Fatal(err)
	}
	return fsys.(icebergio.WriteFileIO)
}

func code(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// TestServer writes, reads, lists and removes through iceberg-go's S3 file
// IO, and checks that wrong keys and missing buckets are refused the way
// S3 refuses them.
func TestServer(t *testing.T) {
	srv := s3test.New(t, "lake")
	fs := fileIO(t, srv, s3test.AccessKeyID, s3test.SecretAccessKey)
	big := make([]byte, 6<<20) // past the uploader's part size: a multipart upload
	for i := range big {
		big[i] = byte(i % 251)
	}
	for path, data := range map[string][]byte{"s3://lake/wh/a b+c.txt": []byte("hello"), "s3://lake/wh/big": big} {
		if err := fs.WriteFile(path, data); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
		f, err := fs.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		if err != nil || !slices.Equal(got, data) {
			t.Fatalf("read back %s: %d bytes, %v", path, len(got), err)
		}
	}
	keys, err := srv.Keys("lake", "wh/")
	if err != nil || !slices.Equal(keys, []string{"wh/a b+c.txt", "wh/big"}) {
		t.Fatalf("keys %v, %v", keys, err)
	}
	if err := fs.Remove("s3://lake/wh/big"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ key, secret, path, want string }{
		{"AKIAWRONG", s3test.SecretAccessKey, "s3://lake/x", "InvalidAccessKeyId"},
		{s3test.AccessKeyID, "wrong", "s3://lake/x", "SignatureDoesNotMatch"},
		{s3test.AccessKeyID, s3test.SecretAccessKey, "s3://nobucket/x", "NoSuchBucket"},
	} {
		fs := fileIO(t, srv, tc.key, tc.secret)
		if tc.path == "s3://nobucket/x" {
			f, err := icebergio.LoadFS(t.Context(), map[string]string{
				icebergio.S3EndpointURL: srv.URL, icebergio.S3Region: s3test.Region,
				icebergio.S3AccessKeyID: tc.key, icebergio.S3SecretAccessKey: tc.secret,
			}, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			fs = f.(icebergio.WriteFileIO)
		}
		err := fs.WriteFile(tc.path, []byte("x"))
		if got := code(err); got != tc.want {
			t.Errorf("%s: error code %q (%v), want %s", tc.want, got, err, tc.want)
		}
	}
}
