package daemon_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/cdcd-dev/cdcd/config"
	"github.com/cdcd-dev/cdcd/daemon"
)

// TestRedactSecrets: a secret of the config (a DSN's password, a token)
// is replaced by *** wherever a log record carries it: message, string,
// error and Stringer attributes, groups and With attributes, as written
// and percent-encoded.
func TestRedactSecrets(t *testing.T) {
	const pw = "s3cr@t pass/word"
	cfg := &config.Config{
		Pipeline: "shop",
		Source: config.Source{Postgres: &config.Postgres{
			DSN: "postgres://cdc:" + strings.NewReplacer("@", "%40", " ", "%20", "/", "%2F").Replace(pw) + "@127.0.0.1/shop", Tables: []string{"public.t"},
		}},
		Sink: config.Sink{Iceberg: &config.Iceberg{Catalog: config.Catalog{Type: "rest", Token: "tok-123456"}}},
	}
	var buf bytes.Buffer
	logger := daemon.RedactSecrets(slog.New(slog.NewTextHandler(&buf, nil)), cfg)
	u, _ := url.Parse("http://u:tok-123456@h/")
	logger.With("dsn", "password="+pw).Info("connecting with "+pw,
		"err", errors.New("auth failed for "+url.QueryEscape(pw)),
		slog.Group("catalog", "token", "tok-123456"), "url", u, "n", 42)
	out := buf.String()
	for _, s := range []string{pw, url.QueryEscape(pw), url.PathEscape(pw), "tok-123456"} {
		if strings.Contains(out, s) {
			t.Errorf("the log holds %q:\n%s", s, out)
		}
	}
	if strings.Count(out, "***") != 5 || !strings.Contains(out, "n=42") {
		t.Errorf("want five *** and the other attributes kept:\n%s", out)
	}
	if daemon.RedactSecrets(logger, cfg) != logger {
		t.Error("a redacting logger is wrapped again")
	}
}
