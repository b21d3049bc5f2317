package demo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
)

// The demo's admin listener: on a free loopback port, with a token for
// writes (reads need none on loopback), so `cdcd status`, /metrics and the
// registry API can be tried on the running demo.
type admin struct {
	addr, token string
}

// newAdmin picks a free loopback port and a token.
func newAdmin() (admin, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return admin{}, fmt.Errorf("demo: no free port for the admin listener: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return admin{}, err
	}
	return admin{addr: addr, token: hex.EncodeToString(b)}, nil
}

// block is the config's admin block.
func (a admin) block() string {
	return fmt.Sprintf(`admin:
  listen: %q      # /status, /metrics, the schema registry API
  auth: {token: %q}   # writes (cdcd compact, snapshot, registry changes) need it
`, a.addr, a.token)
}

// print tells how to try the listener.
func (a admin) print(out io.Writer, cfgPath, table string) {
	url := "http://" + a.addr
	fmt.Fprintf(out, `Admin listener: %s  (writes need the token %s)
  cdcd status -c %s                  tables, load progress into Iceberg, lag, alerts
  curl %s/metrics                     Prometheus metrics
  curl %s/subjects                    the schema registry (Confluent's API)
  curl -H 'Authorization: Bearer %s' -X POST %s/cdcd/compact/%s
`, url, a.token, cfgPath, url, url, a.token, url, table)
}
