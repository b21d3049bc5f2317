package daemon

import (
	"strings"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/mask"
	"github.com/cdcd-dev/cdcd/source"
)

// newMasker builds the masking rules of cfg; nil when nothing is masked.
func newMasker(cfg *config.Config) *mask.Masker {
	m := cfg.Masking
	if m == nil || len(m.Tables) == 0 {
		return nil
	}
	rules := make(map[string]mask.Rules, len(m.Tables))
	for _, t := range m.Tables {
		ns, tbl := splitTable(t.Table)
		rules[ns+"."+tbl] = mask.Rules{Exclude: t.Exclude, Hash: t.Hash, Redact: t.Redact} // as the source names the table
	}
	return mask.New([]byte(m.Salt), rules)
}

// masked applies the masking rules to c before it is encoded: the emitter's
// one masking hook. c is returned as is when its table is not masked.
func (e *emitter) masked(c *source.Change) (*source.Change, error) {
	if e.masker == nil {
		return c, nil
	}
	m, err := e.masker.Change(c)
	if err != nil || c.Fault == nil || c.Fault.Value == "" || !e.masker.Masks(c.Table.QualifiedName(), c.Fault.Column) {
		return m, err
	}
	// A faulty value of a masked column is named, never shown.
	f := *c.Fault
	f.Reason, f.Value = strings.ReplaceAll(f.Reason, f.Value, "(masked)"), "(masked)"
	if m == c {
		cp := *c
		m = &cp
	}
	m.Fault = &f
	return m, nil
}
