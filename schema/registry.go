package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
)

// Registry and compatibility errors.
var (
	// ErrIncompatible: a schema fails its subject's compatibility level;
	// the error is an *IncompatibleError.
	ErrIncompatible = errors.New("schema: incompatible schema")
	// ErrInvalidSchema: the text is not a valid Avro schema.
	ErrInvalidSchema = errors.New("schema: invalid Avro schema")
	// ErrInvalidCompatibility: not a compatibility level name.
	ErrInvalidCompatibility = errors.New("schema: invalid compatibility level")
	// ErrUnknownSchema: no schema has the id, or the subject has no such
	// schema.
	ErrUnknownSchema = errors.New("schema: unknown schema id")
	// ErrUnknownSubject: no live version is registered under the subject.
	ErrUnknownSubject = errors.New("schema: unknown subject")
	// ErrUnknownVersion: the subject has no live version with the number.
	ErrUnknownVersion = errors.New("schema: unknown version")
	// ErrNotConfigured: the subject has no compatibility level of its own.
	ErrNotConfigured = errors.New("schema: subject has no compatibility level of its own")
	// ErrNothingRejected: the subject has no rejected schema to accept.
	ErrNothingRejected = errors.New("schema: no rejected schema for the subject")
	// ErrSubjectSoftDeleted: a soft delete of a subject whose versions are
	// all soft-deleted already (a permanent delete is what remains).
	ErrSubjectSoftDeleted = errors.New("schema: subject was soft-deleted")
	// ErrSubjectNotSoftDeleted: a permanent delete of a subject that still
	// has live versions (soft-delete it first).
	ErrSubjectNotSoftDeleted = errors.New("schema: subject was not soft-deleted first")
	// ErrVersionSoftDeleted: a soft delete of a version soft-deleted
	// already.
	ErrVersionSoftDeleted = errors.New("schema: version was soft-deleted")
	// ErrVersionNotSoftDeleted: a permanent delete of a live version
	// (soft-delete it first).
	ErrVersionNotSoftDeleted = errors.New("schema: version was not soft-deleted first")
	// ErrProtected: a delete of a subject the running pipeline writes; the
	// error is a *ProtectedError.
	ErrProtected = errors.New("schema: subject is written by the running pipeline")
)

// Client is what the pipeline needs from a schema registry: the emitter
// registers, the sink resolves ids. *Registry (embedded, the default) and
// *Remote (any Confluent-compatible registry) implement it.
type Client interface {
	// Register returns the id of schema under subject, registering it as
	// the subject's next version if it passes the subject's compatibility
	// level; otherwise the error is an *IncompatibleError.
	Register(ctx context.Context, subject, schema string) (uint32, error)
	// SchemaByID returns the schema text with id.
	SchemaByID(id uint32) (string, error)
}

var (
	_ Client = (*Registry)(nil)
	_ Client = (*Remote)(nil)
)

// Store persists the registry's records, in order: the `_schemas` topic of
// the log in the daemon, in Confluent's own layout of that topic, so its
// records read the same as a Confluent registry's:
//
//	key {"keytype":"SCHEMA","subject":S,"version":V,"magic":1}
//	    value {"subject":S,"version":V,"id":ID,"schema":TEXT,"deleted":false}
//	key {"keytype":"CONFIG","subject":S,"magic":0}   (subject null: global)
//	    value {"compatibilityLevel":"BACKWARD"}     (null: level removed)
//
// A later record with the same key replaces the earlier one (the topic is
// compacted). Keys of other types (MODE, NOOP, DELETE_SUBJECT,
// CLEAR_SUBJECT, ...) written by a Confluent registry are read as
// Confluent does where it matters and skipped otherwise.
type Store interface {
	// Load calls fn with every stored record in the order they were stored.
	Load(ctx context.Context, fn func(key, value []byte) error) error
	// Append stores one record durably before returning. A nil value is a
	// tombstone; Load may return it as nil or empty.
	Append(ctx context.Context, key, value []byte) error
}

