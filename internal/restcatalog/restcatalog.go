// Package restcatalog is a small Apache Iceberg REST catalog server for
// tests: an http.Handler implementing the parts of the REST catalog spec
// that iceberg-go's client (catalog/rest) uses to create, load and commit
// tables, so that a test can run cdcd's sink against a REST catalog over
// real HTTP (httptest) where no Java catalog server can run.
//
// Endpoints (no prefix):
//
//	GET    /v1/config                                 defaults, overrides, the endpoints below
//	POST   /v1/oauth/tokens                           OAuth2 client credentials -> bearer token
//	GET    /v1/namespaces                             list (?parent=)
//	POST   /v1/namespaces                             create
//	GET    /v1/namespaces/{ns}                        load (HEAD: exists)
//	DELETE /v1/namespaces/{ns}                        drop (empty only)
//	GET    /v1/namespaces/{ns}/tables                 list
//	POST   /v1/namespaces/{ns}/tables                 create (also staged)
//	GET    /v1/namespaces/{ns}/tables/{table}         load (HEAD: exists)
//	POST   /v1/namespaces/{ns}/tables/{table}         commit: requirements, then updates
//	DELETE /v1/namespaces/{ns}/tables/{table}         drop (files stay)
//
// A commit validates the request's requirements against the current
// metadata (409 CommitFailedException when one fails), applies its updates
// with iceberg-go's metadata builder (table.UpdateTableMetadata), writes
// the result as the table's next metadata file through iceberg-go's file
// IO (file:// or s3://), and then moves the table's pointer, all under one
// lock: commits to a table are serialized, as a real catalog's are. The
// pointers (namespace -> properties, table -> metadata location) live in
// memory, so a Server is one catalog for the life of a test.
package restcatalog

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	// Registers the s3:// file IO (see sink/iceberg/storage_s3.go for why
	// the import is blank).
	_ "github.com/apache/iceberg-go/io/gocloud/s3"
	"github.com/apache/iceberg-go/table"
)

// Options configure a Server.
type Options struct {
	// Warehouse is the root of new tables' locations (file://... or
	// s3://...): <Warehouse>/<namespace>.db/<table>. REQUIRED. A client
	// that names another warehouse (?warehouse= on /v1/config) is refused.
	Warehouse string
	// IOProps are the file IO properties the server writes metadata
	// files with (s3.endpoint, s3.access-key-id, ...).
	IOProps map[string]string
	// Token, when set, is the bearer token every request but the token
	// exchange must carry; others get 401.
	Token string
	// ClientID and ClientSecret, when set, are the client credentials that
	// /v1/oauth/tokens exchanges for Token.
	ClientID, ClientSecret string
}

// Server is the catalog. Create it with New.
type Server struct {
	opts Options
	mux  *http.ServeMux

	mu         sync.Mutex
	namespaces map[string]iceberg.Properties // key: levels joined by nsSep
	tables     map[string]*tableEntry        // key: namespace key + "\x00" + name
	calls      map[string]int                // route pattern -> requests served
}

type tableEntry struct {
	meta    table.Metadata
	loc     string // current metadata file
	version int    // of the current metadata file
}

// nsSep joins namespace levels in path segments (the spec's default).
const nsSep = "\x1f"

// endpoints advertised in /v1/config; the client uses no others.
var endpoints = []string{
	"GET /v1/{prefix}/namespaces",
	"POST /v1/{prefix}/namespaces",
	"GET /v1/{prefix}/namespaces/{namespace}",
	"HEAD /v1/{prefix}/namespaces/{namespace}",
	"DELETE /v1/{prefix}/namespaces/{namespace}",
	"GET /v1/{prefix}/namespaces/{namespace}/tables",
	"POST /v1/{prefix}/namespaces/{namespace}/tables",
	"GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
	"DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
}

