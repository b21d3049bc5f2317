package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminServer serves, on admin.listen, behind the guard (auth.go):
//
//	GET /metrics  Prometheus metrics (metrics.go)
//	GET /healthz  200 while the process runs
//	GET /readyz   200 while the source streams or loads; 503 before, and
//	              once a stop began
//	GET /status   the Status JSON that `cdcd status` renders
//	/             the Confluent-compatible schema registry API
type adminServer struct {
	d   *Daemon
	ln  net.Listener
	srv *http.Server
}

// adminShutdown bounds the admin listener's own shutdown.
const adminShutdown = 2 * time.Second

func (d *Daemon) adminServer(addr string) (*adminServer, error) {
	cfg := d.cfg.Admin
	handler, err := newGuard(cfg, d.adminHandler(), d.logger.With("component", "admin"))
	if err != nil {
		return nil, fmt.Errorf("daemon: admin listener: %w", err)
	}
	tlsCfg, err := cfg.ServerTLS()
	if err != nil {
		return nil, fmt.Errorf("daemon: admin listener: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("daemon: admin listener on %s: %w (set admin.listen to a free host:port, or \"off\")", addr, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	a := &adminServer{d: d, ln: ln, srv: &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}}
	d.logger.Info("admin listening", "addr", ln.Addr().String(), "tls", tlsCfg != nil, "auth", cfg.Auth != nil)
	for _, w := range d.cfg.Warnings() {
		d.logger.Warn("INSECURE: "+w.Msg, "key", w.Path)
	}
	return a, nil
}

// Registry returns a Prometheus registry with the daemon's metrics (and
// the Go runtime's and the process's).
func (d *Daemon) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &collector{d: d})
	reg.MustRegister(d.sampler.collectors()...)
	reg.MustRegister(snapshotCollector{d}, outboxCollector{d}, reconcileCollector{d}, loadCollector{d})
	return reg
}

func (d *Daemon) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.Registry(), promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		state := d.lifecycleState()
		if !ready(state) {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, state)
	})
	d.maintenanceRoutes(mux)
	d.tableRoutes(mux)
	d.snapshotRoutes(mux)
	d.reconcileRoutes(mux)
	secrets := newScrubber(d.cfg.Secrets())
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		b, err := json.MarshalIndent(d.Status(), "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, secrets.scrub(string(b))+"\n")
	})
	// Everything else is the Confluent-compatible schema registry API.
	mux.Handle("/", d.regAPI)
	return mux
}

func (a *adminServer) serve(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- a.srv.Serve(a.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("daemon: admin server: %w", err)
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminShutdown)
		defer cancel()
		if err := a.srv.Shutdown(sctx); err != nil {
			_ = a.srv.Close()
		}
		if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
