package config

import (
	"net/url"
	"reflect"
	"strings"
)

// Secrets returns the secret values of the config, for scrubbing them from
// logs and status output: the values of keys tagged secret:"all" (tokens,
// keys, the masking salt), the admin token (also from its file) and the
// passwords inside the URLs and DSNs
// tagged secret:"true", as the driver will read them (percent-decoded,
// unquoted). Each appears once; empty values are left out.
func (c *Config) Secrets() []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	if tok, err := c.Admin.AdminToken(); err == nil {
		add(tok) // also from a token file
	}
	walkSecrets(reflect.ValueOf(*c), func(tag, val string) {
		if tag == "all" {
			add(val)
			return
		}
		for _, pw := range dsnPasswords(val) {
			add(pw)
		}
	})
	return out
}

// walkSecrets calls fn with the tag and value of every string field of v
// tagged secret, in sections, optional sections and lists of sections.
func walkSecrets(v reflect.Value, fn func(tag, val string)) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			walkSecrets(v.Elem(), fn)
		}
	case reflect.Slice:
		for i := range v.Len() {
			walkSecrets(v.Index(i), fn)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			if tag := f.Tag.Get("secret"); tag != "" && f.Type.Kind() == reflect.String {
				fn(tag, v.Field(i).String())
				continue
			}
			walkSecrets(v.Field(i), fn)
		}
	}
}

// dsnPasswords returns the passwords in a URL or key=value DSN: the user
// info's password and password/sslpassword parameters.
func dsnPasswords(s string) []string {
	var out []string
	if i := strings.Index(s, "://"); i >= 0 && scheme(s) != "" {
		rest := s[i+len("://"):]
		if at := strings.IndexAny(rest, "@/"); at >= 0 && rest[at] == '@' {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				out = append(out, unescapeURL(pw))
			}
		}
		if _, query, ok := strings.Cut(rest, "?"); ok {
			for _, pair := range strings.Split(query, "&") {
				k, v, _ := strings.Cut(pair, "=")
				if k = strings.ToLower(unescapeURL(k)); k == "password" || k == "sslpassword" {
					out = append(out, unescapeURL(v))
				}
			}
		}
		return out
	}
	for _, m := range kvPassword.FindAllStringSubmatch(s, -1) {
		out = append(out, unquoteKV(m[2]))
	}
	return out
}

func unescapeURL(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// unquoteKV reads a key=value DSN value as libpq does: outer quotes
// dropped, a backslash escaping the next byte.
func unquoteKV(s string) string {
	if len(s) >= 2 && s[0] == '\'' && s[len(s)-1] == '\'' {
		s = s[1 : len(s)-1]
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
