// Package gossip owns `rolter bench gossip`: sidecars and routers of
// cluster/mesh in one process on loopback (mesh.Harness), a synthetic
// residency load fed straight into each sidecar's publisher, and the
// figures issue 5 asks for: how long a residency change takes to reach
// every router, network bytes per block event per router, router memory
// per resident block, and how exactly the routers' views match the
// engines under load. cmd/rolter parses the flags and calls Run.
package gossip

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/rolter/rolter/cluster/mesh"
)

// Config is one `rolter bench gossip`.
type Config struct {
	// Sidecars (one engine each) and Routers form the gossip pool.
	Sidecars, Routers int
	// Blocks are resident per engine; EventsPerSec block events per
	// second per engine (half stores, half evictions) run for Duration.
	Blocks, EventsPerSec int
	Duration             time.Duration
	Seed                 uint64
	// Loss drops that fraction of every node's outbound UDP packets.
	Loss float64
	// Insecure runs without gossip encryption.
	Insecure bool
	// Identity gives every member a certificate: every message carries
	// a MAC its receiver checks.
	Identity bool
}

// ErrConfig marks an unusable Config.
var ErrConfig = errors.New("bench gossip: bad config")

// Run forms the pool, fills every engine, waits until every router holds
// every block, drives the steady load for Duration and writes the report
// to w.
func Run(ctx context.Context, c Config, w io.Writer) error {
	if c.Sidecars < 1 || c.Routers < 1 || c.Blocks < 1 || c.EventsPerSec < 2 || c.Duration <= 0 {
		return fmt.Errorf("%w: sidecars, routers, blocks, events-per-sec and duration must be positive", ErrConfig)
	}
	if c.Loss < 0 || c.Loss > 1 {
		return fmt.Errorf("%w: loss must be in [0,1]", ErrConfig)
	}
	b := &bench{sidecars: c.Sidecars, routers: c.Routers, blocks: c.Blocks, eps: c.EventsPerSec, rng: mrand.New(mrand.NewPCG(c.Seed, c.Seed+1))}
	var key []byte
	if !c.Insecure {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "bench gossip: %d routers, %d sidecars, %d blocks/engine, %d events/s/engine, %v, loss %.0f%%, encryption %v, identity %v\n",
		c.Routers, c.Sidecars, c.Blocks, c.EventsPerSec, c.Duration, c.Loss*100, key != nil, c.Identity)

	start := time.Now()
	h, err := mesh.NewHarness(ctx, mesh.HarnessConfig{Routers: c.Routers, Sidecars: c.Sidecars, Seed: c.Seed, Key: key, Loss: c.Loss,
		Identity: c.Identity, Timing: &mesh.Timing{TCPTimeout: 5 * time.Second}}) // memberlist LAN defaults otherwise
	if err != nil {
		return err
	}
	defer h.Close()
	b.h = h
	if err := b.waitPool(ctx); err != nil {
		return err
	}
	fmt.Fprintf(w, "pool of %d formed in %v\n", c.Routers+c.Sidecars, time.Since(start).Round(time.Millisecond))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start = time.Now()
	b.fill()
	if err := b.waitConverged(ctx, 120*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(w, "initial %d blocks × %d engines reached every router in %v\n", c.Blocks, c.Sidecars, time.Since(start).Round(time.Millisecond))
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	res := b.steady(ctx, c.Duration)
	b.report(w, res, before, after)
	return nil
}

type bench struct {
	sidecars, routers, blocks, eps int
	rng                            *mrand.Rand
	h                              *mesh.Harness
	truth                          []*engineTruth
	views                          []*mesh.Targets // per router, over every engine URL
}

// engineTruth is what one engine holds: a slice for random eviction and a
// map for membership.
type engineTruth struct {
	keys []uint64
	idx  map[uint64]int
}

func (e *engineTruth) add(k uint64) {
	e.idx[k] = len(e.keys)
	e.keys = append(e.keys, k)
}

func (e *engineTruth) removeAt(i int) uint64 {
	k := e.keys[i]
	last := e.keys[len(e.keys)-1]
	e.keys[i] = last
	e.idx[last] = i
	e.keys = e.keys[:len(e.keys)-1]
	delete(e.idx, k)
	return k
}

func (b *bench) waitPool(ctx context.Context) error {
	want := b.routers + b.sidecars
	lo, hi := 0, 0
	err := poll(ctx, 120*time.Second, "pool formation", func() bool {
		lo, hi = want, 0
		for _, n := range b.h.Members() {
			lo, hi = min(lo, n.NumMembers()), max(hi, n.NumMembers())
		}
		return lo == want && hi == want
	})
	if err != nil {
		return fmt.Errorf("%w (nodes see between %d and %d of %d members)", err, lo, hi, want)
	}
	return nil
}

func poll(ctx context.Context, within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("bench gossip: %s not reached within %v", what, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (b *bench) fill() {
	urls := make([]string, b.sidecars)
	for i := range urls {
		urls[i] = mesh.EngineURL(i)
	}
	for _, r := range b.h.Routers {
		b.views = append(b.views, r.View().Targets(urls))
	}
	for _, s := range b.h.Sidecars {
		t := &engineTruth{idx: make(map[uint64]int, b.blocks)}
		for range b.blocks {
			t.add(b.rng.Uint64())
		}
		b.truth = append(b.truth, t)
		s.Publisher().Apply(mesh.ResidencyDelta{Added: slices.Clone(t.keys), State: mesh.StateExact})
	}
}

func (b *bench) waitConverged(ctx context.Context, within time.Duration) error {
	return poll(ctx, within, "initial convergence", func() bool {
		for _, v := range b.views {
			for i := range b.sidecars {
				if n, st := v.Blocks(i); n != b.blocks || st != mesh.StateExact {
					return false
				}
			}
		}
		return true
	})
}

type benchResult struct {
	elapsed      time.Duration
	events       uint64
	latencies    []time.Duration
	unconverged  int
	mismatches   uint64
	lookups      uint64
	sidecarBytes uint64
	sidecarApp   uint64
	routerBytes  uint64
	resyncs      uint64
	fulls        uint64
	malformed    uint64
	rejected     uint64 // refused by identity checks (counted from the start, pool formation included)
}

type probe struct {
	engine int
	key    uint64
	at     time.Time
	seen   []bool
}

// steady drives the event load for d and measures while it runs.
func (b *bench) steady(ctx context.Context, d time.Duration) benchResult {
	var res benchResult
	sideBytes0, sideApp0, routerBytes0 := b.bytes()
	var fulls0, resyncs0 uint64
	for _, r := range b.h.Routers {
		resyncs0 += r.Stats().ResyncsAsked.Load()
		fulls0 += r.Stats().FullsApplied.Load()
	}

	var mu sync.Mutex
	var pending []*probe
	stopPoll := make(chan struct{})
	pollDone := make(chan struct{})
	go func() { // convergence poller
		defer close(pollDone)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		q := make([]uint64, 1)
		for {
			select {
			case <-stopPoll:
				return
			case <-tick.C:
			}
			now := time.Now()
			mu.Lock()
			keep := pending[:0]
			for _, p := range pending {
				done := true
				for r, v := range b.views {
					if !p.seen[r] {
						q[0] = p.key
						n, ok := v.ResidentPrefix(p.engine, q)
						p.seen[r] = ok && n == 1
						done = done && p.seen[r]
					}
				}
				if done {
					res.latencies = append(res.latencies, now.Sub(p.at))
				} else {
					keep = append(keep, p)
				}
			}
			pending = keep
			mu.Unlock()
		}
	}()

	const tick = 10 * time.Millisecond
	start := time.Now()
	next := start
	var owed float64
	probed := map[uint64]bool{} // keys of pending probes, refreshed each tick
	lastCheck := start
	checkEngine, checkRouter := 0, 0
	for time.Since(start) < d && ctx.Err() == nil {
		next = next.Add(tick)
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		owed += float64(b.eps) * tick.Seconds()
		pairs := int(owed / 2) // one eviction + one store per pair
		owed -= float64(2 * pairs)
		probeEngine := b.rng.IntN(b.sidecars)
		mu.Lock()
		clear(probed)
		for _, p := range pending {
			probed[p.key] = true
		}
		mu.Unlock()
		for i, s := range b.h.Sidecars {
			t := b.truth[i]
			d := mesh.ResidencyDelta{Added: make([]uint64, pairs), Removed: make([]uint64, pairs)}
			for j := range pairs {
				at := b.rng.IntN(len(t.keys))
				if probed[t.keys[at]] { // a probe's key stays until every router saw it
					at = (at + 1) % len(t.keys)
				}
				d.Removed[j] = t.removeAt(at)
				d.Added[j] = b.rng.Uint64()
				t.add(d.Added[j])
			}
			now := time.Now()
			s.Publisher().Apply(d)
			res.events += uint64(2 * pairs)
			if i == probeEngine && pairs > 0 {
				mu.Lock()
				pending = append(pending, &probe{engine: i, key: d.Added[0], at: now, seen: make([]bool, len(b.views))})
				probed[d.Added[0]] = true
				mu.Unlock()
			}
		}
		if time.Since(lastCheck) >= 200*time.Millisecond { // accuracy: one (engine, router) pair at a time
			lastCheck = time.Now()
			m, l := b.accuracy(checkEngine, b.views[checkRouter])
			res.mismatches += m
			res.lookups += l
			checkRouter++
			if checkRouter == len(b.views) {
				checkRouter = 0
				checkEngine = (checkEngine + 1) % b.sidecars
			}
		}
	}
	res.elapsed = time.Since(start)
	// let the last probes land before stopping the poller
	_ = poll(ctx, 5*time.Second, "last probes", func() bool { mu.Lock(); defer mu.Unlock(); return len(pending) == 0 })
	close(stopPoll)
	<-pollDone
	res.unconverged = len(pending)
	sb, sa, rb := b.bytes()
	res.sidecarBytes, res.sidecarApp, res.routerBytes = sb-sideBytes0, sa-sideApp0, rb-routerBytes0
	for _, r := range b.h.Routers {
		res.resyncs += r.Stats().ResyncsAsked.Load()
		res.fulls += r.Stats().FullsApplied.Load()
		res.malformed += r.Stats().Malformed.Load()
		for i := range r.Stats().Rejected {
			res.rejected += r.Stats().Rejected[i].Load()
		}
	}
	res.resyncs -= resyncs0
	res.fulls -= fulls0
	return res
}

// accuracy compares one router's view of engine i with the truth: every
// truth key is looked up, and every key the view holds that the engine
// does not counts as a wrong lookup too.
func (b *bench) accuracy(i int, v *mesh.Targets) (mismatches, lookups uint64) {
	t := b.truth[i]
	q := make([]uint64, 1)
	for _, k := range t.keys {
		q[0] = k
		if n, ok := v.ResidentPrefix(i, q); !ok || n != 1 {
			mismatches++
		}
		lookups++
	}
	v.EachBlock(i, func(k uint64) {
		if _, ok := t.idx[k]; !ok {
			mismatches++
			lookups++
		}
	})
	return mismatches, lookups
}

func (b *bench) bytes() (sidecar, sidecarApp, router uint64) {
	for _, s := range b.h.Sidecars {
		sidecar += b.h.Transports[s.Name()].BytesSent()
		sidecarApp += s.Stats().AppBytesSent.Load()
	}
	for _, r := range b.h.Routers {
		router += b.h.Transports[r.Name()].BytesSent()
	}
	return sidecar, sidecarApp, router
}

func (b *bench) report(w io.Writer, res benchResult, before, after runtime.MemStats) {
	slices.Sort(res.latencies)
	pct := func(p float64) time.Duration {
		if len(res.latencies) == 0 {
			return 0
		}
		return res.latencies[min(int(p*float64(len(res.latencies))), len(res.latencies)-1)]
	}
	deliveries := float64(res.events) * float64(b.routers)
	secs := res.elapsed.Seconds()
	fmt.Fprintf(w, "steady state: %d block events in %v (%.0f/s per engine)\n", res.events, res.elapsed.Round(time.Millisecond), float64(res.events)/secs/float64(b.sidecars))
	fmt.Fprintf(w, "convergence (event at a sidecar → visible on every router): n=%d p50=%v p99=%v max=%v unconverged=%d\n",
		len(res.latencies), pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), pct(1).Round(time.Millisecond), res.unconverged)
	fmt.Fprintf(w, "bandwidth: sidecar wire bytes (all memberlist traffic incl. probes, encryption) per block event per router: %.2f B\n",
		float64(res.sidecarBytes)/deliveries)
	fmt.Fprintf(w, "           of which mesh messages (deltas, status, resends, fulls): %.2f B\n", float64(res.sidecarApp)/deliveries)
	fmt.Fprintf(w, "           per sidecar %.1f KB/s, per router sent %.1f KB/s; router resyncs asked %d, full states applied %d, malformed %d, rejected by identity %d\n",
		float64(res.sidecarBytes)/secs/float64(b.sidecars)/1024, float64(res.routerBytes)/secs/float64(b.routers)/1024, res.resyncs, res.fulls, res.malformed, res.rejected)
	var idxBytes, idxBlocks int
	for _, r := range b.h.Routers {
		by, bl := r.ResidencyBytes()
		idxBytes += by
		idxBlocks += bl
	}
	fmt.Fprintf(w, "router memory: residency index (exact structure accounting: slot arrays) %.1f B per resident (engine, block) over %d pairs\n",
		float64(idxBytes)/float64(max(idxBlocks, 1)), idxBlocks)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	pairs := b.blocks * b.sidecars
	fmt.Fprintf(w, "               (whole-process heap delta over the fill, which also holds every sidecar's own set and the bench's truth maps: %.1f B per router-side pair — an upper bound, not the router's figure)\n",
		float64(heap)/float64(pairs*b.routers))
	acc := 1.0
	if res.lookups > 0 {
		acc = 1 - float64(res.mismatches)/float64(res.lookups)
	}
	fmt.Fprintf(w, "accuracy under load: %.4f%% of %d (engine, block) lookups matched the engine's truth\n", acc*100, res.lookups)
}
