package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The registry's HTTP API: the subset of Confluent Schema Registry's REST
// API that Kafka tools and clients use, with Confluent's JSON bodies,
// content type and error codes, plus two cdcd routes for the operator's
// "accept the new version".
//
//	GET    /subjects[?subjectPrefix=P]                   ["a-value", ...]
//	GET    /subjects/{s}/versions                        [1, 2]
//	GET    /subjects/{s}/versions/{v|latest}             {"subject","version","id","schema"}
//	GET    /subjects/{s}/versions/{v|latest}/schema      the schema text itself
//	GET    /subjects/{s}/versions/{v|latest}/referencedby  []       (no references here)
//	POST   /subjects/{s}/versions     {"schema": TEXT}   {"id": N}          (409 if incompatible)
//	POST   /subjects/{s}              {"schema": TEXT}   {"subject","version","id","schema"}
//	DELETE /subjects/{s}[?permanent=true]                [1, 2]     (soft delete; permanent: after one)
//	DELETE /subjects/{s}/versions/{v|latest}[?permanent=true]  2    (likewise)
//	POST   /compatibility/subjects/{s}/versions/{v|latest}  {"schema"}  {"is_compatible": bool, "messages": [...]}
//	POST   /compatibility/subjects/{s}/versions              ... against what the level selects
//	GET    /schemas[?subjectPrefix=P&latestOnly=true&offset=N&limit=N]  [{"subject","version","id","schema"}]
//	GET    /schemas/ids/{id}                             {"schema": TEXT}
//	GET    /schemas/ids/{id}/schema                      the schema text itself
//	GET    /schemas/ids/{id}/versions                    [{"subject","version"}]
//	GET    /schemas/ids/{id}/subjects                    ["a-value"]
//	GET    /schemas/types                                ["AVRO"]
//	GET    /config                                       {"compatibilityLevel": "BACKWARD"}
//	PUT    /config                    {"compatibility": L}  {"compatibility": L}
//	DELETE /config                                       {"compatibilityLevel": L}  (back to BACKWARD)
//	GET    /config/{s}[?defaultToGlobal=true]            {"compatibilityLevel": L}   (40408 if unset)
//	PUT    /config/{s}                {"compatibility": L}  {"compatibility": L}
//	DELETE /config/{s}                                   {"compatibilityLevel": L}   (the level removed)
//	GET    /cdcd/rejected                                [{"subject","schema","level","version","messages"}]
//	POST   /cdcd/subjects/{s}/accept                     {"subject","version","id","schema"}
//
// Listings and lookups (GET /subjects, …/versions, …/versions/{v},
// /schemas, /schemas/ids/{id}/versions and …/subjects, POST
// /subjects/{s}) take deleted=true to include soft-deleted versions and
// subjects; GET /subjects and …/versions take deletedOnly=true too.
//
// Errors are {"error_code": N, "message": TEXT} with HTTP status N's first
// three digits: 40401 subject not found, 40402 version not found, 40403
// schema not found, 40404 subject soft-deleted already, 40405 subject not
// soft-deleted before a permanent delete, 40406 version soft-deleted
// already, 40407 version not soft-deleted before a permanent delete, 40408
// subject compatibility not configured, 409 incompatible schema, 42201
// invalid schema, 42202 invalid version, 42203 invalid compatibility
// level, 42205 operation not permitted (a delete of a subject the running
// pipeline writes), 50001 store error.

// apiContentType is the content type of every response body (Confluent's).
const apiContentType = "application/vnd.schemaregistry.v1+json"

// maxRequestBody bounds a request body (a schema and its JSON wrapping).
const maxRequestBody = 8 << 20

// Confluent's error codes.
const (
	codeSubjectNotFound   = 40401
	codeVersionNotFound   = 40402
	codeSchemaNotFound    = 40403
	codeSubjectDeleted    = 40404
	codeSubjectNotDeleted = 40405
	codeVersionDeleted    = 40406
	codeVersionNotDeleted = 40407
	codeNotConfigured     = 40408
	codeIncompatible      = 409
	codeInvalidSchema     = 42201
	codeInvalidVersion    = 42202
	codeInvalidCompat     = 42203
	codeNotPermitted      = 42205
	codeStoreError        = 50001
	codeNotFound          = 404
	codeBadRequest        = 400
	codeMethodNotAllowed  = 405
	codeUnsupportedFormat = 415
)

type apiError struct {
	Code    int    `json:"error_code"`
	Message string `json:"message"`
}

