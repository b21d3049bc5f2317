package config

import (
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// nastyPasswords hold every character that splits a URL or a key=value
// DSN somewhere, and the escapes that would be decoded twice.
var nastyPasswords = []string{
	"zq7@vx9/kp3#lm5%41:rt8?yw2 hn6",
	`qu'ote\back slash`,
	"a@b@c", "%", "%zz", " lead and trail ", "=", "&port=1", "é€", "",
}

// dsnEnv parses the config with source.postgres.dsn (and the other URL
// keys) set to the given templates, ${PW} being password.
func dsnEnv(password string) Option {
	return WithLookupEnv(func(name string) (string, bool) {
		v, ok := map[string]string{"PW": password, "PGUSER": "us:er@x"}[name]
		return v, ok
	})
}

func parseWithDSN(t *testing.T, dsn string, env Option) *Config {
	t.Helper()
	src := edit(t, "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", "    dsn: "+quoteYAML(dsn))
	src = strings.Replace(src, "$${", "${", -1) // quoteYAML escapes ${ for a literal
	c, err := Parse([]byte(src), "cdcd.yaml", env)
	if err != nil {
		t.Fatalf("dsn %s: %v", dsn, err)
	}
	return c
}

// TestSecretsEscapedIntoDSN: whatever a password holds, the driver reads
// back the password, user, host and database the template names.
func TestSecretsEscapedIntoDSN(t *testing.T) {
	templates := []struct{ dsn, user string }{
		{"postgres://cdc:${PW}@127.0.0.1:5432/shop", "cdc"},
		{"postgresql://cdc:${PW}@127.0.0.1:5432/shop?sslmode=disable", "cdc"},
		{"postgres://cdc@127.0.0.1:5432/shop?password=${PW}&sslmode=disable", "cdc"},
		{"postgres://${PGUSER}:${PW}@127.0.0.1:5432/shop", "us:er@x"},
		{"host=127.0.0.1 port=5432 user=cdc password=${PW} dbname=shop", "cdc"},
		{"host=127.0.0.1 port=5432 user=cdc password='${PW}' dbname=shop", "cdc"},
		{"password=${PW} host=127.0.0.1 port=5432 user=cdc dbname=shop", "cdc"},
	}
	for _, pw := range nastyPasswords {
		for _, tc := range templates {
			c := parseWithDSN(t, tc.dsn, dsnEnv(pw))
			got, err := pgconn.ParseConfig(c.Source.Postgres.DSN)
			if err != nil {
				t.Errorf("password %q in %s: pgconn refuses the DSN: %v", pw, tc.dsn, err)
				continue
			}
			if got.Password != pw || got.User != tc.user || got.Host != "127.0.0.1" || got.Port != 5432 || got.Database != "shop" {
				t.Errorf("password %q in %s: pgconn reads user %q password %q host %q port %d database %q",
					pw, tc.dsn, got.User, got.Password, got.Host, got.Port, got.Database)
			}
			if pw != "" && len(pw) > 2 && strings.Contains(c.String(), pw) {
				t.Errorf("password %q in %s: Config.String shows it", pw, tc.dsn)
			}
			if pw != "" && !slices.Contains(c.Secrets(), pw) {
				t.Errorf("password %q in %s: Secrets() = %q lacks it", pw, tc.dsn, c.Secrets())
			}
		}
	}
}

// TestSecretsEscapedIntoURLs: the catalog's postgres:// URI and the
// webhook's URL get the same escaping as the source's DSN.
func TestSecretsEscapedIntoURLs(t *testing.T) {
	for _, pw := range nastyPasswords {
		src := edit(t, "    catalog: {type: sql, uri: sqlite://./cdcd-data/catalog.db, name: cdcd}",
			`    catalog: {type: sql, uri: "postgres://iceberg:${PW}@db:5432/iceberg", name: cdcd}`)
		src += "alerts:\n  webhook: {url: \"https://hook:${PW}@alerts.example/api/v2/alerts\"}\n"
		src = strings.Replace(src, "${PGPASSWORD}", "${PW}", 1)
		c, err := Parse([]byte(src), "cdcd.yaml", dsnEnv(pw))
		if err != nil {
			t.Fatalf("password %q: %v", pw, err)
		}
		cat, err := pgconn.ParseConfig(c.Sink.Iceberg.Catalog.URI)
		if err != nil || cat.Password != pw || cat.Host != "db" {
			t.Errorf("password %q: the catalog URI reads back as host %q password %q (%v)", pw, cat.Host, cat.Password, err)
		}
		u, err := url.Parse(c.Alerts.Webhook.URL)
		if err != nil {
			t.Errorf("password %q: the webhook URL does not parse", pw)
			continue
		}
		if got, _ := u.User.Password(); got != pw || u.Host != "alerts.example" {
			t.Errorf("password %q: the webhook URL reads back as host %q password %q", pw, u.Host, got)
		}
	}
}

// TestSecretsEscapedIntoMySQLDSN: the MySQL source's URL gets the same
// escaping, read back by net/url as the MySQL reader reads it.
func TestSecretsEscapedIntoMySQLDSN(t *testing.T) {
	for _, pw := range nastyPasswords {
		src := "pipeline: shop\nsource:\n  mysql: {dsn: 'mysql://cdc:${PW}@db:3306/shop', tables: [shop.orders], snapshot: never}\n"
		c, err := Parse([]byte(src), "cdcd.yaml", dsnEnv(pw))
		if err != nil {
			t.Fatalf("password %q: %v", pw, err)
		}
		u, err := url.Parse(c.Source.MySQL.DSN)
		if err != nil {
			t.Errorf("password %q: the DSN does not parse", pw)
			continue
		}
		if got, _ := u.User.Password(); got != pw || u.Host != "db:3306" || u.Path != "/shop" {
			t.Errorf("password %q: read back as host %q path %q password %q", pw, u.Host, u.Path, got)
		}
		if pw != "" && !slices.Contains(c.Secrets(), pw) {
			t.Errorf("password %q: Secrets() lacks it", pw)
		}
	}
	for _, dsn := range []string{"mysql://cdc:zq7/vx9@db:3306/shop", "mysql://cdc:zq7#vx9@db:3306/shop", "mysql://cdc:zq7%vx9@db/shop"} {
		src := "pipeline: shop\nsource:\n  mysql: {dsn: '" + dsn + "', tables: [shop.orders], snapshot: never}\n"
		_, err := Parse([]byte(src), "cdcd.yaml", testEnv)
		if err == nil || !strings.Contains(err.Error(), "source.mysql.dsn: the URL does not parse") || strings.Contains(err.Error(), "vx9") {
			t.Errorf("%s: %v", dsn, err)
		}
	}
}

// TestDSNThatDoesNotParse: a DSN the driver would misread is refused with
// its key path, line and column and without any piece of it.
func TestDSNThatDoesNotParse(t *testing.T) {
	cases := []struct{ dsn, secret, msg string }{
		{"postgres://cdc:zq7@vx9@127.0.0.1:5432/shop", "vx9", "a second @ after the user info"},
		{"postgres://cdc:zq7/vx9@127.0.0.1:5432/shop", "vx9", "the port after the host is not a number"},
		{"postgres://cdc:zq7%vx9@127.0.0.1:5432/shop", "vx9", "% not followed by two hex digits"},
		{"postgres://cdc@127.0.0.1:5432/shop?password=zq7=vx9", "vx9", "has a second ="},
		{"postgres://cdc@127.0.0.1:5432/shop?zq7vx9", "vx9", "has no ="},
		{"host=127.0.0.1 user=cdc password='zq7 vx9 dbname=shop", "vx9", "never closed"},
		{"host=127.0.0.1 user=cdc password=zq7 vx9 dbname=shop", "vx9", "a word is not followed by ="},
		{"host=127.0.0.1 user=cdc password=zq7 vx9", "vx9", "the text after the last value has no ="},
	}
	for _, tc := range cases {
		src := edit(t, "    dsn: postgres://cdc:${PGPASSWORD}@127.0.0.1:5432/shop", "    dsn: "+quoteYAML(tc.dsn))
		es := problems(t, src)
		expect(t, src, want{"source.postgres.dsn", 5, 5, ErrInvalid, tc.msg})
		if strings.Contains(es.Error(), tc.secret) {
			t.Errorf("%s: the problem shows a piece of the DSN: %s", tc.dsn, es.Error())
		}
	}
	// A webhook URL that does not parse.
	src := full + "alerts:\n  webhook: {url: \"https://hook:zq7 vx9@alerts.example/\"}\n"
	es := problems(t, src)
	if len(es) != 1 || es[0].Path != "alerts.webhook.url" || strings.Contains(es.Error(), "vx9") {
		t.Errorf("webhook URL: %v", es)
	}
}

func TestRedactEscapedKVPassword(t *testing.T) {
	got := redact(`host=h password=zq7\ vx9\\ dbname=shop sslpassword='a\'b c'`)
	if want := `host=h password=*** dbname=shop sslpassword=***`; got != want {
		t.Errorf("redact = %q, want %q", got, want)
	}
}
