package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/cdcd-dev/cdcd/config"
)

// The admin listener's guard, in the order it checks a request:
//
//  1. Host: an IP address, localhost, the listen host, this machine's
//     name or one of admin.hosts; anything else is a name a web page
//     pointed at cdcd (DNS rebinding): 403.
//  2. Origin (and Sec-Fetch-Site): a browser's request from another origin
//     than the listener's own: 403. Clients that are not browsers send
//     neither.
//  3. A state-changing method (anything but GET, HEAD, OPTIONS) with a
//     content type an HTML form sends without a CORS preflight
//     (text/plain, application/x-www-form-urlencoded, multipart/form-data):
//     415.
//  4. With admin.auth, a state-changing request, or any request but
//     /healthz and /readyz with protect_reads, needs a client certificate
//     verified by admin.tls.client_ca or the token (Bearer, or the
//     basic-auth password): 401 without credentials, 403 with a wrong
//     token. Tokens are compared in constant time, as SHA-256 digests.
//
// Refusals are logged at WARN with the method, path, remote address and
// reason, never with the credentials.
type guard struct {
	next         http.Handler
	logger       *slog.Logger
	hosts        map[string]bool // lower-case names besides IPs and localhost
	auth         bool
	token        [sha256.Size]byte // digest of the token; auth without a token: certificates only
	hasToken     bool
	protectReads bool
}

// GuardAdmin wraps next with the admin listener's checks as admin
// configures them: what the daemon serves its admin API behind, for
// servers in tests that stand in for the daemon.
func GuardAdmin(admin config.Admin, next http.Handler, logger *slog.Logger) (http.Handler, error) {
	g, err := newGuard(admin, next, logger)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// newGuard wraps next with the checks admin configures.
func newGuard(admin config.Admin, next http.Handler, logger *slog.Logger) (*guard, error) {
	g := &guard{next: next, logger: logger, hosts: map[string]bool{"localhost": true}}
	if host, _, err := net.SplitHostPort(admin.Listen); err == nil && host != "" {
		g.hosts[strings.ToLower(host)] = true
	}
	if name, err := os.Hostname(); err == nil && name != "" {
		g.hosts[strings.ToLower(name)] = true
	}
	for _, h := range admin.Hosts {
		g.hosts[strings.ToLower(h)] = true
	}
	if admin.Auth == nil {
		return g, nil
	}
	tok, err := admin.AdminToken()
	if err != nil {
		return nil, err
	}
	g.auth, g.protectReads = true, admin.Auth.ProtectReads
	if tok != "" {
		g.token, g.hasToken = sha256.Sum256([]byte(tok)), true
	}
	return g, nil
}

// howToAuthenticate is the 401's advice.
const howToAuthenticate = "authentication required: send the admin token of admin.auth as \"Authorization: Bearer TOKEN\" (or as the password of HTTP basic auth), or a client certificate signed by admin.tls.client_ca; cdcd commands read the token from the config file given with -c, or from CDCD_ADMIN_TOKEN"

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hostAllowed(r.Host) {
		g.refuse(w, r, http.StatusForbidden, fmt.Sprintf("the Host header %s is not a name this cdcd answers to: use an IP address or localhost, or add the name to admin.hosts", shortText(r.Host)))
		return
	}
	if why := crossOrigin(r); why != "" {
		g.refuse(w, r, http.StatusForbidden, "cross-origin requests are refused: "+why)
		return
	}
	writes := r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodOptions
	if writes && formContentType(r.Header.Get("Content-Type")) {
		g.refuse(w, r, http.StatusUnsupportedMediaType, "a request that changes state must not be sent as a form or text/plain (browsers send those across origins): send JSON, or no body")
		return
	}
	open := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
	if g.auth && !open && (writes || g.protectReads) {
		switch g.authenticated(r) {
		case credsMissing:
			w.Header().Set("WWW-Authenticate", `Bearer realm="cdcd", Basic realm="cdcd"`)
			g.refuse(w, r, http.StatusUnauthorized, howToAuthenticate)
			return
		case credsWrong:
			g.refuse(w, r, http.StatusForbidden, "the admin token is wrong: use the token of admin.auth (cdcd commands: -c FILE or CDCD_ADMIN_TOKEN)")
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// hostAllowed reports whether a Host header names this listener.
func (g *guard) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if net.ParseIP(host) != nil {
		return true // rebinding needs a name; an address is what it is
	}
	return g.hosts[strings.ToLower(host)]
}

// crossOrigin says why a request comes from a browser on another origin
// ("" when it does not).
func crossOrigin(r *http.Request) string {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return "Sec-Fetch-Site is cross-site"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != scheme || !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + shortText(origin) + " is not this listener's origin"
	}
	return ""
}

// formContentType reports whether a content type is one a cross-origin
// form or fetch may send without a CORS preflight.
func formContentType(ct string) bool {
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return true // unparsable: not JSON
	}
	switch mt {
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		return true
	}
	return false
}

type creds int

const (
	credsOK creds = iota
	credsMissing
	credsWrong
)

// authenticated checks a request's client certificate or token.
func (g *guard) authenticated(r *http.Request) creds {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return credsOK
	}
	var given string
	if pw, ok := basicPassword(r); ok {
		given = pw
	} else if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		given = strings.TrimSpace(tok)
	} else {
		return credsMissing
	}
	sum := sha256.Sum256([]byte(given))
	if !g.hasToken || subtle.ConstantTimeCompare(sum[:], g.token[:]) != 1 {
		return credsWrong
	}
	return credsOK
}

func basicPassword(r *http.Request) (string, bool) {
	_, pw, ok := r.BasicAuth()
	return pw, ok
}

func (g *guard) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	g.logger.Warn("admin request refused", "method", r.Method, "path", shortText(r.URL.Path), "remote", r.RemoteAddr, "status", code, "reason", msg)
	http.Error(w, msg, code)
}

// shortText quotes attacker-controlled text for a message, cut short.
func shortText(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
