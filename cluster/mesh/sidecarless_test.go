package mesh

import (
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
)

// An engine no sidecar reports on is still pinned by every router whose
// pools name it, so the other routers' in-flight to it reaches a router's
// load: what stays invisible is the engine's own queue (RELIABILITY.md,
// finding G).
func TestOtherRoutersInflightToSidecarlessEngine(t *testing.T) {
	h := newHarness(t, HarnessConfig{Routers: 2, Sidecars: 0, Seed: 9})
	a, b := h.Routers[0].View(), h.Routers[1].View()
	url := NormalizeURL("http://10.9.9.9:8000")
	a.Targets([]string{url})
	b.Targets([]string{url})
	publishInflight(h.Routers[1], map[string]uint64{url: 5})
	testwait.For(t, 5*time.Second, "router a sees router b's 5 requests", func() bool {
		q, ok := a.Load(url)
		return ok && q == 5
	})
	publishInflight(h.Routers[1], map[string]uint64{})
	testwait.For(t, 5*time.Second, "they end", func() bool { q, _ := a.Load(url); return q == 0 })
}
