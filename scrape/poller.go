package scrape

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/strategies"
)

// Options are a Poller's collaborators; zero values are the real ones.
type Options struct {
	// Client makes the polls (default: a client of its own; every request
	// is bounded by [metrics_scrape] timeout or the LMCache interval).
	Client *http.Client
	Now    func() time.Time
	Logger *slog.Logger
	// Inflight returns this router's in-flight requests per provider
	// api_base (router.Server.InflightByBase). A scrape subtracts them from
	// the engine's running + waiting: those requests are counted by the
	// router already. Nil: nothing is subtracted.
	Inflight func() map[string]uint64
}

// Poller is the router's own view of its engines for routers without
// sidecars: a background scrape of every provider's /metrics
// ([metrics_scrape]) and a poll of every [providers.lmcache] signal. It
// implements router.EngineView (Load) and router.SourceFactory (Sources,
// the LMCache signal only).
//
// Set gives it the providers to follow; Run runs the polls. Load and the
// CacheSignal that Sources returns read atomics only: they never block,
// never allocate and are safe from any goroutine.
type Poller struct {
	client   *http.Client
	now      func() time.Time
	log      *slog.Logger
	inflight func() map[string]uint64

	engines atomic.Pointer[map[string]*engine] // by api_base

	mu      sync.Mutex
	ctx     context.Context // Run's; nil before Run
	wg      sync.WaitGroup
	running map[string]*engine // by api_base, with their goroutines
}

// engine is one api_base's polled state.
type engine struct {
	spec   spec
	cancel context.CancelFunc

	queue     atomic.Uint64 // running + waiting − own in-flight at the scrape
	metricsAt atomic.Int64  // unix ns of the last good scrape; 0: none
	occupancy atomic.Uint64 // float64 bits
	available atomic.Bool
	lmcacheAt atomic.Int64 // unix ns of the last good LMCache poll; 0: none
	// failing marks a source whose last poll failed (logged once per
	// outage); its last good value stays until it is stale.
	metricsFailing, lmcacheFailing atomic.Bool
}

// spec is what to poll for one api_base; a change restarts its polls.
type spec struct {
	apiBase, provider string
	metricsURL        string // "" = no scrape
	interval, timeout time.Duration
	staleAfter        time.Duration
	lmcacheURL        string // "" = no LMCache poll
	lmInterval        time.Duration
	lmCapacity        int64
}

