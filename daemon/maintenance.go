package daemon

import (
	"encoding/json"
	"net/http"

	"github.com/cdcd-dev/cdcd/sink/iceberg"
)

// TableMaintenance is one table in GET /cdcd/maintenance.
type TableMaintenance struct {
	Table      string                     `json:"table"`
	Files      *iceberg.MaintenanceStatus `json:"files,omitempty"`
	Compaction *iceberg.CompactionStats   `json:"compaction,omitempty"`
}

// maintenanceRoutes serves the compactor's operator surface:
//
//	GET  /cdcd/maintenance        files, sizes, deletes, manifests and last runs per table
//	POST /cdcd/compact/{table}    plan a compaction of table now
func (d *Daemon) maintenanceRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /cdcd/maintenance", func(w http.ResponseWriter, _ *http.Request) {
		var out []TableMaintenance
		for _, t := range d.sink.Stats() {
			out = append(out, TableMaintenance{Table: t.Table, Files: t.Maintenance.Load(), Compaction: t.Compaction.Load()})
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(out)
	})
	mux.HandleFunc("POST /cdcd/compact/{table}", func(w http.ResponseWriter, r *http.Request) {
		if err := d.sink.Compact(r.PathValue("table")); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("compaction requested\n"))
	})
}
