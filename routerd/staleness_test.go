package routerd

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
	"github.com/rolter/rolter/router"
	"github.com/rolter/rolter/router/meshstate"
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

// BenchmarkPeerLoadBytes measures what one router sends its peer for its
// loads when it serves about 300 requests/s over 8 engines: every 1.1 ms
// one engine's count changes (a pick, a first token or an end: three
// changes a request), each change signalled as the tracker does. It
// reports bytes and messages per second to the one peer (mesh messages
// before encryption and framing, the pool's probes included; no learned
// records).
//
//	go test -run '^$' -bench PeerLoadBytes -benchtime 3000x ./routerd/
func BenchmarkPeerLoadBytes(b *testing.B) { peerLoadBytes(b, false) }

// BenchmarkPeerLoadBytesIntents is BenchmarkPeerLoadBytes with the order
// of first picks on: every third change is a request's pick, which first
// waits as meshstate says (the sender is rank 0 of 2: its intent goes out
// at once, it never waits) and is then published at once.
//
//	go test -run '^$' -bench PeerLoadBytesIntents -benchtime 3000x ./routerd/
func BenchmarkPeerLoadBytesIntents(b *testing.B) { peerLoadBytes(b, true) }

func peerLoadBytes(b *testing.B, intents bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: 2, Seed: 12})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	const engines = 8
	bases := make([]string, engines)
	for i := range bases {
		bases[i] = "http://engine-" + strconv.Itoa(i) + ":8000/v1"
	}
	ra := newMeshHooks(h.Routers[0], time.Now)
	rb := newMeshHooks(h.Routers[1], time.Now)
	sender := 0
	if intents {
		// The sender is the rank-0 router: the one that announces intents
		// and never waits.
		deadline := time.Now().Add(20 * time.Second)
		for ra.state.Tick(time.Now(), nil); ; ra.state.Tick(time.Now(), nil) {
			if live, rank := ra.Routers(); live == 2 {
				if rank != 0 {
					ra, rb, sender = rb, ra, 1
				}
				break
			}
			if time.Now().After(deadline) {
				b.Fatal("the routers never saw each other")
			}
			time.Sleep(meshstate.Heartbeat)
		}
		ra.state.Tick(time.Now(), nil)
		if live, rank := ra.Routers(); live != 2 || rank != 0 {
			b.Fatalf("sender is rank %d of %d, want 0 of 2", rank, live)
		}
	}
	ra.Sources(bases)
	rb.Sources(bases)
	var mu sync.Mutex
	loads := map[string]router.BaseLoad{}
	changes := make(chan struct{}, 1)
	go ra.publish(ctx, func() map[string]router.BaseLoad {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(loads)
	}, changes)
	mu.Lock()
	loads[bases[0]] = router.BaseLoad{Inflight: 1, Prefill: 1}
	mu.Unlock()
	changes <- struct{}{}
	deadline := time.Now().Add(20 * time.Second)
	for rb.PeerPrefill(bases[0]) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("the routers never saw each other's loads")
		}
		time.Sleep(time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	st := h.Routers[sender].Stats()
	sent0, msgs0 := st.AppBytesSent.Load(), st.MsgsSent.Load()
	start := time.Now()
	b.ResetTimer()
	next := time.Now()
	for i := range b.N {
		next = next.Add(1100 * time.Microsecond)
		time.Sleep(time.Until(next))
		if intents && i%3 == 0 {
			if err := ra.Wait(ctx); err != nil {
				b.Fatal(err)
			}
			ra.state.Picked(time.Now())
		}
		mu.Lock()
		base := bases[rng.IntN(engines)]
		l := loads[base]
		l.Inflight = uint64(rng.IntN(20))
		l.Prefill = uint64(rng.IntN(200000))
		loads[base] = l
		mu.Unlock()
		select {
		case changes <- struct{}{}:
		default:
		}
	}
	b.StopTimer()
	elapsed := time.Since(start).Seconds()
	sent := float64(st.AppBytesSent.Load() - sent0)
	msgs := float64(st.MsgsSent.Load() - msgs0)
	b.ReportMetric(sent/elapsed, "B/s")
	b.ReportMetric(msgs/elapsed, "msgs/s")
	b.ReportMetric(float64(b.N)/elapsed, "changes/s")
	if intents {
		b.ReportMetric(float64(ra.state.IntentsSent())/elapsed, "intents/s")
	}
}
