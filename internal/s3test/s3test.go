// Package s3test runs an S3 server inside a test process: gofakes3 with
// its in-memory backend behind httptest, so tests can put a warehouse on
// S3 where no object store can be installed.
//
// gofakes3 accepts any credentials; this package puts an AWS Signature
// Version 4 check in front of it, with one key pair, so that tests of
// wrong keys see what S3 answers (403 InvalidAccessKeyId or
// SignatureDoesNotMatch). Buckets are never created implicitly: a request
// to a bucket that was not made with New or CreateBucket gets NoSuchBucket.
package s3test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// The key pair and region every Server accepts.
const (
	AccessKeyID     = "AKIACDCDTEST"
	SecretAccessKey = "cdcd-test-secret"
	Region          = "us-east-1"
)

// Server is an in-process S3 endpoint.
type Server struct {
	// URL is the endpoint, http://127.0.0.1:PORT; address buckets
	// path-style (URL/bucket/key).
	URL string

	backend *s3mem.Backend
}

// New starts a server holding the given (empty) buckets and stops it when
// the test ends.
func New(t testing.TB, buckets ...string) *Server {
	t.Helper()
	backend := s3mem.New()
	fake := gofakes3.New(backend, gofakes3.WithAutoBucket(false))
	hs := httptest.NewServer(checkSignature(fake.Server()))
	t.Cleanup(hs.Close)
	s := &Server{URL: hs.URL, backend: backend}
	for _, b := range buckets {
		if err := s.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// CreateBucket makes an empty bucket.
func (s *Server) CreateBucket(name string) error { return s.backend.CreateBucket(name) }

// Keys lists the keys in bucket that start with prefix, sorted.
func (s *Server) Keys(bucket, prefix string) ([]string, error) {
	list, err := s.backend.ListBucket(bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: true}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(list.Contents))
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	return keys, nil
}

// checkSignature answers 403 unless a request is signed (SigV4, in the
// Authorization header) with AccessKeyID and SecretAccessKey.
func checkSignature(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		code, msg := verify(r)
		if code != "" {
			writeError(w, r, code, msg)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// verify returns an S3 error code and message, or "" for a good signature.
func verify(r *http.Request) (code, msg string) {
	auth := r.Header.Get("Authorization")
	algo, rest, _ := strings.Cut(auth, " ")
	if algo != "AWS4-HMAC-SHA256" {
		return "AccessDenied", "requests must be signed with AWS Signature Version 4 in the Authorization header"
	}
	fields := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/") // key/date/region/service/aws4_request
	if len(scope) != 5 || fields["SignedHeaders"] == "" || fields["Signature"] == "" {
		return "AuthorizationHeaderMalformed", "the authorization header is malformed"
	}
	if scope[0] != AccessKeyID {
		return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
	}
	signed := strings.Split(fields["SignedHeaders"], ";")
	var canon strings.Builder
	canon.WriteString(r.Method + "\n" + r.URL.EscapedPath() + "\n")
	canon.WriteString(strings.ReplaceAll(r.URL.Query().Encode(), "+", "%20") + "\n")
	for _, h := range signed {
		var v string
		switch h {
		case "host":
			v = r.Host
		case "content-length":
			v = strconv.FormatInt(r.ContentLength, 10)
		default:
			vals := r.Header.Values(h)
			for i, x := range vals {
				vals[i] = strings.Join(strings.Fields(x), " ")
			}
			v = strings.Join(vals, ",")
		}
		canon.WriteString(h + ":" + v + "\n")
	}
	canon.WriteString("\n" + fields["SignedHeaders"] + "\n" + r.Header.Get("X-Amz-Content-Sha256"))
	sum := sha256.Sum256([]byte(canon.String()))
	toSign := "AWS4-HMAC-SHA256\n" + r.Header.Get("X-Amz-Date") + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(sum[:])
	key := []byte("AWS4" + SecretAccessKey)
	for _, s := range scope[1:] {
		key = hmacSHA256(key, s)
	}
	want := hex.EncodeToString(hmacSHA256(key, toSign))
	if !hmac.Equal([]byte(want), []byte(fields["Signature"])) {
		return "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided. Check your key and signing method."
	}
	return "", ""
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

func writeError(w http.ResponseWriter, r *http.Request, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(http.StatusForbidden)
	if r.Method == http.MethodHead {
		return
	}
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName  xml.Name `xml:"Error"`
		Code     string   `xml:"Code"`
		Message  string   `xml:"Message"`
		Resource string   `xml:"Resource"`
	}{Code: code, Message: msg, Resource: r.URL.Path})
}
