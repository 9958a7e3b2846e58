package routerd

import (
	"context"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
)

// BenchmarkHooksPerAttempt is what the request path calls on the mesh
// hooks for each target of each attempt (router's EngineView.Load,
// PrefillView.PeerPrefill and, through PreferLoad, EngineReporter.Reported):
// the router's contract is no lock, no allocation.
//
//	go test -run '^$' -bench HooksPerAttempt ./routerd/
func BenchmarkHooksPerAttempt(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: 1, Seed: 5})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	m := newMeshHooks(h.Routers[0], time.Now)
	bases := []string{"http://engine-1:8000/v1", "http://engine-2:8000/v1", "http://engine-3:8000/v1", "http://engine-4:8000/v1"}
	m.Sources(bases)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			base := bases[i%len(bases)]
			m.Load(base)
			m.PeerPrefill(base)
			m.Reported(base)
			i++
		}
	})
}
