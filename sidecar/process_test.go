package sidecar

import (
	"net"
	"strings"
	"testing"

	"github.com/rolter/rolter/cluster/mesh"
)

// The banner names the metrics address the sidecar listens on (the port
// it got for :0), and a metrics address another process holds fails the
// start, naming the flag, before the sidecar runs.
func TestProcessMetricsAddress(t *testing.T) {
	cfg := func(addr string) ProcessConfig {
		return ProcessConfig{Sidecar: Config{NodeID: "gpu-1", Engine: "http://127.0.0.1:1", MetricsAddr: addr},
			Gossip: mesh.Addrs{Bind: "127.0.0.1:0"}, InsecureDev: true, Models: "m"}
	}
	p, err := Open(t.Context(), cfg("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := p.metricsLn.Addr().String()
	if !strings.HasSuffix(p.Banner(), "metrics on http://"+addr) || strings.HasSuffix(addr, ":0") {
		t.Errorf("banner %q, listening on %s", p.Banner(), addr)
	}
	if _, err := Open(t.Context(), cfg(addr)); err == nil || !strings.Contains(err.Error(), "--metrics-addr: listen tcp "+addr) {
		t.Errorf("a taken --metrics-addr: %v", err)
	}
	p.close()
	if ln, err := net.Listen("tcp", addr); err != nil {
		t.Errorf("the metrics port stays taken after close: %v", err)
	} else {
		ln.Close()
	}
}