// apiHandler serves the API over a Registry.
type apiHandler struct {
	reg *Registry
	mux *http.ServeMux
}

// NewHandler returns the registry's HTTP API (routes above). Mount it at
// the root of a server: it owns /subjects, /schemas, /config,
// /compatibility and /cdcd, and answers any other path with a Confluent
// style 404, so it also serves as a ServeMux's "/" fallback.
func NewHandler(reg *Registry) http.Handler {
	h := &apiHandler{reg: reg, mux: http.NewServeMux()}
	m := h.mux
	m.HandleFunc("GET /subjects", h.subjects)
	m.HandleFunc("GET /subjects/{subject}/versions", h.versions)
	m.HandleFunc("POST /subjects/{subject}/versions", h.register)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}", h.version)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}/schema", h.versionSchema)
	m.HandleFunc("GET /subjects/{subject}/versions/{version}/referencedby", h.referencedBy)
	m.HandleFunc("DELETE /subjects/{subject}/versions/{version}", h.deleteVersion)
	m.HandleFunc("POST /subjects/{subject}", h.lookup)
	m.HandleFunc("DELETE /subjects/{subject}", h.deleteSubject)
	m.HandleFunc("POST /compatibility/subjects/{subject}/versions/{version}", h.compatibility)
	m.HandleFunc("POST /compatibility/subjects/{subject}/versions", h.compatibility)
	m.HandleFunc("GET /schemas", h.schemas)
	m.HandleFunc("GET /schemas/ids/{id}", h.schemaByID)
	m.HandleFunc("GET /schemas/ids/{id}/schema", h.schemaTextByID)
	m.HandleFunc("GET /schemas/ids/{id}/versions", h.usages)
	m.HandleFunc("GET /schemas/ids/{id}/subjects", h.usageSubjects)
	m.HandleFunc("GET /schemas/types", func(w http.ResponseWriter, _ *http.Request) { respond(w, []string{"AVRO"}) })
	m.HandleFunc("GET /config", h.getConfig)
	m.HandleFunc("PUT /config", h.putConfig)
	m.HandleFunc("DELETE /config", h.deleteConfig)
	m.HandleFunc("GET /config/{subject}", h.getConfig)
	m.HandleFunc("PUT /config/{subject}", h.putConfig)
	m.HandleFunc("DELETE /config/{subject}", h.deleteConfig)
	// The mode is always READWRITE: cdcd's registry is written by its
	// pipeline and has no import or read-only mode to switch to.
	readWrite := func(w http.ResponseWriter, _ *http.Request) { respond(w, map[string]string{"mode": "READWRITE"}) }
	m.HandleFunc("GET /mode", readWrite)
	m.HandleFunc("GET /mode/{subject}", readWrite)
	m.HandleFunc("GET /cdcd/rejected", h.rejected)
	m.HandleFunc("POST /cdcd/subjects/{subject}/accept", h.accept)
	return h
}

func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := h.mux.Handler(r); pattern == "" {
		if allowed := h.allowed(r); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			respondError(w, codeMethodNotAllowed, "HTTP 405 Method Not Allowed")
			return
		}
		respondError(w, codeNotFound, "HTTP 404 Not Found")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// allowed returns the methods the API serves at r's path.
func (h *apiHandler) allowed(r *http.Request) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete} {
		alt := r.Clone(r.Context())
		alt.Method = m
		if _, pattern := h.mux.Handler(alt); pattern != "" {
			out = append(out, m)
		}
	}
	return out
}

func respond(w http.ResponseWriter, v any) { respondStatus(w, http.StatusOK, v) }

func respondStatus(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error_code":50001,"message":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", apiContentType)
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func respondError(w http.ResponseWriter, code int, format string, args ...any) {
	status := code
	for status >= 1000 {
		status /= 10
	}
	respondStatus(w, status, apiError{Code: code, Message: fmt.Sprintf(format, args...)})
}

