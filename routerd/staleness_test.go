package routerd

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/router"
)

// BenchmarkPeerLoadStaleness measures how stale one router's view of
// another router's queued-prefill sum is: from the moment router a's own
// sum changes to the moment router b's PeerPrefill shows it, through
// meshstate's publish cadence and real gossip on loopback. It reports the
// p50, p99 and max over b.N changes, and the bytes and messages router a
// sent per second meanwhile (BENCHMARKS.md §3).
//
//	go test -run '^$' -bench PeerLoadStaleness -benchtime 300x ./routerd/
func BenchmarkPeerLoadStaleness(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: 2, Seed: 11})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	const base = "http://engine-1:8000/v1"
	ra := newMeshHooks(h.Routers[0], time.Now)
	rb := newMeshHooks(h.Routers[1], time.Now)
	ra.Sources([]string{base})
	rb.Sources([]string{base})
	var sum atomic.Uint64
	sum.Store(1)
	changes := make(chan struct{}, 1)
	changed := func() {
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	go ra.publish(ctx, func() map[string]router.BaseLoad {
		return map[string]router.BaseLoad{base: {Inflight: 1, Prefill: sum.Load()}}
	}, changes)
	deadline := time.Now().Add(20 * time.Second)
	for rb.PeerPrefill(base) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("the routers never saw each other's loads")
		}
		time.Sleep(time.Millisecond)
	}
	lags := make([]time.Duration, 0, b.N)
	sent0, msgs0 := h.Routers[0].Stats().AppBytesSent.Load(), h.Routers[0].Stats().MsgsSent.Load()
	start := time.Now()
	b.ResetTimer()
	for i := range b.N {
		want := uint64(i + 2)
		t0 := time.Now()
		sum.Store(want)
		changed()
		for rb.PeerPrefill(base) != want {
			if time.Since(t0) > 10*time.Second {
				b.Fatalf("change %d not seen in 10s", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lags = append(lags, time.Since(t0))
		// Changes arrive at random phases of the publish cadence.
		time.Sleep(time.Duration(i%7) * 7 * time.Millisecond)
	}
	b.StopTimer()
	elapsed := time.Since(start).Seconds()
	sent := float64(h.Routers[0].Stats().AppBytesSent.Load() - sent0)
	msgs := float64(h.Routers[0].Stats().MsgsSent.Load() - msgs0)
	slices.Sort(lags)
	at := func(q float64) float64 {
		return float64(lags[min(int(q*float64(len(lags))), len(lags)-1)]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50_ms")
	b.ReportMetric(at(0.99), "p99_ms")
	b.ReportMetric(at(1), "max_ms")
	// What router a sent (to its one peer, and the gossip pool's probes):
	// bytes and messages per second at this rate of changes.
	b.ReportMetric(sent/elapsed, "B/s")
	b.ReportMetric(msgs/elapsed, "msgs/s")
	b.ReportMetric(float64(b.N)/elapsed, "changes/s")
}