// SubjectVersion is one registered version of a subject.
type SubjectVersion struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
	ID      uint32 `json:"id"`
	Schema  string `json:"schema"`
}

// LatestVersion names a subject's newest live version where a version
// number is expected.
const LatestVersion = -1

// Record layouts of the store (Confluent's; frozen).
type (
	storeKey struct {
		KeyType string  `json:"keytype"`
		Subject *string `json:"subject"`
		Version *int    `json:"version,omitempty"`
		Magic   int     `json:"magic"`
	}
	schemaValue struct {
		Subject string `json:"subject"`
		Version int    `json:"version"`
		ID      uint32 `json:"id"`
		Schema  string `json:"schema"`
		Deleted bool   `json:"deleted"`
	}
	configValue struct {
		CompatibilityLevel string `json:"compatibilityLevel"`
	}
	// deleteSubjectValue is the value of DELETE_SUBJECT and CLEAR_SUBJECT
	// records: every version up to Version was deleted.
	deleteSubjectValue struct {
		Subject string `json:"subject"`
		Version int    `json:"version"`
	}
)

const (
	keySchema        = "SCHEMA"
	keyConfig        = "CONFIG"
	keyDeleteSubject = "DELETE_SUBJECT"
	keyClearSubject  = "CLEAR_SUBJECT"
)

// version is a registered version; deleted ones stay so their numbers are
// never reused and their ids still resolve.
type version struct {
	SubjectVersion
	deleted bool
	norm    string // Schema in canonical form, for matching
}

// rejection is the last schema a subject refused.
type rejection struct {
	schema string
	err    *IncompatibleError
}

// Registry assigns global ids and per-subject versions to schemas, checks
// every new version against the subject's compatibility level, and keeps
// all of it in a Store so ids, versions and levels survive restarts.
//
// Registering a schema a subject already has returns its existing id
// without a check; the same schema text under another subject shares the
// id, as in Confluent's registry. Schema texts are compared after
// removing insignificant JSON whitespace. A Registry is safe for
// concurrent use.
type Registry struct {
	store Store

	mu       sync.Mutex
	byID     map[uint32]string
	idOf     map[string]uint32 // canonical form -> id
	parsed   map[uint32]avro.Schema
	subjects map[string][]version // by version number, ascending
	global   Compatibility
	levels   map[string]Compatibility
	rejected map[string]rejection
	nextID   uint32
	// protected names the subjects the running pipeline writes, with the
	// table each belongs to: deletes of them are refused (see Protect).
	protected map[string]string
}

// OpenRegistry loads every record of store.
func OpenRegistry(ctx context.Context, store Store) (*Registry, error) {
	r := &Registry{
		store:     store,
		byID:      map[uint32]string{},
		idOf:      map[string]uint32{},
		parsed:    map[uint32]avro.Schema{},
		subjects:  map[string][]version{},
		levels:    map[string]Compatibility{},
		rejected:  map[string]rejection{},
		protected: map[string]string{},
		nextID:    1,
	}
	if err := store.Load(ctx, r.apply); err != nil {
		return nil, err
	}
	return r, nil
}

