package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// Registry errors.
var (
	// ErrUnknownSchema: no schema has the id.
	ErrUnknownSchema = errors.New("schema: unknown schema id")
	// ErrUnknownSubject: no version is registered under the subject.
	ErrUnknownSubject = errors.New("schema: unknown subject")
)

// Store persists the registry's records, in order: the `_schemas` topic of
// the log in the daemon (Confluent's own layout of that topic, so its
// records read the same as a Confluent registry's).
type Store interface {
	// Load calls fn with every stored record in the order they were stored.
	Load(ctx context.Context, fn func(key, value []byte) error) error
	// Append stores one record durably before returning.
	Append(ctx context.Context, key, value []byte) error
}

// SubjectVersion is one registered version of a subject.
type SubjectVersion struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      uint32 `json:"id"`
	Schema  string `json:"schema"`
}

// schemaKey and schemaValue are Confluent's `_schemas` record layouts.
type schemaKey struct {
	KeyType string `json:"keytype"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
	Magic   int    `json:"magic"`
}

type schemaValue struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      uint32 `json:"id"`
	Schema  string `json:"schema"`
	Deleted bool   `json:"deleted"`
}

// Registry assigns global ids and per-subject versions to schemas and keeps
// them in a Store so they survive restarts. Registering a schema that a
// subject already has returns its existing id; the same schema under another
// subject shares the id, as in Confluent's registry.
type Registry struct {
	store Store

	mu       sync.Mutex
	byID     map[uint32]string
	idOf     map[string]uint32 // schema text -> id
	subjects map[string][]SubjectVersion
	nextID   uint32
}

// OpenRegistry loads every record of store.
func OpenRegistry(ctx context.Context, store Store) (*Registry, error) {
	r := &Registry{
		store:    store,
		byID:     map[uint32]string{},
		idOf:     map[string]uint32{},
		subjects: map[string][]SubjectVersion{},
		nextID:   1,
	}
	err := store.Load(ctx, func(key, value []byte) error {
		var k schemaKey
		if err := json.Unmarshal(key, &k); err != nil {
			return fmt.Errorf("schema: registry record key %q: %w", key, err)
		}
		if k.KeyType != "SCHEMA" || value == nil {
			return nil // other record kinds (CONFIG, ...) and tombstones
		}
		var v schemaValue
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("schema: registry record %s v%d: %w", k.Subject, k.Version, err)
		}
		if !v.Deleted {
			r.addLocked(SubjectVersion{Subject: v.Subject, Version: v.Version, ID: v.ID, Schema: v.Schema})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) addLocked(sv SubjectVersion) {
	r.byID[sv.ID] = sv.Schema
	r.idOf[sv.Schema] = sv.ID
	r.subjects[sv.Subject] = append(r.subjects[sv.Subject], sv)
	if sv.ID >= r.nextID {
		r.nextID = sv.ID + 1
	}
}

// Register returns the id of schema under subject, registering it as the
// subject's next version if the subject does not have it yet.
func (r *Registry) Register(ctx context.Context, subject, schema string) (uint32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sv := range r.subjects[subject] {
		if sv.Schema == schema {
			return sv.ID, nil
		}
	}
	id, ok := r.idOf[schema]
	if !ok {
		id = r.nextID
	}
	sv := SubjectVersion{Subject: subject, Version: len(r.subjects[subject]) + 1, ID: id, Schema: schema}
	if n := len(r.subjects[subject]); n > 0 {
		sv.Version = r.subjects[subject][n-1].Version + 1
	}
	key, err := json.Marshal(schemaKey{KeyType: "SCHEMA", Subject: subject, Version: sv.Version, Magic: 1})
	if err != nil {
		return 0, err
	}
	value, err := json.Marshal(schemaValue{Subject: subject, Version: sv.Version, ID: id, Schema: schema})
	if err != nil {
		return 0, err
	}
	if err := r.store.Append(ctx, key, value); err != nil {
		return 0, fmt.Errorf("schema: register %s v%d: %w", subject, sv.Version, err)
	}
	r.addLocked(sv)
	return id, nil
}

// SchemaByID returns the schema text registered with id.
func (r *Registry) SchemaByID(id uint32) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return "", fmt.Errorf("%w: %d", ErrUnknownSchema, id)
	}
	return s, nil
}

// Versions returns the registered versions of subject, oldest first.
func (r *Registry) Versions(subject string) ([]SubjectVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs, ok := r.subjects[subject]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	return append([]SubjectVersion(nil), vs...), nil
}
