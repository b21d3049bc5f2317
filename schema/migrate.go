package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Moving a subject from cdcd's legacy envelope to Debezium's.
//
// A pipeline that upgrades registers its tables' value schemas in the new
// layout, and the subjects' levels refuse them: a NOT NULL column's field
// becomes required where the legacy schema had ["null", T], and under
// FORWARD the legacy readers would miss their source.position. Each of
// those refusals would pause a table. MigrateEnvelope tells such a refusal
// from a real change of the table: it renders every legacy version of the
// subject again in the new layout, and when the new schema passes the
// subject's level against those renderings — the table changed compatibly
// or not at all, only the envelope moved — it registers the schema without
// the check (as `cdcd schema accept` would). Records keep their schema ids,
// so the legacy ones stay readable (DecodeEnvelope reads both layouts).

// migrationClient is what MigrateEnvelope needs of a registry: both
// *Registry and *Remote have it.
type migrationClient interface {
	liveVersions(ctx context.Context, subject string) ([]SubjectVersion, error)
	Accept(ctx context.Context, subject string) (SubjectVersion, error)
}

func (r *Registry) liveVersions(_ context.Context, subject string) ([]SubjectVersion, error) {
	return r.Versions(subject)
}

func (r *Remote) liveVersions(ctx context.Context, subject string) ([]SubjectVersion, error) {
	ss, err := r.cl.Schemas(ctx, subject)
	if err != nil {
		return nil, fmt.Errorf("schema: versions of %s: %w", subject, err)
	}
	out := make([]SubjectVersion, len(ss))
	for i, s := range ss {
		out[i] = SubjectVersion{Subject: subject, Version: s.Version, ID: uint32(s.ID), Schema: s.Schema.Schema}
	}
	return out, nil
}

// MigrateEnvelope registers valueSchema, which c refused with refused, when
// the refusal is only the move from the legacy envelope (above): the
// versions the subject's level selects (the latest, or all under a
// transitive level) include a legacy one, and valueSchema passes the level
// against each of them, the legacy ones rendered in the new layout. It
// returns the registered version and true, or false when the refusal
// stands (a client without the ability, no legacy version, or a change of
// the table the level refuses in any layout). valueSchema is in Debezium's
// layout for subject <topic>-value.
func MigrateEnvelope(ctx context.Context, c Client, subject, valueSchema string, refused *IncompatibleError) (SubjectVersion, bool, error) {
	mc, ok := c.(migrationClient)
	if !ok || refused == nil || !strings.HasSuffix(subject, "-value") {
		return SubjectVersion{}, false, nil
	}
	newTable, err := TableFromValueSchema(valueSchema)
	if err != nil {
		return SubjectVersion{}, false, err
	}
	connector := ConnectorPostgres
	if newTable.envelope == layoutMySQL {
		connector = ConnectorMySQL
	}
	versions, err := mc.liveVersions(ctx, subject)
	if err != nil {
		return SubjectVersion{}, false, err
	}
	if refused.Level == None || len(versions) == 0 {
		return SubjectVersion{}, false, nil
	}
	against := versions[len(versions)-1:] // the level's versions: the latest, or all
	if refused.Level.transitive() {
		against = versions
	}
	if !slices.ContainsFunc(against, func(v SubjectVersion) bool { return IsLegacyEnvelope(v.Schema) }) {
		return SubjectVersion{}, false, nil
	}
	topic := strings.TrimSuffix(subject, "-value")
	for _, v := range against {
		older := v.Schema
		if IsLegacyEnvelope(older) {
			old, err := TableFromValueSchema(older)
			if err != nil {
				return SubjectVersion{}, false, err
			}
			if older, err = ValueSchemaFor(old, topic, connector); err != nil {
				return SubjectVersion{}, false, err
			}
		}
		var inc *IncompatibleError
		if err := CheckCompatibility(older, valueSchema, refused.Level); errors.As(err, &inc) {
			return SubjectVersion{}, false, nil // the table itself changed incompatibly
		} else if err != nil {
			return SubjectVersion{}, false, err
		}
	}
	sv, err := mc.Accept(ctx, subject)
	if err != nil && sv.Subject == "" {
		return SubjectVersion{}, false, fmt.Errorf("schema: move %s to Debezium's envelope: %w", subject, err)
	}
	return sv, true, err
}