// writeRegistryError maps the registry's errors to Confluent's codes.
func respondRegistryError(w http.ResponseWriter, err error) {
	var ierr *IncompatibleError
	var perr *ProtectedError
	switch {
	case errors.As(err, &perr):
		respondError(w, codeNotPermitted, "Operation not permitted: %v", perr)
	case errors.Is(err, ErrSubjectSoftDeleted):
		respondError(w, codeSubjectDeleted, "Subject was soft deleted. Set permanent=true to delete permanently. %v", err)
	case errors.Is(err, ErrSubjectNotSoftDeleted):
		respondError(w, codeSubjectNotDeleted, "Subject was not deleted first before being permanently deleted. %v", err)
	case errors.Is(err, ErrVersionSoftDeleted):
		respondError(w, codeVersionDeleted, "Version was soft deleted. Set permanent=true to delete permanently. %v", err)
	case errors.Is(err, ErrVersionNotSoftDeleted):
		respondError(w, codeVersionNotDeleted, "Version was not deleted first before being permanently deleted. %v", err)
	case errors.As(err, &ierr):
		respondError(w, codeIncompatible, "Schema being registered is incompatible with an earlier schema for subject %q, details: [%s]",
			ierr.Subject, strings.Join(ierr.Messages(), ", "))
	case errors.Is(err, ErrUnknownSubject):
		respondError(w, codeSubjectNotFound, "Subject not found. %v", err)
	case errors.Is(err, ErrUnknownVersion):
		respondError(w, codeVersionNotFound, "Version not found. %v", err)
	case errors.Is(err, ErrUnknownSchema), errors.Is(err, ErrNothingRejected):
		respondError(w, codeSchemaNotFound, "Schema not found. %v", err)
	case errors.Is(err, ErrInvalidSchema):
		respondError(w, codeInvalidSchema, "Invalid schema: %v", err)
	case errors.Is(err, ErrNotConfigured):
		respondError(w, codeNotConfigured, "Subject does not have subject-level compatibility configured. %v", err)
	case errors.Is(err, ErrInvalidCompatibility):
		respondError(w, codeInvalidCompat, "Invalid compatibility level. Valid values are none, backward, forward, full, backward_transitive, forward_transitive, and full_transitive")
	default:
		respondError(w, codeStoreError, "Error in the backend data store: %v", err)
	}
}

// readBody decodes a JSON request body into v; false if it wrote an error.
func readBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !acceptedContentType(ct) {
		respondError(w, codeUnsupportedFormat, "HTTP 415 Unsupported Media Type: %s", ct)
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		respondError(w, codeBadRequest, "reading the request body: %v", err)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		respondError(w, codeBadRequest, "the request body is not the expected JSON: %v", err)
		return false
	}
	return true
}

func acceptedContentType(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	switch strings.TrimSpace(strings.ToLower(ct)) {
	case apiContentType, "application/vnd.schemaregistry+json", "application/json", "application/octet-stream":
		return true
	}
	return false
}

// schemaRequest is the body of register, lookup and compatibility calls.
type schemaRequest struct {
	Schema     string            `json:"schema"`
	SchemaType string            `json:"schemaType"`
	References []json.RawMessage `json:"references"`
}

// readSchema reads and checks a schemaRequest; false if it wrote an error.
func readSchema(w http.ResponseWriter, r *http.Request) (string, bool) {
	var req schemaRequest
	if !readBody(w, r, &req) {
		return "", false
	}
	switch {
	case req.SchemaType != "" && !strings.EqualFold(req.SchemaType, "AVRO"):
		respondError(w, codeInvalidSchema, "Invalid schema: schema type %s is not supported; this registry holds Avro only", req.SchemaType)
		return "", false
	case len(req.References) > 0:
		respondError(w, codeInvalidSchema, "Invalid schema: schema references are not supported")
		return "", false
	case strings.TrimSpace(req.Schema) == "":
		respondError(w, codeInvalidSchema, "Invalid schema: empty schema")
		return "", false
	}
	return req.Schema, true
}

// parseVersion reads {version}: a positive number, "latest" or -1.
func parseVersion(w http.ResponseWriter, r *http.Request) (int, bool) {
	s := r.PathValue("version")
	if s == "latest" {
		return LatestVersion, true
	}
	v, err := strconv.Atoi(s)
	if err != nil || v == 0 || v < LatestVersion {
		respondError(w, codeInvalidVersion, "The specified version '%s' is not a valid version id. Allowed values are between [1, 2^31-1] and the string \"latest\"", s)
		return 0, false
	}
	return v, true
}

func parseID(w http.ResponseWriter, r *http.Request) (uint32, bool) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
	if err != nil {
		respondError(w, codeSchemaNotFound, "Schema %s not found", r.PathValue("id"))
		return 0, false
	}
	return uint32(id), true
}

func (h *apiHandler) subjects(w http.ResponseWriter, r *http.Request) {
	respond(w, nonNil(h.reg.SubjectsMatching(r.URL.Query().Get("subjectPrefix"), showOf(r))))
}

