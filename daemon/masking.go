package daemon

import (
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
		rules[t.Table] = mask.Rules{Exclude: t.Exclude, Hash: t.Hash, Redact: t.Redact}
	}
	return mask.New([]byte(m.Salt), rules)
}

// masked applies the masking rules to c before it is encoded: the emitter's
// one masking hook. c is returned as is when its table is not masked.
func (e *emitter) masked(c *source.Change) (*source.Change, error) {
	if e.masker == nil {
		return c, nil
	}
	return e.masker.Change(c)
}
