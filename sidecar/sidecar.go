package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/scrape"
)

// Options carries a sidecar's injected dependencies; zero values are the
// real ones (slog.Default, time.Now, an http.Client, ZMQ per Config).
type Options struct {
	Logger *slog.Logger
	Now    func() time.Time
	Client *http.Client
	// Source and Replayer replace the ZMQ subscriber (tests, benchmarks).
	// When Source is set, Config.KVEvents is ignored.
	Source   Source
	Replayer Replayer
	// Collectors are registered on the sidecar's own /metrics registry
	// beside its series (the gossip node's, for one).
	Collectors []prometheus.Collector
	// TLS, when set, serves the metrics listener over TLS (package certs
	// builds it: the --admin-tls-* flags).
	TLS *tls.Config
	// Listener, when set, is the metrics listener already open on
	// Config.MetricsAddr (the process opens it first, to report a taken
	// port before it runs and to name the port it got); Run serves it and
	// closes it.
	Listener net.Listener
}

// Sidecar runs beside one engine: it applies the engine's KV events to a
// residency Tracker, scrapes its /metrics and the LMCache signal, and hands
// summaries to a Publisher.
type Sidecar struct {
	cfg     Config
	opts    Options
	pub     Publisher
	log     *slog.Logger
	now     func() time.Time
	tracker *Tracker
	stats   *StreamStats
	tel     telemetry
	handler http.Handler
	pubMu   sync.Mutex // serialises PublishResidency/PublishSnapshot
	running atomic.Bool
}

// telemetry holds the latest results of the background pollers.
type telemetry struct {
	metrics         atomic.Pointer[polled[scrape.EngineMetrics]]
	lmcache         atomic.Pointer[polled[scrape.LMCacheSignal]]
	models          atomic.Pointer[polled[EngineModels]]
	metricsFailures atomic.Uint64
	lmcacheFailures atomic.Uint64
	modelsFailures  atomic.Uint64
}

// polled is one poller's latest state: the last good value and when it was
// read, and whether the latest attempt succeeded.
type polled[T any] struct {
	v      T
	at     time.Time
	lastOK bool
}

// fresh reports whether p holds a usable value at now.
func (p *polled[T]) fresh(now time.Time, staleAfter time.Duration) bool {
	return p != nil && p.lastOK && now.Sub(p.at) <= staleAfter
}

// New validates cfg and builds a sidecar; nothing runs until Run.
func New(cfg Config, pub Publisher, opts Options) (*Sidecar, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pub == nil {
		return nil, fmt.Errorf("%w: nil publisher", ErrConfig)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Client == nil {
		opts.Client = &http.Client{}
	}
	s := &Sidecar{
		cfg: cfg, opts: opts, pub: pub, now: opts.Now,
		log:   opts.Logger.With("node_id", cfg.NodeID),
		stats: &StreamStats{},
	}
	s.tracker = NewTracker(cfg.BlockSize, uint64(opts.Now().UnixNano()))
	s.handler = s.newHandler()
	return s, nil
}

// Run builds a sidecar from cfg and runs it until ctx is done.
func Run(ctx context.Context, cfg Config, pub Publisher) error {
	s, err := New(cfg, pub, Options{})
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Tracker returns the residency tracker (read-only use: Stats, Resident).
func (s *Sidecar) Tracker() *Tracker { return s.tracker }

// StreamStats returns the KV-event stream's live counters.
func (s *Sidecar) StreamStats() *StreamStats { return s.stats }

// Handler serves the sidecar's own /metrics and /healthz.
func (s *Sidecar) Handler() http.Handler { return s.handler }

// Run runs every loop until ctx is done and returns nil then; it returns an
// error early only when something cannot start (the KV-event socket, the
// metrics listener).
func (s *Sidecar) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	src, rep := s.opts.Source, s.opts.Replayer
	if src == nil && s.cfg.KVEvents != "" {
		zsrc, zrep, closeFn, err := openZMQ(s.cfg, s.log)
		if err != nil {
			return fmt.Errorf("kv events %s: %w", s.cfg.KVEvents, err)
		}
		defer closeFn()
		src, rep = zsrc, zrep
	}
	var srv *http.Server
	var ln net.Listener
	if ln = s.opts.Listener; ln == nil && s.cfg.MetricsAddr != "" {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.MetricsAddr); err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
	}
	if ln != nil {
		if s.opts.TLS != nil {
			ln = tls.NewListener(ln, s.opts.TLS)
		}
		srv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second}
	}
	s.running.Store(true)
	defer s.running.Store(false)
	s.log.Info("sidecar running", "engine", s.cfg.Engine, "kv_events", s.cfg.KVEvents,
		"replay", s.cfg.KVEventsReplay, "lmcache", s.cfg.LMCache, "metrics_addr", s.cfg.MetricsAddr)

	var wg sync.WaitGroup
	goLoop := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	if src != nil {
		st := newStream(src, rep, s.cfg.Topic, s.tracker, s.log, s.now, s.cfg.ReplayTimeout, s.stats)
		goLoop(func(ctx context.Context) { _ = st.run(ctx) })
	}
	goLoop(s.residencyLoop)
	if s.cfg.Engine != "" {
		goLoop(s.metricsLoop)
		goLoop(s.modelsLoop)
	}
	if s.cfg.LMCache != "" {
		goLoop(s.lmcacheLoop)
	}
	if srv != nil {
		goLoop(func(context.Context) {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics server stopped", "err", err)
			}
		})
	}
	<-ctx.Done()
	if srv != nil {
		shutCtx, done := context.WithTimeout(context.Background(), 2*time.Second)
		_ = srv.Shutdown(shutCtx)
		done()
	}
	wg.Wait()
	return nil
}

