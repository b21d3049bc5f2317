package config

import (
	"strings"
	"testing"
	"time"
)

// operatorFull is full plus every operator key; cases edit one line, so
// their line numbers are the ones shown here (full has 23 lines).
const operatorFull = full + `shutdown:
  deadline: 20s
alerts:
  interval: 5s
  realert_interval: 30m
  slot_lag_bytes: {warning: 512MB, critical: 2GiB}
  slot_lag_time: {warning: 2m, critical: 20m}
  safe_wal_percent: {warning: 40, critical: 10}
  consumer_lag: {warning: 1m, critical: 10m}
  table_paused: {warning: 0s, critical: 1h}
  commit_stall: {warning: 2m, critical: 10m}
  webhook:
    url: https://am:${PGPASSWORD}@alertmanager:9093/api/v2/alerts
    timeout: 2s
    retries: 3
    backoff: 500ms
masking:
  salt: ${SALT}
  tables:
    - table: customers
      exclude: [ssn]
      hash: [email]
      redact: [phone, note]
`

var operatorEnv = WithLookupEnv(func(name string) (string, bool) {
	v, ok := map[string]string{"PGPASSWORD": "s3cret", "SALT": "0123456789abcdef0123", "SHORT": "abc"}[name]
	return v, ok
})

func TestOperatorKeysParse(t *testing.T) {
	c, err := Parse([]byte(operatorFull), "cdcd.yaml", operatorEnv)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Alerts
	if c.Shutdown.Deadline != 20*time.Second || a.Interval != 5*time.Second || a.RealertInterval != 30*time.Minute {
		t.Errorf("shutdown/alerts: %+v %+v", c.Shutdown, a)
	}
	if a.SlotLagBytes != (SizeLimit{512 << 20, 2 << 30}) || a.SafeWALPercent != (PercentLimit{40, 10}) {
		t.Errorf("limits: %+v %+v", a.SlotLagBytes, a.SafeWALPercent)
	}
	if a.TablePaused.Warning != 0 || a.TablePaused.Critical != time.Hour {
		t.Errorf("an explicit 0s must stay (it turns the level off): %+v", a.TablePaused)
	}
	if w := a.Webhook; w == nil || w.Retries != 3 || w.Backoff != 500*time.Millisecond || !strings.Contains(w.URL, "s3cret") {
		t.Errorf("webhook: %+v", w)
	}
	mt := c.MaskingFor("public.customers")
	if mt == nil || mt.Table != "public.customers" || mt.Hash[0] != "email" || len(mt.Redact) != 2 {
		t.Errorf("masking: %+v", mt)
	}
	if c.MaskingFor("public.orders") != nil {
		t.Error("orders is not masked")
	}
	s := c.String()
	for _, secret := range []string{"s3cret", "0123456789abcdef0123"} {
		if strings.Contains(s, secret) {
			t.Errorf("String shows %q:\n%s", secret, s)
		}
	}
	for _, line := range []string{"    warning: 512MiB", "  salt: \"***\"", "    - table: public.customers", "      redact:"} {
		if !strings.Contains(s, line+"\n") {
			t.Errorf("String lacks %q:\n%s", line, s)
		}
	}
	// The rendering parses back to the same config, secrets aside.
	back, err := Parse([]byte(strings.ReplaceAll(s, `"***"`, "${SALT}")), "rendered.yaml", operatorEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, s)
	}
	back.Alerts.Webhook.URL, back.Source.Postgres.DSN = a.Webhook.URL, c.Source.Postgres.DSN
	if !sameConfig(c, back) {
		t.Errorf("round trip changed the config:\n%s\n%s", c, back)
	}
}