// apply replays one stored record.
func (r *Registry) apply(key, value []byte) error {
	var k storeKey
	if err := json.Unmarshal(key, &k); err != nil {
		return fmt.Errorf("schema: registry record key %q: %w", key, err)
	}
	subject := ""
	if k.Subject != nil {
		subject = *k.Subject
	}
	switch k.KeyType {
	case keySchema:
		if k.Version == nil {
			return fmt.Errorf("schema: registry record key %s has no version", key)
		}
		if len(value) == 0 { // a tombstone: hard delete
			r.dropLocked(subject, *k.Version)
			return nil
		}
		var v schemaValue
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("schema: registry record %s v%d: %w", subject, *k.Version, err)
		}
		r.putLocked(version{SubjectVersion: SubjectVersion{Subject: v.Subject, Version: v.Version, ID: v.ID, Schema: v.Schema}, deleted: v.Deleted})
	case keyConfig:
		if len(value) == 0 {
			r.resetLocked(subject)
			return nil
		}
		var v configValue
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("schema: registry config record %s: %w", key, err)
		}
		if v.CompatibilityLevel == "" {
			return nil // other settings only
		}
		level, err := ParseCompatibility(v.CompatibilityLevel)
		if err != nil {
			return fmt.Errorf("schema: registry config record %s: %w", key, err)
		}
		r.setLocked(subject, level)
	case keyDeleteSubject, keyClearSubject:
		if len(value) == 0 {
			return nil
		}
		var v deleteSubjectValue
		if err := json.Unmarshal(value, &v); err != nil {
			return fmt.Errorf("schema: registry record %s: %w", key, err)
		}
		vs := r.subjects[subject]
		for i := range vs {
			if vs[i].Version <= v.Version {
				vs[i].deleted = true
			}
		}
		if k.KeyType == keyClearSubject {
			for _, x := range slices.Clone(vs) {
				if x.Version <= v.Version {
					r.dropLocked(subject, x.Version)
				}
			}
		}
	}
	return nil
}

// putLocked adds or replaces a version.
func (r *Registry) putLocked(v version) {
	v.norm = canonical(v.Schema)
	if _, ok := r.byID[v.ID]; !ok {
		r.byID[v.ID] = v.Schema
	}
	r.idOf[v.norm] = v.ID
	if v.ID >= r.nextID {
		r.nextID = v.ID + 1
	}
	vs := r.subjects[v.Subject]
	i, found := slices.BinarySearchFunc(vs, v.Version, func(x version, n int) int { return x.Version - n })
	if found {
		vs[i] = v
	} else {
		vs = slices.Insert(vs, i, v)
	}
	r.subjects[v.Subject] = vs
}

func (r *Registry) setLocked(subject string, level Compatibility) {
	if subject == "" {
		r.global = level
	} else {
		r.levels[subject] = level
	}
}

func (r *Registry) resetLocked(subject string) {
	if subject == "" {
		r.global = Backward
	} else {
		delete(r.levels, subject)
	}
}

// liveLocked returns the subject's versions that are not deleted, oldest
// first.
func (r *Registry) liveLocked(subject string) []version { return r.shownLocked(subject, ShowLive) }

// normalize removes insignificant whitespace from a schema's JSON text.
func normalize(schema string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(schema)); err != nil {
		return schema // not JSON: parsing reports it
	}
	return b.String()
}

// Register returns the id of schema under subject. A schema the subject
// already has (as a live version) returns its id at once; any other is
// checked against the subject's compatibility level and, if it passes,
// stored durably as the subject's next version before Register returns.
//
// Errors: ErrInvalidSchema (wrapped) for text that is not Avro;
// *IncompatibleError (ErrIncompatible) when the level refuses it, in which
// case the schema is kept as the subject's rejected schema (see Rejected
// and Accept) until the subject registers another; a Store error.
func (r *Registry) Register(ctx context.Context, subject, schema string) (uint32, error) {
	return r.register(ctx, subject, schema, false)
}

func (r *Registry) register(ctx context.Context, subject, schema string, force bool) (uint32, error) {
	schema = normalize(schema)
	key := canonical(schema)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.subjects[subject] {
		if v.norm == key && !v.deleted {
			delete(r.rejected, subject) // the subject's writer moved on
			return v.ID, nil
		}
	}
	parsed, err := parseAvro(schema)
	if err != nil {
		return 0, fmt.Errorf("schema: register %s: %w", subject, err)
	}
	if !force {
		if ierr := r.checkLocked(subject, parsed, 0); ierr != nil {
			r.rejected[subject] = rejection{schema: schema, err: ierr}
			return 0, ierr
		}
	}
	id, ok := r.idOf[key]
	if ok {
		schema = r.byID[id] // an id has one text
	} else {
		id = r.nextID
	}
	sv := SubjectVersion{Subject: subject, Version: 1, ID: id, Schema: schema}
	if vs := r.subjects[subject]; len(vs) > 0 {
		sv.Version = vs[len(vs)-1].Version + 1
	}
	if err := r.appendSchemaLocked(ctx, version{SubjectVersion: sv}); err != nil {
		return 0, fmt.Errorf("schema: register %s v%d: %w", subject, sv.Version, err)
	}
	r.parsed[id] = parsed
	delete(r.rejected, subject)
	return id, nil
}

