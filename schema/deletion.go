package schema

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Deleting subjects and versions, as Confluent's registry does: a soft
// delete hides a version from listings, lookups and compatibility checks
// while its id still resolves (records framed with it stay readable) and
// its number is never reused; a permanent delete (permanent=true) removes
// a version soft-deleted before, and with it the id once no other version
// of any subject holds it. Unlike Confluent's, this registry refuses any
// delete of a subject the running pipeline writes (Protect): the
// pipeline's records in the log are framed with those ids.

// ProtectedError is the refusal of a delete of a subject the running
// pipeline writes.
type ProtectedError struct {
	Subject string
	// Table is the source table whose records the subject describes.
	Table string
}

func (e *ProtectedError) Error() string {
	return fmt.Sprintf("subject %s holds the schemas of table %s, which this pipeline mirrors: its records in the log are framed "+
		"with these ids and a later version is checked against them; to delete it, remove %s from the source's tables and restart cdcd first",
		e.Subject, e.Table, e.Table)
}

func (e *ProtectedError) Unwrap() error { return ErrProtected }

// Protect marks subject as written by the running pipeline for table:
// every delete of it (soft or permanent, subject or version) is refused
// with a *ProtectedError until the process ends.
func (r *Registry) Protect(subject, table string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.protected[subject] = table
}

func (r *Registry) guardLocked(subject string) error {
	if table, ok := r.protected[subject]; ok {
		return &ProtectedError{Subject: subject, Table: table}
	}
	return nil
}

// DeleteVersion soft-deletes one version of subject (ver may be
// LatestVersion, the newest live one) and returns its number. Errors:
// ErrUnknownSubject, ErrUnknownVersion, ErrVersionSoftDeleted, a
// *ProtectedError, a Store error.
func (r *Registry) DeleteVersion(ctx context.Context, subject string, ver int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, err := r.findLocked(subject, ver, ShowLive)
	if err != nil {
		return 0, err
	}
	if err := r.guardLocked(subject); err != nil {
		return 0, err
	}
	if v.deleted {
		return 0, fmt.Errorf("%w: %s version %d; delete it with permanent=true to remove it", ErrVersionSoftDeleted, subject, v.Version)
	}
	v.deleted = true
	if err := r.appendSchemaLocked(ctx, v); err != nil {
		return 0, fmt.Errorf("schema: delete %s v%d: %w", subject, v.Version, err)
	}
	return v.Version, nil
}

// DeleteSubject soft-deletes every live version of subject and returns
// their numbers; its compatibility level stays. Errors: ErrUnknownSubject,
// ErrSubjectSoftDeleted, a *ProtectedError, a Store error.
func (r *Registry) DeleteSubject(ctx context.Context, subject string) ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.subjects[subject]) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	if err := r.guardLocked(subject); err != nil {
		return nil, err
	}
	live := r.liveLocked(subject)
	if len(live) == 0 {
		return nil, fmt.Errorf("%w: %s; delete it with permanent=true to remove it", ErrSubjectSoftDeleted, subject)
	}
	var out []int
	for _, v := range live {
		v.deleted = true
		if err := r.appendSchemaLocked(ctx, v); err != nil {
			return out, fmt.Errorf("schema: delete %s v%d: %w", subject, v.Version, err)
		}
		out = append(out, v.Version)
	}
	return out, nil
}

// PurgeVersion permanently deletes a soft-deleted version of subject (ver
// may be LatestVersion, the newest of all) and returns its number. Errors:
// ErrUnknownSubject, ErrUnknownVersion, ErrVersionNotSoftDeleted, a
// *ProtectedError, a Store error.
func (r *Registry) PurgeVersion(ctx context.Context, subject string, ver int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, err := r.findLocked(subject, ver, ShowAll)
	if err != nil {
		return 0, err
	}
	if err := r.guardLocked(subject); err != nil {
		return 0, err
	}
	if !v.deleted {
		return 0, fmt.Errorf("%w: %s version %d is live; soft-delete it (without permanent=true) first", ErrVersionNotSoftDeleted, subject, v.Version)
	}
	if err := r.store.Append(ctx, schemaKey(subject, v.Version), nil); err != nil {
		return 0, fmt.Errorf("schema: permanently delete %s v%d: %w", subject, v.Version, err)
	}
	r.dropLocked(subject, v.Version)
	return v.Version, nil
}

// PurgeSubject permanently deletes subject, whose versions must all be
// soft-deleted, and its compatibility level; it returns the version
// numbers removed. Errors: ErrUnknownSubject, ErrSubjectNotSoftDeleted, a
// *ProtectedError, a Store error.
func (r *Registry) PurgeSubject(ctx context.Context, subject string) ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs := slices.Clone(r.subjects[subject])
	if len(vs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	if err := r.guardLocked(subject); err != nil {
		return nil, err
	}
	if len(r.liveLocked(subject)) > 0 {
		return nil, fmt.Errorf("%w: %s has live versions; soft-delete it (without permanent=true) first", ErrSubjectNotSoftDeleted, subject)
	}
	var out []int
	for _, v := range vs {
		if err := r.store.Append(ctx, schemaKey(subject, v.Version), nil); err != nil {
			return out, fmt.Errorf("schema: permanently delete %s v%d: %w", subject, v.Version, err)
		}
		r.dropLocked(subject, v.Version)
		out = append(out, v.Version)
	}
	if _, own := r.levels[subject]; own {
		if err := r.store.Append(ctx, configKey(subject), nil); err != nil {
			return out, fmt.Errorf("schema: remove the compatibility level of %s: %w", subject, err)
		}
		r.resetLocked(subject)
	}
	return out, nil
}

// findLocked returns version ver of subject (LatestVersion: the newest
// that show selects), deleted or not.
func (r *Registry) findLocked(subject string, ver int, show Show) (version, error) {
	vs := r.subjects[subject]
	if len(vs) == 0 {
		return version{}, fmt.Errorf("%w: %s", ErrUnknownSubject, subject)
	}
	if ver == LatestVersion {
		shown := r.shownLocked(subject, show)
		if len(shown) == 0 {
			return version{}, fmt.Errorf("%w: %s has no live version", ErrUnknownSubject, subject)
		}
		return shown[len(shown)-1], nil
	}
	for _, v := range vs {
		if v.Version == ver {
			return v, nil
		}
	}
	return version{}, fmt.Errorf("%w: %s version %d", ErrUnknownVersion, subject, ver)
}

// dropLocked removes a version for good, and its schema id once no
// version of any subject holds it (ids are never handed out again in this
// process: nextID only grows).
func (r *Registry) dropLocked(subject string, ver int) {
	vs := r.subjects[subject]
	i := slices.IndexFunc(vs, func(v version) bool { return v.Version == ver })
	if i < 0 {
		return
	}
	gone := vs[i]
	if vs = slices.Delete(vs, i, i+1); len(vs) == 0 {
		delete(r.subjects, subject)
	} else {
		r.subjects[subject] = vs
	}
	for _, others := range r.subjects {
		for _, v := range others {
			if v.ID == gone.ID {
				return
			}
		}
	}
	delete(r.byID, gone.ID)
	delete(r.parsed, gone.ID)
	if r.idOf[gone.norm] == gone.ID {
		delete(r.idOf, gone.norm)
	}
}

func schemaKey(subject string, ver int) []byte {
	b, _ := json.Marshal(storeKey{KeyType: keySchema, Subject: &subject, Version: &ver, Magic: 1}) // strings and ints only
	return b
}