// every calls f at once and then every interval until ctx is done.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Sidecar) residencyLoop(ctx context.Context) {
	snapPub, wantSnapshots := s.pub.(SnapshotPublisher)
	lastFull := s.now()
	every(ctx, s.cfg.FlushInterval, func() {
		if wantSnapshots && s.now().Sub(lastFull) >= s.cfg.FullStateInterval {
			lastFull = s.now()
			snapPub.PublishSnapshot(s.Snapshot())
			return
		}
		s.pubMu.Lock()
		defer s.pubMu.Unlock()
		for _, d := range s.tracker.Flush(s.cfg.MaxDeltaKeys) {
			s.pub.PublishResidency(d)
		}
	})
}

// Snapshot publishes any pending Deltas and returns the full residency at
// the resulting Version, so that the Snapshot plus every later Delta is
// exact. Safe to call from any goroutine (e.g. when a router joins).
func (s *Sidecar) Snapshot() Snapshot {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	deltas, snap := s.tracker.Snapshot(s.cfg.MaxDeltaKeys)
	for _, d := range deltas {
		s.pub.PublishResidency(d)
	}
	return snap
}

func (s *Sidecar) metricsLoop(ctx context.Context) {
	url := strings.TrimRight(s.cfg.Engine, "/") + "/metrics"
	every(ctx, s.cfg.ScrapeInterval, func() {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
		defer cancel()
		body, _, err := scrape.Fetch(rctx, s.opts.Client, url)
		var m scrape.EngineMetrics
		if err == nil {
			m, err = scrape.ParseEngineMetrics(strings.NewReader(string(body)))
		}
		prev := s.tel.metrics.Load()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.tel.metricsFailures.Add(1)
			if prev == nil || prev.lastOK {
				s.log.Warn("engine metrics scrape failed", "url", url, "err", err)
			}
			next := &polled[scrape.EngineMetrics]{}
			if prev != nil {
				next.v, next.at = prev.v, prev.at
			}
			s.tel.metrics.Store(next)
		} else {
			s.tel.metrics.Store(&polled[scrape.EngineMetrics]{v: m, at: s.now(), lastOK: true})
		}
		s.pub.PublishStatus(s.Status())
	})
}

func (s *Sidecar) lmcacheLoop(ctx context.Context) {
	every(ctx, s.cfg.LMCacheInterval, func() {
		rctx, cancel := context.WithTimeout(ctx, s.cfg.ScrapeTimeout)
		defer cancel()
		body, _, err := scrape.Fetch(rctx, s.opts.Client, s.cfg.LMCache)
		var sig scrape.LMCacheSignal
		if err == nil {
			sig, err = scrape.ParseLMCache(body, s.cfg.LMCacheCapacity)
		}
		prev := s.tel.lmcache.Load()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.tel.lmcacheFailures.Add(1)
			if prev == nil || prev.lastOK {
				s.log.Warn("lmcache poll failed", "url", s.cfg.LMCache, "err", err)
			}
			next := &polled[scrape.LMCacheSignal]{}
			if prev != nil {
				next.v, next.at = prev.v, prev.at
			}
			s.tel.lmcache.Store(next)
			return
		}
		s.tel.lmcache.Store(&polled[scrape.LMCacheSignal]{v: sig, at: s.now(), lastOK: true})
	})
}

// Status composes the current EngineStatus from the latest poller results.
// A source whose last attempt failed, or whose value is older than
// StaleAfter, is reported not OK (neutral for routing).
func (s *Sidecar) Status() EngineStatus {
	now := s.now()
	ts := s.tracker.Stats()
	st := EngineStatus{State: ts.State, ResidentBlocks: ts.ResidentKeys}
	if m := s.tel.metrics.Load(); m != nil {
		v := m.v
		st.Running, st.Waiting, st.KVUsage = v.Running, v.Waiting, v.KVUsage
		st.PrefixHits, st.PrefixQueries = v.PrefixHits, v.PrefixQueries
		st.BlockSize, st.NumGPUBlocks, st.MaxLoRAs = v.BlockSize, v.NumGPUBlocks, v.MaxLoRAs
		st.ScrapedAt, st.MetricsOK = m.at, m.fresh(now, s.cfg.StaleAfter)
		if st.MetricsOK {
			st.Adapters = append(st.Adapters, v.Adapters...)
		}
	}
	if md := s.tel.models.Load(); md != nil {
		st.Models = append([]string(nil), md.v.Models...)
		if md.fresh(now, s.modelsFresh()) {
			st.Adapters = append(st.Adapters, md.v.Adapters...)
		}
	}
	slices.Sort(st.Adapters)
	st.Adapters = slices.Compact(st.Adapters)
	if st.BlockSize == 0 {
		st.BlockSize = s.cfg.BlockSize
	}
	if l := s.tel.lmcache.Load(); l != nil {
		st.LMCacheOccupancy, st.LMCacheAvailable = l.v.Occupancy, l.v.Available
		st.LMCacheAt, st.LMCacheOK = l.at, l.fresh(now, s.cfg.StaleAfter)
	}
	return st
}