// appendSchemaLocked stores v and then applies it.
func (r *Registry) appendSchemaLocked(ctx context.Context, v version) error {
	value, err := json.Marshal(schemaValue{Subject: v.Subject, Version: v.Version, ID: v.ID, Schema: v.Schema, Deleted: v.deleted})
	if err != nil {
		return err
	}
	if err := r.store.Append(ctx, schemaKey(v.Subject, v.Version), value); err != nil {
		return err
	}
	r.putLocked(v)
	return nil
}

// parsedLocked returns the parsed schema of a registered id.
func (r *Registry) parsedLocked(id uint32) (avro.Schema, error) {
	if s, ok := r.parsed[id]; ok {
		return s, nil
	}
	s, err := parseAvro(r.byID[id])
	if err != nil {
		return nil, fmt.Errorf("schema: stored schema %d: %w", id, err)
	}
	r.parsed[id] = s
	return s, nil
}

// checkLocked checks parsed against subject's versions under its level:
// against one version if ver > 0 (or LatestVersion), else against the
// versions the level selects (the latest, or all for transitive levels,
// newest first). It returns the problems against the first version that
// fails.
func (r *Registry) checkLocked(subject string, parsed avro.Schema, ver int) *IncompatibleError {
	level := r.levelLocked(subject)
	if level == None {
		return nil
	}
	live := r.liveLocked(subject)
	var against []version
	switch {
	case len(live) == 0:
	case ver == LatestVersion || (ver == 0 && !level.transitive()):
		against = live[len(live)-1:]
	case ver == 0:
		against = live
	default:
		for _, v := range live {
			if v.Version == ver {
				against = []version{v}
			}
		}
	}
	for i := len(against) - 1; i >= 0; i-- {
		old, err := r.parsedLocked(against[i].ID)
		if err != nil {
			return &IncompatibleError{Subject: subject, Level: level, Version: against[i].Version,
				Problems: []Incompatibility{{Reason: err.Error()}}}
		}
		if p := problems(old, parsed, level); len(p) > 0 {
			return &IncompatibleError{Subject: subject, Level: level, Version: against[i].Version, Problems: p}
		}
	}
	return nil
}

// TestCompatibility checks schema against subject without registering it:
// against version ver (a number or LatestVersion) in the directions of the
// subject's level, or with ver 0 exactly as Register would. A subject
// without versions accepts any valid schema. It returns nil, an
// ErrInvalidSchema, an *IncompatibleError, or ErrUnknownVersion.
func (r *Registry) TestCompatibility(subject, schema string, ver int) error {
	parsed, err := parseAvro(normalize(schema))
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ver > 0 && !slices.ContainsFunc(r.liveLocked(subject), func(v version) bool { return v.Version == ver }) {
		return fmt.Errorf("%w: %s version %d", ErrUnknownVersion, subject, ver)
	}
	if ierr := r.checkLocked(subject, parsed, ver); ierr != nil {
		return ierr
	}
	return nil
}

// SchemaByID returns the schema text registered with id (deleted versions
// included: records framed with their id stay readable).
func (r *Registry) SchemaByID(id uint32) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[id]
	if !ok {
		return "", fmt.Errorf("%w: %d", ErrUnknownSchema, id)
	}
	return s, nil
}

// Show selects versions by their deletion state, as Confluent's deleted
// and deletedOnly query parameters do.
type Show int

const (
	// ShowLive: live versions only (the default everywhere).
	ShowLive Show = iota
	// ShowAll: live and soft-deleted versions (deleted=true).
	ShowAll
	// ShowDeleted: soft-deleted versions only (deletedOnly=true).
	ShowDeleted
)

