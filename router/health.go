package router

import (
	"context"
	"hash/fnv"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// healthManager runs one active-probe goroutine per provider while Run is
// active, and reconciles that set on every Apply. A provider's first probe
// falls at its own offset into the interval (probeOffset); then it probes
// every [health] interval while all is well and every recovery_interval while it
// is unhealthy or its breaker is open; a breaker that opens wakes its
// provider's loop for a probe at once. A successful probe ends an open
// breaker's open period (the next request is its half-open probe), so an
// engine that comes back is used again within about recovery_interval,
// and one that stays dead is probed by the router, not by client requests.
type healthManager struct {
	s         *Server
	newTicker func(time.Duration) (<-chan time.Time, func())

	mu    sync.Mutex
	ctx   context.Context // nil while not running
	loops map[string]context.CancelFunc
	wg    sync.WaitGroup
}

func newHealthManager(s *Server, newTicker func(time.Duration) (<-chan time.Time, func())) *healthManager {
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	return &healthManager{s: s, newTicker: newTicker, loops: map[string]context.CancelFunc{}}
}

// run starts the probes of the current snapshot and blocks until ctx ends
// and every probe goroutine has returned.
func (h *healthManager) run(ctx context.Context) {
	h.mu.Lock()
	h.ctx = ctx
	h.mu.Unlock()
	if sn := h.s.snap.Load(); sn != nil {
		h.reconcile(sn)
	}
	<-ctx.Done()
	h.mu.Lock()
	h.ctx = nil
	for k, cancel := range h.loops {
		cancel()
		delete(h.loops, k)
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// reconcile starts probes for new providers and stops removed ones. With
// [health] enabled = false every probe stops and providers count as
// healthy.
func (h *healthManager) reconcile(sn *snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		return
	}
	cfg := sn.cfg.Health
	want := map[string]*provider{}
	if cfg.Enabled {
		for _, p := range sn.providers {
			want[p.name+"\x00"+p.apiBase+"\x00"+cfg.Interval.String()+"\x00"+cfg.RecoveryInterval.String()] = p
		}
	} else {
		for _, p := range sn.providers {
			p.up.healthy.Store(true)
		}
	}
	for k, cancel := range h.loops {
		if _, ok := want[k]; !ok {
			cancel()
			delete(h.loops, k)
		}
	}
	for k, p := range want {
		if _, ok := h.loops[k]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(h.ctx)
		h.loops[k] = cancel
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.loop(ctx, p, cfg.Interval.Duration, min(cfg.RecoveryInterval.Duration, cfg.Interval.Duration))
		}()
	}
}

func (h *healthManager) loop(ctx context.Context, p *provider, every, recovery time.Duration) {
	// The first probe waits for the provider's own offset into the
	// interval, then the cadence is every (or recovery): providers whose
	// loops start together (Run, an Apply) probe at different instants.
	cur := probeOffset(p.name, every)
	tick, stop := h.newTicker(cur)
	defer func() { stop() }()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		case <-p.up.wake:
		}
		if first && cur != every {
			// The interval's ticker starts with the first probe, not
			// after it: the offset stays where probeOffset put it.
			stop()
			cur = every
			tick, stop = h.newTicker(cur)
		}
		// Probe with the provider as the running snapshot has it (its
		// api key may have changed since the loop started).
		if sn := h.s.snap.Load(); sn != nil {
			if c, ok := sn.providers[p.name]; ok && c.apiBase == p.apiBase {
				p = c
			}
		}
		h.s.probe(ctx, p)
		want := every
		if p.up.troubled() {
			want = recovery
		}
		if want != cur {
			stop()
			cur = want
			tick, stop = h.newTicker(cur)
		}
	}
}

// probeOffset is when, after its loop starts, the provider named name
// is probed first: a point in (0, every] from a hash of the name, the same
// on every start of every router, so a restart does not line the probes
// up either. 64 providers at the default 10 s interval fall at 64 points
// instead of one instant; a hash is not an even spread, so some seconds
// see a few more probes than others.
func probeOffset(name string, every time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = io.WriteString(h, name)
	if d := time.Duration(h.Sum64() % uint64(every)); d > 0 {
		return d
	}
	return every
}

// probe runs one active health check of p: GET [health] path (default
// /v1/models), falling back to /health, each bounded by [health] timeout.
// A 2xx from either is a success.
func (s *Server) probe(ctx context.Context, p *provider) {
	sn := s.snap.Load()
	if sn == nil {
		return
	}
	cfg := sn.cfg.Health
	began := s.clock.Now()
	ok := s.get(ctx, p, cfg.Path, cfg.Timeout.Duration)
	if !ok && cfg.Path != "/health" {
		ok = s.get(ctx, p, "/health", cfg.Timeout.Duration)
	}
	if ctx.Err() != nil {
		return
	}
	if ok && p.up.healthCheckOK(began, s.clock.Now()) {
		s.log.Info("circuit breaker half-open: the health check succeeded", "provider", p.name)
	}
	healthy, changed := p.up.probed(ok, cfg.DownAfter, cfg.UpAfter)
	if changed && !healthy {
		s.calm.disturb()
	}
	if changed {
		if healthy {
			s.log.Info("provider healthy again", "provider", p.name)
		} else {
			s.log.Warn("provider marked down by health checks", "provider", p.name, "failures", cfg.DownAfter)
		}
	}
}

func (s *Server) get(ctx context.Context, p *provider, path string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, err := endpointURL(p, path)
	if err != nil {
		return false
	}
	req := fasthttp.AcquireRequest()
	req.Header.SetMethod(fasthttp.MethodGet)
	upstreamAuth(&req.Header, p)
	end := time.Now().Add(timeout)
	resp, err := s.transport.send(&outbound{ctx: ctx, url: u, req: req, firstByte: end, deadline: end})
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}