// NewPoller returns a Poller following nothing; call Set, then Run.
func NewPoller(o Options) *Poller {
	p := &Poller{client: o.Client, now: o.Now, log: o.Logger, inflight: o.Inflight, running: map[string]*engine{}}
	if p.client == nil {
		p.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.engines.Store(&map[string]*engine{})
	return p
}

// EngineBase is the engine's own base URL for a provider api_base: the
// OpenAI /v1 suffix routes may carry is dropped.
func EngineBase(apiBase string) string {
	return strings.TrimSuffix(strings.TrimRight(apiBase, "/"), "/v1")
}

// Set makes the poller follow cfg's providers: /metrics of every provider
// when cfg.MetricsScrape is enabled, and the LMCache signal of each
// provider that lmcache names (by provider name; the [providers.lmcache]
// tables of this router's rolter.toml). Polls whose target did not change
// keep running with their state. Call it before the router applies cfg,
// so the snapshot built from cfg reads the new targets.
func (p *Poller) Set(cfg *config.Config, lmcache map[string]*config.LMCache) {
	want := map[string]spec{}
	for _, pr := range cfg.Providers {
		s, ok := want[pr.APIBase]
		if !ok {
			s = spec{apiBase: pr.APIBase, provider: pr.Name}
			if m := cfg.MetricsScrape; m.Enabled {
				s.metricsURL = EngineBase(pr.APIBase) + m.Path
				s.interval, s.timeout, s.staleAfter = m.Interval.Duration, m.Timeout.Duration, m.StaleAfter.Duration
			}
		}
		if l := lmcache[pr.Name]; l != nil && s.lmcacheURL == "" {
			s.lmcacheURL, s.lmInterval, s.lmCapacity = l.URL, l.Interval.Duration, l.CapacityBytes
		}
		if s.metricsURL != "" || s.lmcacheURL != "" {
			want[pr.APIBase] = s
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make(map[string]*engine, len(want))
	for base, s := range want {
		if e, ok := p.running[base]; ok && e.spec == s {
			next[base] = e
			continue
		}
		e := &engine{spec: s}
		next[base] = e
		if p.ctx != nil {
			p.startLocked(e)
		}
	}
	for base, e := range p.running {
		if next[base] != e && e.cancel != nil {
			e.cancel()
		}
	}
	p.running = next
	p.engines.Store(&next)
}

// Run runs the polls until ctx ends, then stops them and returns.
func (p *Poller) Run(ctx context.Context) {
	p.mu.Lock()
	p.ctx = ctx
	for _, e := range p.running {
		p.startLocked(e)
	}
	p.mu.Unlock()
	<-ctx.Done()
	p.mu.Lock()
	p.ctx = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// startLocked starts e's poll goroutines; p.mu is held.
func (p *Poller) startLocked(e *engine) {
	ctx, cancel := context.WithCancel(p.ctx)
	e.cancel = cancel
	if e.spec.metricsURL != "" {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.every(ctx, e.spec.interval, p.scrape, e) }()
	}
	if e.spec.lmcacheURL != "" {
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.every(ctx, e.spec.lmInterval, p.pollLMCache, e) }()
	}
}

// every runs poll now and every interval until ctx ends.
func (p *Poller) every(ctx context.Context, interval time.Duration, poll func(context.Context, *engine), e *engine) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		poll(ctx, e)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// scrape reads e's /metrics once.
func (p *Poller) scrape(ctx context.Context, e *engine) {
	rctx, cancel := context.WithTimeout(ctx, e.spec.timeout)
	defer cancel()
	body, _, err := Fetch(rctx, p.client, e.spec.metricsURL)
	var m EngineMetrics
	if err == nil {
		m, err = ParseEngineMetrics(strings.NewReader(string(body)))
	}
	if err != nil {
		if ctx.Err() == nil && e.metricsFailing.CompareAndSwap(false, true) {
			p.log.Warn("metrics_scrape: engine /metrics failed; once stale its load is this router's in-flight count alone",
				"provider", e.spec.provider, "url", e.spec.metricsURL, "err", err)
		}
		return
	}
	if e.metricsFailing.Swap(false) {
		p.log.Info("metrics_scrape: engine /metrics answers again", "provider", e.spec.provider, "url", e.spec.metricsURL)
	}
	queue := m.Running + m.Waiting
	if p.inflight != nil {
		own := p.inflight()[e.spec.apiBase]
		queue -= min(own, queue)
	}
	e.queue.Store(queue)
	e.metricsAt.Store(p.now().UnixNano())
}

// pollLMCache reads e's LMCache signal once.
func (p *Poller) pollLMCache(ctx context.Context, e *engine) {
	rctx, cancel := context.WithTimeout(ctx, e.spec.lmInterval)
	defer cancel()
	body, _, err := Fetch(rctx, p.client, e.spec.lmcacheURL)
	var sig LMCacheSignal
	if err == nil {
		sig, err = ParseLMCache(body, e.spec.lmCapacity)
	}
	if err != nil {
		if ctx.Err() == nil && e.lmcacheFailing.CompareAndSwap(false, true) {
			p.log.Warn("providers.lmcache: poll failed; once stale lmcache_aware treats this provider as neutral",
				"provider", e.spec.provider, "url", e.spec.lmcacheURL, "err", err)
		}
		return
	}
	if e.lmcacheFailing.Swap(false) {
		p.log.Info("providers.lmcache: the signal answers again", "provider", e.spec.provider, "url", e.spec.lmcacheURL)
	}
	e.occupancy.Store(math.Float64bits(sig.Occupancy))
	e.available.Store(sig.Available)
	e.lmcacheAt.Store(p.now().UnixNano())
}

// fresh reports whether a poll at unix ns at is younger than maxAge.
func (p *Poller) fresh(at int64, maxAge time.Duration) bool {
	return at > 0 && p.now().UnixNano()-at <= int64(maxAge)
}

// Load implements router.EngineView: the engine's queue beyond this
// router's own in-flight requests, from a scrape younger than
// [metrics_scrape] stale_after.
func (p *Poller) Load(apiBase string) (uint64, bool) {
	e := (*p.engines.Load())[apiBase]
	if e == nil || e.spec.metricsURL == "" || !p.fresh(e.metricsAt.Load(), e.spec.staleAfter) {
		return 0, false
	}
	return e.queue.Load(), true
}

// KnowsLoads implements router.LoadKnower: without an engine to scrape
// (no [metrics_scrape], no LMCache signal) Load knows nothing.
func (p *Poller) KnowsLoads() bool { return len(*p.engines.Load()) > 0 }

// Sources implements router.SourceFactory: the pool's LMCache signal when
// any of its providers has [providers.lmcache], else nothing. Residency
// and adapters come from sidecars only.
func (p *Poller) Sources(apiBases []string) (strategies.Residency, strategies.CacheSignal, strategies.AdapterResidency) {
	m := *p.engines.Load()
	for _, b := range apiBases {
		if e := m[b]; e != nil && e.spec.lmcacheURL != "" {
			return nil, cacheSignal{p: p, bases: apiBases}, nil
		}
	}
	return nil, nil, nil
}

// cacheSignal is strategies.CacheSignal over a pool's api_bases, looked
// up in the poller's current targets at each call.
type cacheSignal struct {
	p     *Poller
	bases []string
}

// lmcacheStale: an LMCache signal older than this many poll intervals is
// neutral (as the sidecar's StaleAfter of 5 s at its 1 s default).
const lmcacheStale = 5

// Occupancy implements strategies.CacheSignal.
func (c cacheSignal) Occupancy(t int) (float64, bool, bool) {
	if t < 0 || t >= len(c.bases) {
		return 0, false, false
	}
	e := (*c.p.engines.Load())[c.bases[t]]
	if e == nil || e.spec.lmcacheURL == "" || !c.p.fresh(e.lmcacheAt.Load(), lmcacheStale*e.spec.lmInterval) {
		return 0, false, false
	}
	return math.Float64frombits(e.occupancy.Load()), e.available.Load(), true
}

var descAge = prometheus.NewDesc("rolter_cache_telemetry_age_seconds",
	"Age of the newest engine telemetry this router polled itself ([metrics_scrape], [providers.lmcache]), by provider and source.",
	[]string{"provider", "source"}, nil)

// Describe implements prometheus.Collector.
func (p *Poller) Describe(ch chan<- *prometheus.Desc) { ch <- descAge }

// Collect implements prometheus.Collector: one age per polled source that
// has answered at least once.
func (p *Poller) Collect(ch chan<- prometheus.Metric) {
	now := p.now().UnixNano()
	for _, e := range *p.engines.Load() {
		for _, s := range []struct {
			source string
			on     bool
			at     int64
		}{{"metrics", e.spec.metricsURL != "", e.metricsAt.Load()}, {"lmcache", e.spec.lmcacheURL != "", e.lmcacheAt.Load()}} {
			if s.on && s.at > 0 {
				ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, float64(now-s.at)/1e9, e.spec.provider, s.source)
			}
		}
	}
}