func (s Show) has(v version) bool {
	switch s {
	case ShowAll:
		return true
	case ShowDeleted:
		return v.deleted
	}
	return !v.deleted
}

// shownLocked returns the versions of subject that show selects, oldest
// first.
func (r *Registry) shownLocked(subject string, show Show) []version {
	var out []version
	for _, v := range r.subjects[subject] {
		if show.has(v) {
			out = append(out, v)
		}
	}
	return out
}

// Subjects returns the subjects with at least one live version, sorted.
func (r *Registry) Subjects() []string { return r.SubjectsMatching("", ShowLive) }

// SubjectsMatching returns the subjects starting with prefix that have at
// least one version show selects, sorted: with ShowAll, soft-deleted
// subjects are listed too.
func (r *Registry) SubjectsMatching(prefix string, show Show) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for s := range r.subjects {
		if strings.HasPrefix(s, prefix) && len(r.shownLocked(s, show)) > 0 {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// Versions returns the live versions of subject, oldest first.
func (r *Registry) Versions(subject string) ([]SubjectVersion, error) {
	return r.VersionsMatching(subject, ShowLive)
}

// VersionsMatching returns the versions of subject show selects, oldest
// first; ErrUnknownSubject if there are none.
func (r *Registry) VersionsMatching(subject string, show Show) ([]SubjectVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shown := r.shownLocked(subject, show)
	if len(shown) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	out := make([]SubjectVersion, len(shown))
	for i, v := range shown {
		out[i] = v.SubjectVersion
	}
	return out, nil
}

// Version returns one live version of subject; ver may be LatestVersion.
func (r *Registry) Version(subject string, ver int) (SubjectVersion, error) {
	return r.VersionMatching(subject, ver, ShowLive)
}

// VersionMatching returns one version of subject among those show
// selects; ver may be LatestVersion (the newest of them).
func (r *Registry) VersionMatching(subject string, ver int, show Show) (SubjectVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	shown := r.shownLocked(subject, show)
	if len(shown) == 0 {
		return SubjectVersion{}, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	if ver == LatestVersion {
		return shown[len(shown)-1].SubjectVersion, nil
	}
	for _, v := range shown {
		if v.Version == ver {
			return v.SubjectVersion, nil
		}
	}
	return SubjectVersion{}, fmt.Errorf("%w: %s version %d", ErrUnknownVersion, subject, ver)
}

// Lookup returns the live version of subject that has schema.
func (r *Registry) Lookup(subject, schema string) (SubjectVersion, error) {
	return r.LookupMatching(subject, schema, ShowLive)
}

// LookupMatching returns the newest version of subject that has schema
// among those show selects.
func (r *Registry) LookupMatching(subject, schema string, show Show) (SubjectVersion, error) {
	key := canonical(schema)
	r.mu.Lock()
	defer r.mu.Unlock()
	shown := r.shownLocked(subject, show)
	if len(shown) == 0 {
		return SubjectVersion{}, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	for i := len(shown) - 1; i >= 0; i-- {
		if shown[i].norm == key {
			return shown[i].SubjectVersion, nil
		}
	}
	return SubjectVersion{}, fmt.Errorf("%w: not registered under %s", ErrUnknownSchema, subject)
}

// Usages returns the live subject versions that use schema id.
func (r *Registry) Usages(id uint32) ([]SubjectVersion, error) { return r.UsagesMatching(id, ShowLive) }

// UsagesMatching returns the subject versions show selects that use
// schema id, by subject and version.
func (r *Registry) UsagesMatching(id uint32, show Show) ([]SubjectVersion, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.byID[id]; !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownSchema, id)
	}
	var out []SubjectVersion
	for _, vs := range r.subjects {
		for _, v := range vs {
			if v.ID == id && show.has(v) {
				out = append(out, v.SubjectVersion)
			}
		}
	}
	sortVersions(out)
	return out, nil
}

// Schemas returns the versions show selects of every subject starting
// with prefix, by subject and version; latestOnly keeps each subject's
// newest of them (Confluent's GET /schemas).
func (r *Registry) Schemas(prefix string, show Show, latestOnly bool) []SubjectVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []SubjectVersion
	for s := range r.subjects {
		if !strings.HasPrefix(s, prefix) {
			continue
		}
		shown := r.shownLocked(s, show)
		if latestOnly && len(shown) > 0 {
			shown = shown[len(shown)-1:]
		}
		for _, v := range shown {
			out = append(out, v.SubjectVersion)
		}
	}
	sortVersions(out)
	return out
}

func sortVersions(vs []SubjectVersion) {
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].Subject != vs[j].Subject {
			return vs[i].Subject < vs[j].Subject
		}
		return vs[i].Version < vs[j].Version
	})
}

