package schema

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/sr"
)

// What a Remote refused, and the operator's way past it: the same as the
// embedded Registry's Rejected, RejectedSubjects and Accept, so a paused
// table is resolved the same way whichever registry cdcd uses. Refusals
// are kept in memory only: after a restart the emitter's next Register of
// the schema is refused again and recorded again.

// Rejected returns the last schema Register refused for subject and why,
// until a Register of the subject succeeds.
func (r *Remote) Rejected(subject string) (schema string, err *IncompatibleError, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rej, ok := r.rejected[subject]
	return rej.schema, rej.err, ok
}

// RejectedSubjects returns the subjects with a refused schema, sorted.
func (r *Remote) RejectedSubjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.rejected))
	for s := range r.rejected {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Accept registers subject's refused schema as its next version: the
// subject's compatibility is set to NONE for the registration and then put
// back (its own level again, or none, so the global level applies). The
// version after it is checked as usual. A registration by another client
// of the same subject in between is not checked either. ErrNothingRejected
// if nothing was refused.
func (r *Remote) Accept(ctx context.Context, subject string) (SubjectVersion, error) {
	r.mu.Lock()
	rej, ok := r.rejected[subject]
	r.mu.Unlock()
	if !ok {
		return SubjectVersion{}, fmt.Errorf("%w: %s", ErrNothingRejected, subject)
	}
	own := r.cl.Compatibility(ctx, subject) // without DefaultToGlobal: the subject's own level, or an error
	if res := r.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatNone}, subject); res[0].Err != nil {
		return SubjectVersion{}, fmt.Errorf("schema: accept %s: set its compatibility to NONE: %w", subject, res[0].Err)
	}
	id, regErr := r.Register(ctx, subject, rej.schema)
	var restoreErr error
	if own[0].Err == nil {
		restoreErr = r.cl.SetCompatibility(ctx, sr.SetCompatibility{Level: own[0].Level}, subject)[0].Err
	} else {
		restoreErr = r.cl.ResetCompatibility(ctx, subject)[0].Err
	}
	if restoreErr != nil {
		restoreErr = fmt.Errorf("schema: accept %s: its compatibility is still NONE, set it back by hand: %w", subject, restoreErr)
	}
	if regErr != nil {
		return SubjectVersion{}, errors.Join(regErr, restoreErr)
	}
	got, err := r.cl.LookupSchema(ctx, subject, sr.Schema{Schema: rej.schema, Type: sr.TypeAvro})
	if err != nil {
		return SubjectVersion{}, errors.Join(fmt.Errorf("schema: accept %s: look up the version: %w", subject, err), restoreErr)
	}
	return SubjectVersion{Subject: subject, Version: got.Version, ID: id, Schema: rej.schema}, restoreErr
}
