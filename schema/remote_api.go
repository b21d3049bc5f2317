package schema

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// NewRemoteHandler serves the registry API on cdcd's admin listener when
// the registry is remote: cdcd's own routes (GET /cdcd/rejected, POST
// /cdcd/subjects/{s}/accept) from r, every other request passed on to the
// registry (with r's credentials), so `cdcd schema` works against the
// daemon whichever registry it uses.
func NewRemoteHandler(r *Remote) (http.Handler, error) {
	target, err := url.Parse(r.cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("schema: remote registry URL %q: %w", r.cfg.URL, err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			if r.cfg.Username != "" || r.cfg.Password != "" {
				pr.Out.SetBasicAuth(r.cfg.Username, r.cfg.Password)
			}
		},
	}
	if r.cfg.HTTPClient != nil && r.cfg.HTTPClient.Transport != nil {
		proxy.Transport = r.cfg.HTTPClient.Transport
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /cdcd/rejected", func(w http.ResponseWriter, _ *http.Request) {
		out := []RejectedSchema{}
		for _, s := range r.RejectedSubjects() {
			if schema, ierr, ok := r.Rejected(s); ok {
				out = append(out, RejectedSchema{Subject: s, Schema: schema, Level: ierr.Level.String(),
					Version: ierr.Version, Messages: ierr.Messages()})
			}
		}
		respond(w, out)
	})
	m.HandleFunc("POST /cdcd/subjects/{subject}/accept", func(w http.ResponseWriter, req *http.Request) {
		sv, err := r.Accept(req.Context(), req.PathValue("subject"))
		switch {
		case err != nil && sv.Subject == "":
			respondRegistryError(w, err)
		case err != nil: // accepted, but the subject's level was not put back
			respondError(w, 50001, "accepted as version %d (id %d), but: %v", sv.Version, sv.ID, err)
		default:
			respond(w, sv)
		}
	})
	m.Handle("/", proxy)
	return m, nil
}