// New returns a catalog server with no namespaces.
func New(opts Options) *Server {
	s := &Server{
		opts:       opts,
		mux:        http.NewServeMux(),
		namespaces: map[string]iceberg.Properties{},
		tables:     map[string]*tableEntry{},
		calls:      map[string]int{},
	}
	s.mux.HandleFunc("GET /v1/config", s.config)
	s.mux.HandleFunc("POST /v1/oauth/tokens", s.token)
	s.mux.HandleFunc("GET /v1/namespaces", s.listNamespaces)
	s.mux.HandleFunc("POST /v1/namespaces", s.createNamespace)
	s.mux.HandleFunc("GET /v1/namespaces/{ns}", s.loadNamespace)
	s.mux.HandleFunc("DELETE /v1/namespaces/{ns}", s.dropNamespace)
	s.mux.HandleFunc("GET /v1/namespaces/{ns}/tables", s.listTables)
	s.mux.HandleFunc("POST /v1/namespaces/{ns}/tables", s.createTable)
	s.mux.HandleFunc("GET /v1/namespaces/{ns}/tables/{table}", s.loadTable)
	s.mux.HandleFunc("POST /v1/namespaces/{ns}/tables/{table}", s.commitTable)
	s.mux.HandleFunc("DELETE /v1/namespaces/{ns}/tables/{table}", s.dropTable)
	return s
}

// ServeHTTP checks the bearer token (when one is configured) and routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Token != "" && r.URL.Path != "/v1/oauth/tokens" && r.Header.Get("Authorization") != "Bearer "+s.opts.Token {
		writeError(w, http.StatusUnauthorized, "NotAuthorizedException", "missing or invalid bearer token")
		return
	}
	_, pattern := s.mux.Handler(r)
	s.mu.Lock()
	s.calls[pattern]++
	s.mu.Unlock()
	s.mux.ServeHTTP(w, r)
}

// Calls returns how many requests each route pattern (as registered, e.g.
// "POST /v1/namespaces/{ns}/tables/{table}") has served.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	if wh := r.URL.Query().Get("warehouse"); wh != "" && wh != s.opts.Warehouse {
		writeError(w, http.StatusBadRequest, "BadRequestException", fmt.Sprintf("unknown warehouse %q", wh))
		return
	}
	writeJSON(w, map[string]any{
		"defaults":  map[string]string{},
		"overrides": map[string]string{},
		"endpoints": endpoints,
	})
}

// token implements the client-credentials grant of /v1/oauth/tokens.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeOAuthError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	switch {
	case r.PostForm.Get("grant_type") != "client_credentials":
		writeOAuthError(w, http.StatusBadRequest, "unsupported_grant_type", "only client_credentials is supported")
	case s.opts.ClientID == "" || r.PostForm.Get("client_id") != s.opts.ClientID || r.PostForm.Get("client_secret") != s.opts.ClientSecret:
		writeOAuthError(w, http.StatusUnauthorized, "invalid_client", "unknown client or wrong secret")
	default:
		writeJSON(w, map[string]any{
			"access_token":      s.opts.Token,
			"token_type":        "bearer",
			"expires_in":        3600,
			"issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
		})
	}
}

