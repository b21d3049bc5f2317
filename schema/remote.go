package schema

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// RemoteConfig configures a Remote.
type RemoteConfig struct {
	// URL of the registry ("http://registry:8081"). Required.
	URL string
	// Username and Password, if set, are sent as HTTP basic auth.
	Username, Password string
	// Timeout bounds each call that has no context of its own
	// (SchemaByID). Default 10s.
	Timeout time.Duration
	// HTTPClient overrides the HTTP client (TLS settings, proxies).
	// Default: a client with Timeout.
	HTTPClient *http.Client
}

// Remote is a Confluent-compatible schema registry reached over HTTP
// through franz-go's sr client: the way to share schemas with Kafka tools
// when the log is Kafka. Ids are immutable, so resolved ids and
// registrations are cached for the life of the Remote. Safe for
// concurrent use.
type Remote struct {
	cl      *sr.Client
	cfg     RemoteConfig
	timeout time.Duration

	mu       sync.Mutex
	byID     map[uint32]string
	idFor    map[[2]string]uint32 // subject, schema -> id
	rejected map[string]rejection // subject -> the last refusal, until a registration succeeds
}

// NewRemote returns a client of the registry at cfg.URL. It does not
// contact the registry.
func NewRemote(cfg RemoteConfig) (*Remote, error) {
	if cfg.URL == "" {
		return nil, errors.New("schema: remote registry URL is empty; set it to the registry's http(s) address")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: cfg.Timeout}
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.URL), sr.HTTPClient(hc), sr.UserAgent("cdcd")}
	if cfg.Username != "" || cfg.Password != "" {
		opts = append(opts, sr.BasicAuth(cfg.Username, cfg.Password))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema: remote registry %s: %w", cfg.URL, err)
	}
	return &Remote{cl: cl, cfg: cfg, timeout: cfg.Timeout, byID: map[uint32]string{}, idFor: map[[2]string]uint32{},
		rejected: map[string]rejection{}}, nil
}

// Register registers schema under subject and returns its id. A refusal
// for compatibility is an *IncompatibleError whose problems are computed
// locally against the subject's latest version (falling back to the
// registry's own messages); an invalid schema wraps ErrInvalidSchema.
func (r *Remote) Register(ctx context.Context, subject, schema string) (uint32, error) {
	schema = normalize(schema)
	k := [2]string{subject, schema}
	r.mu.Lock()
	id, ok := r.idFor[k]
	r.mu.Unlock()
	if ok {
		return id, nil
	}
	n, err := r.cl.RegisterSchema(ctx, subject, sr.Schema{Schema: schema, Type: sr.TypeAvro}, -1, -1)
	if err != nil {
		err = r.registerError(ctx, subject, schema, err)
		var ierr *IncompatibleError
		if errors.As(err, &ierr) {
			r.mu.Lock()
			r.rejected[subject] = rejection{schema: schema, err: ierr}
			r.mu.Unlock()
		}
		return 0, err
	}
	if n <= 0 || int64(n) > int64(^uint32(0)) {
		return 0, fmt.Errorf("schema: remote registry returned id %d for %s", n, subject)
	}
	id = uint32(n)
	r.mu.Lock()
	delete(r.rejected, subject)
	r.idFor[k] = id
	r.byID[id] = schema
	r.mu.Unlock()
	return id, nil
}

func (r *Remote) registerError(ctx context.Context, subject, schema string, err error) error {
	var re *sr.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("schema: register %s: %w", subject, err)
	}
	switch re.ErrorCode {
	case sr.ErrInvalidSchema.Code:
		return fmt.Errorf("schema: register %s: %w: %s", subject, ErrInvalidSchema, re.Message)
	case sr.ErrIncompatibleSchema.Code:
	default:
		return fmt.Errorf("schema: register %s: %w", subject, err)
	}
	ierr := &IncompatibleError{Subject: subject}
	if res := r.cl.Compatibility(sr.WithParams(ctx, sr.DefaultToGlobal), subject); len(res) == 1 && res[0].Err == nil {
		if l, perr := ParseCompatibility(res[0].Level.String()); perr == nil {
			ierr.Level = l
		}
	}
	if latest, lerr := r.cl.SchemaByVersion(ctx, subject, -1); lerr == nil {
		ierr.Version = latest.Version
		if cerr := CheckCompatibility(latest.Schema.Schema, schema, ierr.Level); cerr != nil {
			var local *IncompatibleError
			if errors.As(cerr, &local) {
				ierr.Problems = local.Problems
			}
		}
	}
	if len(ierr.Problems) == 0 {
		msgs := []string{re.Message}
		if res, cerr := r.cl.CheckCompatibility(sr.WithParams(ctx, sr.Verbose), subject, -1, sr.Schema{Schema: schema}); cerr == nil && len(res.Messages) > 0 {
			msgs = res.Messages
		}
		for _, m := range msgs {
			ierr.Problems = append(ierr.Problems, Incompatibility{Reason: m})
		}
	}
	return ierr
}

// SchemaByID returns the schema text with id, from the cache or the
// registry (bounded by the configured Timeout).
func (r *Remote) SchemaByID(id uint32) (string, error) {
	r.mu.Lock()
	s, ok := r.byID[id]
	r.mu.Unlock()
	if ok {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	got, err := r.cl.SchemaByID(ctx, int(id))
	if err != nil {
		var re *sr.ResponseError
		if errors.As(err, &re) && re.ErrorCode == sr.ErrSchemaNotFound.Code {
			return "", fmt.Errorf("%w: %d", ErrUnknownSchema, id)
		}
		return "", fmt.Errorf("schema: fetch schema %d: %w", id, err)
	}
	if got.Type != sr.TypeAvro {
		return "", fmt.Errorf("schema: schema %d is %s, not Avro", id, got.Type)
	}
	r.mu.Lock()
	r.byID[id] = got.Schema
	r.mu.Unlock()
	return got.Schema, nil
}
