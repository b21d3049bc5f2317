package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/cdcd-dev/cdcd/config"
)

// A scrubber replaces the config's secrets (config.Secrets) with *** in
// text the daemon shows: log records and the /status document. The config
// is escaped and validated so that drivers read DSNs as written and never
// quote passwords; this is the second line, for whatever a library puts in
// an error. Secrets shorter than minScrubLen are left alone: replacing
// every "abc" of every line would garble the log more than it protects.
type scrubber struct{ r *strings.Replacer }

const minScrubLen = 4

// newScrubber returns a scrubber for secrets, or nil when there are none
// long enough.
func newScrubber(secrets []string) *scrubber {
	var pairs []string
	for _, s := range secrets {
		if len(s) < minScrubLen {
			continue
		}
		js, _ := json.Marshal(s)
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s), string(js[1 : len(js)-1])} {
			pairs = append(pairs, form, "***")
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	return &scrubber{strings.NewReplacer(pairs...)}
}

func (s *scrubber) scrub(text string) string {
	if s == nil {
		return text
	}
	return s.r.Replace(text)
}

// RedactSecrets returns a logger that writes through logger's handler with
// every secret of cfg replaced by *** in messages and attribute values
// (strings, errors and Stringers). cdcd run logs through it.
func RedactSecrets(logger *slog.Logger, cfg *config.Config) *slog.Logger {
	if _, done := logger.Handler().(*scrubHandler); done {
		return logger
	}
	s := newScrubber(cfg.Secrets())
	if s == nil {
		return logger
	}
	return slog.New(&scrubHandler{h: logger.Handler(), s: s})
}

type scrubHandler struct {
	h slog.Handler
	s *scrubber
}

func (h *scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h *scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.s.scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.h.Handle(ctx, out)
}

func (h *scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = h.attr(a)
	}
	return &scrubHandler{h: h.h.WithAttrs(clean), s: h.s}
}

func (h *scrubHandler) WithGroup(name string) slog.Handler {
	return &scrubHandler{h: h.h.WithGroup(name), s: h.s}
}

// attr scrubs an attribute's value; numbers, times and the like are kept.
func (h *scrubHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.s.scrub(v.String()))
	case slog.KindGroup:
		as := v.Group()
		clean := make([]any, len(as))
		for i, g := range as {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, h.s.scrub(x.Error()))
		case fmt.Stringer:
			if s := x.String(); h.s.scrub(s) != s {
				return slog.String(a.Key, h.s.scrub(s))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