// showOf reads the deleted and deletedOnly query parameters (deletedOnly
// wins when both are set, as in Confluent's registry).
func showOf(r *http.Request) Show {
	q := r.URL.Query()
	switch {
	case q.Get("deletedOnly") == "true":
		return ShowDeleted
	case q.Get("deleted") == "true":
		return ShowAll
	}
	return ShowLive
}

// schemas serves GET /schemas: every subject version, optionally by
// subject prefix, newest only, and paged by offset and limit.
func (h *apiHandler) schemas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	show := ShowLive
	if q.Get("deleted") == "true" {
		show = ShowAll
	}
	all := h.reg.Schemas(q.Get("subjectPrefix"), show, q.Get("latestOnly") == "true")
	offset, _ := strconv.Atoi(q.Get("offset"))
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit <= 0 {
		limit = len(all)
	}
	all = all[min(max(offset, 0), len(all)):]
	respond(w, nonNil(all[:min(limit, len(all))]))
}

// referencedBy serves …/referencedby: the ids of schemas that reference
// the version. This registry takes no references, so none do.
func (h *apiHandler) referencedBy(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.lookupVersion(w, r); ok {
		respond(w, []uint32{})
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (h *apiHandler) versions(w http.ResponseWriter, r *http.Request) {
	vs, err := h.reg.VersionsMatching(r.PathValue("subject"), showOf(r))
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	nums := make([]int, len(vs))
	for i, v := range vs {
		nums[i] = v.Version
	}
	respond(w, nums)
}

func (h *apiHandler) version(w http.ResponseWriter, r *http.Request) {
	if sv, ok := h.lookupVersion(w, r); ok {
		respond(w, sv)
	}
}

func (h *apiHandler) versionSchema(w http.ResponseWriter, r *http.Request) {
	if sv, ok := h.lookupVersion(w, r); ok {
		respondRaw(w, sv.Schema)
	}
}

func respondRaw(w http.ResponseWriter, schema string) {
	w.Header().Set("Content-Type", apiContentType)
	_, _ = io.WriteString(w, schema)
}

func (h *apiHandler) lookupVersion(w http.ResponseWriter, r *http.Request) (SubjectVersion, bool) {
	ver, ok := parseVersion(w, r)
	if !ok {
		return SubjectVersion{}, false
	}
	sv, err := h.reg.VersionMatching(r.PathValue("subject"), ver, deletedToo(r))
	if err != nil {
		respondRegistryError(w, err)
		return SubjectVersion{}, false
	}
	return sv, true
}

func (h *apiHandler) register(w http.ResponseWriter, r *http.Request) {
	schema, ok := readSchema(w, r)
	if !ok {
		return
	}
	id, err := h.reg.Register(r.Context(), r.PathValue("subject"), schema)
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, struct {
		ID uint32 `json:"id"`
	}{id})
}

func (h *apiHandler) lookup(w http.ResponseWriter, r *http.Request) {
	schema, ok := readSchema(w, r)
	if !ok {
		return
	}
	sv, err := h.reg.LookupMatching(r.PathValue("subject"), schema, deletedToo(r))
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, sv)
}

// deletedToo is ShowAll when the request says deleted=true.
func deletedToo(r *http.Request) Show {
	if r.URL.Query().Get("deleted") == "true" {
		return ShowAll
	}
	return ShowLive
}

func (h *apiHandler) deleteSubject(w http.ResponseWriter, r *http.Request) {
	del := h.reg.DeleteSubject
	if r.URL.Query().Get("permanent") == "true" {
		del = h.reg.PurgeSubject
	}
	vs, err := del(r.Context(), r.PathValue("subject"))
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, vs)
}

func (h *apiHandler) deleteVersion(w http.ResponseWriter, r *http.Request) {
	ver, ok := parseVersion(w, r)
	if !ok {
		return
	}
	del := h.reg.DeleteVersion
	if r.URL.Query().Get("permanent") == "true" {
		del = h.reg.PurgeVersion
	}
	v, err := del(r.Context(), r.PathValue("subject"), ver)
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, v)
}

// compatResult is Confluent's compatibility check response.
type compatResult struct {
	IsCompatible bool     `json:"is_compatible"`
	Messages     []string `json:"messages,omitempty"`
}