func (s *Server) listNamespaces(w http.ResponseWriter, r *http.Request) {
	var parent []string
	if p := r.URL.Query().Get("parent"); p != "" {
		parent = strings.Split(p, nsSep)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := [][]string{}
	for key := range s.namespaces {
		ns := strings.Split(key, nsSep)
		if len(ns) == len(parent)+1 && slices.Equal(ns[:len(parent)], parent) {
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return strings.Compare(strings.Join(a, nsSep), strings.Join(b, nsSep)) })
	writeJSON(w, map[string]any{"namespaces": out})
}

func (s *Server) createNamespace(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Namespace  []string           `json:"namespace"`
		Properties iceberg.Properties `json:"properties"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if len(req.Namespace) == 0 || slices.Contains(req.Namespace, "") {
		writeError(w, http.StatusBadRequest, "BadRequestException", "namespace must have non-empty levels")
		return
	}
	key := strings.Join(req.Namespace, nsSep)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[key]; ok {
		writeError(w, http.StatusConflict, "AlreadyExistsException", fmt.Sprintf("namespace %s already exists", strings.Join(req.Namespace, ".")))
		return
	}
	if req.Properties == nil {
		req.Properties = iceberg.Properties{}
	}
	s.namespaces[key] = req.Properties
	writeJSON(w, map[string]any{"namespace": req.Namespace, "properties": req.Properties})
}

func (s *Server) loadNamespace(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns")
	s.mu.Lock()
	defer s.mu.Unlock()
	props, ok := s.namespaces[key]
	if !ok {
		noSuchNamespace(w, key)
		return
	}
	writeJSON(w, map[string]any{"namespace": strings.Split(key, nsSep), "properties": props})
}

func (s *Server) dropNamespace(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[key]; !ok {
		noSuchNamespace(w, key)
		return
	}
	for tk := range s.tables {
		if strings.HasPrefix(tk, key+"\x00") {
			writeError(w, http.StatusConflict, "NamespaceNotEmptyException", fmt.Sprintf("namespace %s is not empty", displayNS(key)))
			return
		}
	}
	delete(s.namespaces, key)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listTables(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("ns")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[key]; !ok {
		noSuchNamespace(w, key)
		return
	}
	type ident struct {
		Namespace []string `json:"namespace"`
		Name      string   `json:"name"`
	}
	out := []ident{}
	for tk := range s.tables {
		if name, ok := strings.CutPrefix(tk, key+"\x00"); ok {
			out = append(out, ident{strings.Split(key, nsSep), name})
		}
	}
	slices.SortFunc(out, func(a, b ident) int { return strings.Compare(a.Name, b.Name) })
	writeJSON(w, map[string]any{"identifiers": out})
}

func (s *Server) loadTable(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.tables[tableKey(r)]
	if !ok {
		noSuchTable(w, r)
		return
	}
	writeJSON(w, loadResult(e.loc, e.meta))
}

func (s *Server) dropTable(w http.ResponseWriter, r *http.Request) {
	key := tableKey(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tables[key]; !ok {
		noSuchTable(w, r)
		return
	}
	delete(s.tables, key)
	w.WriteHeader(http.StatusNoContent)
}

// createTable binds the request's schema, spec and order through
// table.NewMetadata (fresh field ids, as the spec asks of a catalog) and
// writes metadata version 0, or for a staged create returns the metadata
// without registering the table (the client then commits it with
// assert-create).
func (s *Server) createTable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name          string                        `json:"name"`
		Schema        *iceberg.Schema               `json:"schema"`
		Location      string                        `json:"location"`
		PartitionSpec *iceberg.UnboundPartitionSpec `json:"partition-spec"`
		WriteOrder    *table.UnboundSortOrder       `json:"write-order"`
		StageCreate   bool                          `json:"stage-create"`
		Properties    iceberg.Properties            `json:"properties"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	if req.Name == "" || req.Schema == nil {
		writeError(w, http.StatusBadRequest, "BadRequestException", "a table needs a name and a schema")
		return
	}
	nsKey := r.PathValue("ns")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.namespaces[nsKey]; !ok {
		noSuchNamespace(w, nsKey)
		return
	}
	key := nsKey + "\x00" + req.Name
	if _, ok := s.tables[key]; ok {
		writeError(w, http.StatusConflict, "AlreadyExistsException", fmt.Sprintf("table %s.%s already exists", displayNS(nsKey), req.Name))
		return
	}
	spec := iceberg.UnpartitionedSpec
	if req.PartitionSpec != nil {
		spec = &req.PartitionSpec.PartitionSpec
	}
	order := table.UnsortedSortOrder
	if req.WriteOrder != nil {
		order = req.WriteOrder.SortOrder
	}
	loc := strings.TrimSuffix(req.Location, "/")
	if loc == "" {
		var err error
		if loc, err = url.JoinPath(s.opts.Warehouse, strings.ReplaceAll(nsKey, nsSep, ".")+".db", req.Name); err != nil {
			writeError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
			return
		}
	}
	meta, err := table.NewMetadata(req.Schema, spec, order, loc, req.Properties)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestException", err.Error())
		return
	}
	if req.StageCreate {
		writeJSON(w, loadResult("", meta))
		return
	}
	e := &tableEntry{meta: meta}
	if e.loc, err = s.writeMetadata(r, meta, 0); err != nil {
		writeError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	s.tables[key] = e
	writeJSON(w, loadResult(e.loc, meta))
}

// commitTable applies one table commit atomically.
func (s *Server) commitTable(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Requirements table.Requirements `json:"requirements"`
		Updates      table.Updates      `json:"updates"`
	}
	if !readJSON(w, r, &req) {
		return
	}
	key := tableKey(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, exists := s.tables[key]
	var (
		current, base table.Metadata
		curLoc        string
		version       int
	)
	switch {
	case exists:
		current, base, curLoc, version = cur.meta, cur.meta, cur.loc, cur.version+1
	case slices.ContainsFunc(req.Requirements, func(q table.Requirement) bool { return q.GetType() == "assert-create" }):
		if _, ok := s.namespaces[r.PathValue("ns")]; !ok {
			noSuchNamespace(w, r.PathValue("ns"))
			return
		}
		var err error
		if base, err = table.NewMetadata(iceberg.NewSchema(0), nil, table.UnsortedSortOrder, "", nil); err != nil {
			writeError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
			return
		}
	default:
		noSuchTable(w, r)
		return
	}
	for _, q := range req.Requirements {
		if err := q.Validate(current); err != nil {
			writeError(w, http.StatusConflict, "CommitFailedException", fmt.Sprintf("requirement failed: %v", err))
			return
		}
	}
	updated, err := table.UpdateTableMetadata(base, req.Updates, curLoc)
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestException", fmt.Sprintf("cannot apply updates: %v", err))
		return
	}
	loc, err := s.writeMetadata(r, updated, version)
	if err != nil {
		// Nothing was committed: the pointer has not moved.
		writeError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	s.tables[key] = &tableEntry{meta: updated, loc: loc, version: version}
	writeJSON(w, map[string]any{"metadata-location": loc, "metadata": updated})
}

// writeMetadata writes meta as metadata file number version of its table
// and returns its location.
func (s *Server) writeMetadata(r *http.Request, meta table.Metadata, version int) (string, error) {
	lp, err := table.LoadLocationProvider(meta.Location(), meta.Properties())
	if err != nil {
		return "", err
	}
	loc, err := lp.NewTableMetadataFileLocation(version)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(meta)
	if err != nil {
		return "", err
	}
	switch codec := meta.Properties().Get(table.MetadataCompressionKey, table.MetadataCompressionDefault); codec {
	case table.MetadataCompressionCodecNone:
	case table.MetadataCompressionCodecGzip:
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		if _, err := zw.Write(data); err != nil {
			return "", err
		}
		if err := zw.Close(); err != nil {
			return "", err
		}
		data = b.Bytes()
	default:
		return "", fmt.Errorf("metadata compression %q is not supported by this test catalog", codec)
	}
	fsys, err := icebergio.LoadFS(r.Context(), s.opts.IOProps, loc)
	if err != nil {
		return "", err
	}
	wfs, ok := fsys.(icebergio.WriteFileIO)
	if !ok {
		return "", errors.New("the warehouse's file IO cannot write")
	}
	if err := wfs.WriteFile(loc, data); err != nil {
		return "", fmt.Errorf("write %s: %w", loc, err)
	}
	return loc, nil
}

func loadResult(loc string, meta table.Metadata) map[string]any {
	out := map[string]any{"metadata": meta, "config": map[string]string{}}
	if loc != "" {
		out["metadata-location"] = loc
	}
	return out
}

func tableKey(r *http.Request) string { return r.PathValue("ns") + "\x00" + r.PathValue("table") }

func displayNS(key string) string { return strings.ReplaceAll(key, nsSep, ".") }

func noSuchNamespace(w http.ResponseWriter, key string) {
	writeError(w, http.StatusNotFound, "NoSuchNamespaceException", fmt.Sprintf("namespace %s does not exist", displayNS(key)))
}

func noSuchTable(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "NoSuchTableException", fmt.Sprintf("table %s.%s does not exist", displayNS(r.PathValue("ns")), r.PathValue("table")))
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestException", fmt.Sprintf("malformed request: %v", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "ServiceFailureException", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(data)
}

// writeError writes the spec's ErrorModel.
func writeError(w http.ResponseWriter, code int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}

// writeOAuthError writes an OAuth2 error response (RFC 6749 section 5.2).
func writeOAuthError(w http.ResponseWriter, code int, errCode, desc string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": errCode, "error_description": desc})
}