func TestOperatorValidate(t *testing.T) {
	cases := []struct {
		name, old, new string
		w              want
	}{
		{"deadline zero", "  deadline: 20s", "  deadline: 0s",
			want{"shutdown.deadline", 25, 3, ErrInvalid, "must be positive"}},
		{"interval tiny", "  interval: 5s", "  interval: 1ms",
			want{"alerts.interval", 27, 3, ErrInvalid, "must be at least 100ms"}},
		{"size without unit word", "  slot_lag_bytes: {warning: 512MB, critical: 2GiB}", "  slot_lag_bytes: {warning: 512 megs, critical: 2GiB}",
			want{"alerts.slot_lag_bytes.warning", 29, 20, ErrInvalid, `"512 megs" is not a size`}},
		{"size octal trap", "  slot_lag_bytes: {warning: 512MB, critical: 2GiB}", "  slot_lag_bytes: {warning: 0100, critical: 2GiB}",
			want{"alerts.slot_lag_bytes.warning", 29, 20, ErrAmbiguous, "leading zero"}},
		{"critical below warning", "  slot_lag_time: {warning: 2m, critical: 20m}", "  slot_lag_time: {warning: 2m, critical: 1m}",
			want{"alerts.slot_lag_time.critical", 30, 32, ErrInvalid, "critical must be the higher level"}},
		{"percent range", "  safe_wal_percent: {warning: 40, critical: 10}", "  safe_wal_percent: {warning: 140, critical: 10}",
			want{"alerts.safe_wal_percent.warning", 31, 22, ErrInvalid, "from 0 to 100"}},
		{"percent order", "  safe_wal_percent: {warning: 40, critical: 10}", "  safe_wal_percent: {warning: 40, critical: 60}",
			want{"alerts.safe_wal_percent.critical", 31, 35, ErrInvalid, "critical must be the lower one"}},
		{"stall shorter than commits", "  commit_stall: {warning: 2m, critical: 10m}", "  commit_stall: {warning: 5s, critical: 10m}",
			want{"alerts.commit_stall.warning", 34, 18, ErrInvalid, "longer than sink.iceberg.commit_interval (10s)"}},
		{"webhook scheme", "    url: https://am:${PGPASSWORD}@alertmanager:9093/api/v2/alerts", "    url: alertmanager:9093",
			want{"alerts.webhook.url", 36, 5, ErrInvalid, "must be an http:// or https:// URL"}},
		{"webhook retries", "    retries: 3", "    retries: -1",
			want{"alerts.webhook.retries", 38, 5, ErrInvalid, "must not be negative"}},
		{"masked table not captured", "    - table: customers", "    - table: public.payments",
			want{"masking.tables[0].table", 43, 7, ErrInvalid, "public.payments is not captured"}},
		{"column twice", "      redact: [phone, note]", "      redact: [phone, email]",
			want{"masking.tables[0].redact[1]", 46, 23, ErrInvalid, `column "email" is already masked by masking.tables[0].hash[0]`}},
		{"salt missing", "  salt: ${SALT}", "  salt: null",
			want{"masking.salt", 41, 3, ErrInvalid, "required when a column is hashed"}},
		{"salt short", "  salt: ${SALT}", "  salt: ${SHORT}",
			want{"masking.salt", 41, 3, ErrInvalid, "too short (3 bytes)"}},
		{"masks nothing", "      exclude: [ssn]\n      hash: [email]\n      redact: [phone, note]", "      exclude: []",
			want{"masking.tables[0]", 43, 7, ErrInvalid, "masks nothing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(operatorFull, tc.old+"\n", tc.new+"\n", 1)
			if src == operatorFull {
				t.Fatalf("no line %q", tc.old)
			}
			expectWith(t, src, tc.w)
		})
	}
}

// expectWith is expect with operatorEnv (testEnv has no SALT).
func expectWith(t *testing.T, src string, w want) {
	t.Helper()
	_, err := Parse([]byte(src), "cdcd.yaml", operatorEnv)
	errs, ok := err.(Errors)
	if !ok {
		t.Fatalf("want Errors, got %v", err)
	}
	for _, e := range errs {
		if e.Path != w.path || !strings.Contains(e.Msg, w.substr) {
			continue
		}
		if e.Line != w.line || w.col != 0 && e.Column != w.col {
			t.Errorf("%s: at %d:%d, want %d:%d", e.Path, e.Line, e.Column, w.line, w.col)
		}
		if !strings.HasPrefix(e.Error(), "cdcd.yaml:") {
			t.Errorf("%q has no file:line", e.Error())
		}
		return
	}
	t.Errorf("no problem at %s containing %q; got:\n%v", w.path, w.substr, errs)
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{
		"0": 0, "1024": 1024, "64kB": 64 << 10, "48MB": 48 << 20, "48 MiB": 48 << 20, "1GB": 1 << 30, "2TiB": 2 << 40, "7B": 7,
	} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MB", "-1MB", "1.5GB", "10 parsecs", "99999999999TB"} {
		if _, err := ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
	}
	for in, want := range map[ByteSize]string{0: "0", 1000: "1000", 1 << 30: "1GiB", 48 << 20: "48MiB", 1536: "1536"} {
		if got := in.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int64(in), got, want)
		}
	}
}