func (h *apiHandler) compatibility(w http.ResponseWriter, r *http.Request) {
	ver := 0 // no {version}: what the level selects
	if r.PathValue("version") != "" {
		var ok bool
		if ver, ok = parseVersion(w, r); !ok {
			return
		}
	}
	schema, ok := readSchema(w, r)
	if !ok {
		return
	}
	err := h.reg.TestCompatibility(r.PathValue("subject"), schema, ver)
	var ierr *IncompatibleError
	switch {
	case err == nil:
		respond(w, compatResult{IsCompatible: true})
	case errors.As(err, &ierr):
		respond(w, compatResult{Messages: ierr.Messages()})
	default:
		respondRegistryError(w, err)
	}
}

func (h *apiHandler) schemaByID(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	s, err := h.reg.SchemaByID(id)
	if err != nil {
		respondError(w, codeSchemaNotFound, "Schema %d not found", id)
		return
	}
	respond(w, struct {
		Schema string `json:"schema"`
	}{s})
}

func (h *apiHandler) schemaTextByID(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	s, err := h.reg.SchemaByID(id)
	if err != nil {
		respondError(w, codeSchemaNotFound, "Schema %d not found", id)
		return
	}
	respondRaw(w, s)
}

func (h *apiHandler) usages(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	us, err := h.reg.UsagesMatching(id, deletedToo(r))
	if err != nil {
		respondError(w, codeSchemaNotFound, "Schema %d not found", id)
		return
	}
	type subjectVersion struct {
		Subject string `json:"subject"`
		Version int    `json:"version"`
	}
	out := make([]subjectVersion, len(us))
	for i, u := range us {
		out[i] = subjectVersion{u.Subject, u.Version}
	}
	respond(w, out)
}

func (h *apiHandler) usageSubjects(w http.ResponseWriter, r *http.Request) {
	id, ok := parseID(w, r)
	if !ok {
		return
	}
	us, err := h.reg.UsagesMatching(id, deletedToo(r))
	if err != nil {
		respondError(w, codeSchemaNotFound, "Schema %d not found", id)
		return
	}
	out := []string{}
	for _, u := range us {
		if len(out) == 0 || out[len(out)-1] != u.Subject {
			out = append(out, u.Subject)
		}
	}
	respond(w, out)
}

type configGet struct {
	CompatibilityLevel string `json:"compatibilityLevel"`
}

type configPut struct {
	Compatibility string `json:"compatibility"`
}

func (h *apiHandler) getConfig(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	level, own := h.reg.Compatibility(subject)
	if !own && r.URL.Query().Get("defaultToGlobal") != "true" {
		respondRegistryError(w, fmt.Errorf("%w: %s", ErrNotConfigured, subject))
		return
	}
	respond(w, configGet{level.String()})
}

func (h *apiHandler) putConfig(w http.ResponseWriter, r *http.Request) {
	var req configPut
	if !readBody(w, r, &req) {
		return
	}
	level, err := ParseCompatibility(req.Compatibility)
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	if err := h.reg.SetCompatibility(r.Context(), r.PathValue("subject"), level); err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, configPut{level.String()})
}

func (h *apiHandler) deleteConfig(w http.ResponseWriter, r *http.Request) {
	prev, err := h.reg.ResetCompatibility(r.Context(), r.PathValue("subject"))
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	// Confluent answers its Config ("compatibilityLevel"); some clients
	// (franz-go's sr) read "compatibility": both are given.
	respond(w, struct {
		configGet
		configPut
	}{configGet{prev.String()}, configPut{prev.String()}})
}

// RejectedSchema is one element of GET /cdcd/rejected: the last schema a
// subject refused, and why.
type RejectedSchema struct {
	Subject string `json:"subject"`
	Schema  string `json:"schema"`
	Level   string `json:"level"`
	// Version is the registered version it conflicts with.
	Version  int      `json:"version"`
	Messages []string `json:"messages"`
}

func (h *apiHandler) rejected(w http.ResponseWriter, _ *http.Request) {
	out := []RejectedSchema{}
	for _, s := range h.reg.RejectedSubjects() {
		schema, ierr, ok := h.reg.Rejected(s)
		if !ok {
			continue
		}
		out = append(out, RejectedSchema{Subject: s, Schema: schema, Level: ierr.Level.String(),
			Version: ierr.Version, Messages: ierr.Messages()})
	}
	respond(w, out)
}

func (h *apiHandler) accept(w http.ResponseWriter, r *http.Request) {
	sv, err := h.reg.Accept(r.Context(), r.PathValue("subject"))
	if err != nil {
		respondRegistryError(w, err)
		return
	}
	respond(w, sv)
}