// Compatibility returns the level that applies to subject ("" for the
// global level) and whether the subject has a level of its own.
func (r *Registry) Compatibility(subject string) (level Compatibility, own bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, own := r.levels[subject]
	if subject == "" || !own {
		return r.global, subject == ""
	}
	return l, true
}

func (r *Registry) levelLocked(subject string) Compatibility {
	if l, ok := r.levels[subject]; ok {
		return l
	}
	return r.global
}

// SetCompatibility sets subject's level ("" sets the global level, the
// default of every subject without its own) durably. It does not recheck
// registered versions, and does not register a rejected schema: the next
// Register of it is checked under the new level.
func (r *Registry) SetCompatibility(ctx context.Context, subject string, level Compatibility) error {
	if int(level) >= len(compatNames) {
		return fmt.Errorf("%w: %d", ErrInvalidCompatibility, level)
	}
	value, err := json.Marshal(configValue{CompatibilityLevel: level.String()})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.store.Append(ctx, configKey(subject), value); err != nil {
		return fmt.Errorf("schema: set compatibility of %q: %w", subject, err)
	}
	r.setLocked(subject, level)
	return nil
}

// ResetCompatibility removes subject's own level, so the global level
// applies again ("" resets the global level to BACKWARD), and returns the
// level removed. ErrNotConfigured if the subject had none.
func (r *Registry) ResetCompatibility(ctx context.Context, subject string) (Compatibility, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev, own := r.levels[subject]
	if subject == "" {
		prev, own = r.global, true
	}
	if !own {
		return 0, fmt.Errorf("%w: %s", ErrNotConfigured, subject)
	}
	if err := r.store.Append(ctx, configKey(subject), nil); err != nil {
		return 0, fmt.Errorf("schema: reset compatibility of %q: %w", subject, err)
	}
	r.resetLocked(subject)
	return prev, nil
}

func configKey(subject string) []byte {
	k := storeKey{KeyType: keyConfig, Magic: 0}
	if subject != "" {
		k.Subject = &subject
	}
	b, _ := json.Marshal(k) // strings and ints only
	return b
}

// Rejected returns the last schema Register refused for subject and why,
// until a Register of the subject succeeds. It is kept in memory only: after a
// restart, the next Register of the schema rejects it again.
func (r *Registry) Rejected(subject string) (schema string, err *IncompatibleError, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rej, ok := r.rejected[subject]
	return rej.schema, rej.err, ok
}

// RejectedSubjects returns the subjects that have a rejected schema, sorted.
func (r *Registry) RejectedSubjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.rejected))
	for s := range r.rejected {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Accept registers subject's rejected schema as its next version without a
// compatibility check: the operator's "accept the new version". The
// subject's level is unchanged, so the version after it is checked against
// it as usual. ErrNothingRejected if there is none.
func (r *Registry) Accept(ctx context.Context, subject string) (SubjectVersion, error) {
	r.mu.Lock()
	rej, ok := r.rejected[subject]
	r.mu.Unlock()
	if !ok {
		return SubjectVersion{}, fmt.Errorf("%w: %s", ErrNothingRejected, subject)
	}
	if _, err := r.register(ctx, subject, rej.schema, true); err != nil {
		return SubjectVersion{}, err
	}
	return r.Lookup(subject, rej.schema)
}
