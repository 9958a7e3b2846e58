package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/routestats"
	"github.com/rolter/rolter/strategies"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Options are a Server's collaborators. Every field is optional; the zero
// value runs a real router with the system clock.
type Options struct {
	Logger *slog.Logger
	// Clock drives breaker, parking and latency measurement.
	Clock strategies.Clock
	// Rand seeds the balancers and draws retry jitter.
	Rand strategies.Rand
	// Sleep waits out a retry backoff; tests record instead of sleeping.
	Sleep func(ctx context.Context, d time.Duration) error
	// Transport carries upstream requests and health probes instead of the
	// router's own client (tests; nil: the router's). Requests and
	// responses are converted to and from net/http's types for it.
	Transport http.RoundTripper
	// Getenv resolves providers' api_key_env (default os.Getenv).
	Getenv func(string) string
	// Registry receives the data plane's metrics (default: a new one,
	// which also carries the Go runtime and process collectors: the
	// go_memstats_* and process_* series operators watch for leaks).
	Registry *prometheus.Registry
	// Engine and Sources connect the mesh's view of the engines (nil: none).
	Engine  EngineView
	Sources SourceFactory
	// Learn shares balancers' prefix observations and session pins with
	// the other routers (nil: none).
	Learn Learner
	// NewTicker drives the health probes (default time.NewTicker).
	NewTicker func(d time.Duration) (tick <-chan time.Time, stop func())
	// Base supplies the HTTP server timeouts and limits Serve uses when it
	// starts before any config is applied (default config.Default()).
	Base *config.Config
	// Ready is an extra /readyz condition (the control plane's): a non-nil
	// error makes /readyz answer 503 with the error's text, or 200 with
	// "ready, degraded: " and the text when it wraps ErrDegraded.
	Ready func() error
	// AdminExtra serves every admin-port path AdminHandler does not own
	// itself (the admin API, the dashboard); nil: 404.
	AdminExtra http.Handler
	// TracerProvider traces every request (NewTracerProvider builds one
	// from [tracing]); nil: no tracing, and a client's traceparent is
	// forwarded to the engine untouched.
	TracerProvider trace.TracerProvider
	// NodeID names this router in x-rolter-node-id, spans and the request
	// log ("": the header is left out).
	NodeID string
	// ConfigWait bounds how long a request that arrives before the first
	// Apply waits for it before the 503 (0: DefaultConfigWait; negative:
	// no wait).
	ConfigWait time.Duration
	// WrapAPI wraps the API listener Serve is given, above the departure
	// watch (which needs the TCP connections themselves): TLS. nil: none.
	WrapAPI func(net.Listener) net.Listener
}

// Server is one router's data plane. Create it with New, give it a config
// with Apply, serve Handler (and AdminHandler), and run the background
// health checks with Run (or all of it with Serve).
type Server struct {
	log       *slog.Logger
	clock     strategies.Clock
	rand      strategies.Rand
	sleep     func(context.Context, time.Duration) error
	transport *fastTransport
	getenv    func(string) string
	reg       *prometheus.Registry
	engine    EngineView
	sources   SourceFactory
	learn     Learner
	base      *config.Config
	ready     func() error
	extra     http.Handler
	wrapAPI   func(net.Listener) net.Listener
	// front picks the API's server in Serve (tests pin one).
	front frontKind

	tracker *strategies.Tracker
	parks   parkings
	policy  *strategies.PolicyHolder
	metrics *metrics
	stages  *stageMetrics
	health  *healthManager
	// routeStats is the route page's in-memory ring (routestats.go).
	routeStats *routestats.Ring

	// Observation (trace.go, reqlog.go).
	tracer       trace.Tracer // nil: tracing off
	prop         propagation.TextMapPropagator
	nodeID       string
	nodeIDHeader []string // x-rolter-node-id's value; nil without a node id
	idPrefix     [12]byte // hex; generated request ids start with it
	idSeq        atomic.Uint64

	snap     atomic.Pointer[snapshot]
	budget   atomic.Pointer[retryBudget]
	draining atomic.Bool
	applyMu  sync.Mutex // serialises Apply

	upMu      sync.Mutex
	upstreams map[string]*upstream // by provider name + "\x00" + api_base
	// calm summarises every target's parking, health and breaker for the
	// pick (parking.go).
	calm calm

	streams sync.Map // API key name → *atomic.Int64 open streams

	// gates is pool key → *poolGate (admission.go); admissionMetrics its
	// series.
	gates            sync.Map
	admissionMetrics *admissionMetrics

	configWait     time.Duration
	configured     chan struct{} // closed by the first successful Apply
	configuredOnce sync.Once
}

// New returns a Server with no config: requests wait for the first Apply
// (up to Options.ConfigWait), then get 503.
func New(o Options) *Server {
	s := &Server{
		log: o.Logger, clock: o.Clock, rand: o.Rand, sleep: o.Sleep,
		getenv: o.Getenv, reg: o.Registry, engine: o.Engine, sources: o.Sources,
		learn: o.Learn,
		base:  o.Base, ready: o.Ready, extra: o.AdminExtra, wrapAPI: o.WrapAPI,
		tracker:    strategies.NewTracker(),
		policy:     strategies.NewPolicyHolder(adaptive.DefaultPolicy()),
		upstreams:  map[string]*upstream{},
		configWait: o.ConfigWait, configured: make(chan struct{}),
	}
	if s.configWait == 0 {
		s.configWait = DefaultConfigWait
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.clock == nil {
		s.clock = systemClock{}
	}
	if s.rand == nil {
		s.rand = strategies.NewRand(uint64(time.Now().UnixNano()))
	}
	if s.sleep == nil {
		s.sleep = sleepCtx
	}
	s.transport = newFastTransport(s, o.Transport)
	if s.getenv == nil {
		s.getenv = envLookup
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if s.base == nil {
		d := config.Default()
		s.base = &d
	}
	s.metrics = newMetrics(s.reg)
	s.reg.MustRegister(prefillCollector{s})
	s.admissionMetrics = newAdmissionMetrics(s, s.reg)
	s.routeStats = routestats.NewRing(s.clock.Now)
	s.stages = newStageMetrics(s.reg)
	s.initObservation(o)
	s.reg.MustRegister(newAdaptiveCollector(s))
	s.health = newHealthManager(s, o.NewTicker)
	s.budget.Store(newRetryBudget(0.2, minRetryBurst))
	return s
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Tracker returns the learned per-target state shared by every snapshot.
func (s *Server) Tracker() *strategies.Tracker { return s.tracker }

// Registry returns the registry holding the data plane's metrics.
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// ConfigVersion returns the version of the running snapshot (0: none).
func (s *Server) ConfigVersion() uint64 {
	if sn := s.snap.Load(); sn != nil {
		return sn.version
	}
	return 0
}

// Apply builds a snapshot from cfg and swaps it in atomically with the
// next config version. In-flight requests finish on the snapshot they
// started with. On error the running snapshot is kept.
func (s *Server) Apply(cfg *config.Config) error {
	return s.ApplyVersion(cfg, 0)
}

// ApplyVersion is Apply with an explicit config version (the control
// plane's commit index); 0 means "previous + 1".
func (s *Server) ApplyVersion(cfg *config.Config, version uint64) error {
	if cfg == nil {
		return errors.New("router: nil config")
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if version == 0 {
		version = s.ConfigVersion() + 1
	}
	b := builder{prev: s.snap.Load(), tracker: s.tracker, parks: &s.parks, rand: s.rand, clock: s.clock, policy: s.policy,
		sources: s.sources, getenv: s.getenv, upstream: s.upstreamFor}
	sn, err := b.build(cfg, version)
	if err != nil {
		return err
	}
	s.policy.Store(cfg.AdaptiveRouting.Policy())
	burst := retryBurst(cfg.Breaker.Failures)
	if old := s.budget.Load(); old.ratio != int64(cfg.Retry.Budget*1000) || old.burst != burst*1000 {
		s.budget.Store(newRetryBudget(cfg.Retry.Budget, burst))
	}
	s.snap.Store(sn)
	s.markConfigured()
	s.pruneUpstreams(sn)
	s.health.reconcile(sn)
	s.metrics.configVersion.Set(float64(version))
	if len(sn.keys) == 0 {
		s.log.Warn("no API keys configured: the router is open to every client")
	}
	s.log.Info("config applied", "version", version, "routes", len(sn.routes), "groups", len(sn.groups), "providers", len(sn.providers))
	return nil
}

func (s *Server) upstreamFor(name, apiBase string) *upstream {
	k := name + "\x00" + apiBase
	s.upMu.Lock()
	defer s.upMu.Unlock()
	u, ok := s.upstreams[k]
	if !ok {
		u = newUpstream(name)
		s.upstreams[k] = u
	}
	return u
}

func (s *Server) pruneUpstreams(sn *snapshot) {
	s.upMu.Lock()
	defer s.upMu.Unlock()
	for k, u := range s.upstreams {
		if p, ok := sn.providers[u.name]; !ok || k != p.name+"\x00"+p.apiBase {
			delete(s.upstreams, k)
		}
	}
}

// Handler is the OpenAI-compatible API on net/http (Serve runs the same
// proxy on fasthttp's server where it can, front_fast.go).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := &stdFront{w: w, r: r, ctl: *http.NewResponseController(w), p: cleanPath(r.URL.Path)}
		s.serveAPI(f, f)
	})
}

func (s *Server) serveAPI(w answer, r inbound) {
	switch path := r.path(); path {
	case "/v1/chat/completions", "/v1/completions", "/v1/embeddings":
		if r.method() != http.MethodPost {
			w.setHeader("Allow", valuePOST)
			writeError(w, fmt.Errorf("%w: use POST", ErrMethod), 0)
			return
		}
		s.serveInference(w, r)
	case "/v1/models":
		if r.method() != http.MethodGet {
			w.setHeader("Allow", valueGET)
			writeError(w, fmt.Errorf("%w: use GET", ErrMethod), 0)
			return
		}
		s.serveModels(w, r)
	default:
		writeError(w, fmt.Errorf("%w: %s", ErrNotFound, path), 0)
	}
}

// ErrDegraded marks an Options.Ready error under which the router still
// serves from the config it runs (a control plane cut from its Raft
// leader): /readyz answers 200 and says why it is degraded.
var ErrDegraded = errors.New("degraded")

// AdminHandler serves /metrics, /healthz (the process is up) and /readyz
// (a config is applied, the server is not draining and Options.Ready
// agrees); every other path goes to Options.AdminExtra.
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.draining.Load():
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case s.snap.Load() == nil:
			http.Error(w, "no config applied", http.StatusServiceUnavailable)
		default:
			if s.ready != nil {
				if err := s.ready(); errors.Is(err, ErrDegraded) {
					_, _ = io.WriteString(w, "ready, "+err.Error()+"\n")
					return
				} else if err != nil {
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
			}
			_, _ = io.WriteString(w, "ready\n")
		}
	})
	if s.extra != nil {
		mux.Handle("/", s.extra)
	}
	return mux
}

// serveConfig is the running snapshot's config, or Options.Base before
// the first Apply.
func (s *Server) serveConfig() *config.Config {
	if sn := s.snap.Load(); sn != nil {
		return sn.cfg
	}
	return s.base
}

// Run runs the active health checks until ctx ends.
func (s *Server) Run(ctx context.Context) {
	s.health.run(ctx)
}

// Serve runs the API on api and the admin endpoints on admin (nil: none)
// until ctx ends; a request before the first Apply waits for it (bounded by
// Options.ConfigWait), then gets 503 with Retry-After. Then it
// drains: listeners close at once, /readyz turns 503,
// and requests in flight (streams included) get up to [timeouts] drain to
// finish before their connections are closed.
//
// The API is served by fasthttp's server where the departure watch runs
// (Linux: front_fast.go), else by net/http's; the admin endpoints by
// net/http's.
func (s *Server) Serve(ctx context.Context, api, admin net.Listener) error {
	t, l := s.serveConfig().Timeouts, s.serveConfig().Limits
	base := context.WithoutCancel(ctx)
	mk := func(h http.Handler, ln net.Listener) stdServer {
		return stdServer{&http.Server{Handler: h, ReadHeaderTimeout: t.ReadHeader.Duration, IdleTimeout: t.Idle.Duration,
			MaxHeaderBytes: l.MaxHeaderBytes, BaseContext: func(net.Listener) context.Context { return base },
			ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}, ln}
	}
	apiServer, stopWatch, err := s.apiServer(api, base, t, l)
	if err != nil {
		return err
	}
	defer stopWatch()
	if apiServer == nil {
		if s.wrapAPI != nil {
			api = s.wrapAPI(api)
		}
		apiServer = mk(s.Handler(), newRefusalListener(api, l.MaxHeaderBytes))
	}
	servers := []listenerServer{apiServer}
	if admin != nil {
		servers = append(servers, mk(s.AdminHandler(), admin))
	}
	errc := make(chan error, len(servers))
	for _, srv := range servers {
		go func() { errc <- srv.serve() }()
	}
	hctx, stopHealth := context.WithCancel(ctx)
	healthDone := make(chan struct{})
	go func() { s.Run(hctx); close(healthDone) }()
	defer func() { stopHealth(); <-healthDone }()
	s.log.Info("router serving", "api", api.Addr().String())

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.draining.Store(true)
	drain := s.serveConfig().Timeouts.Drain.Duration
	s.log.Info("draining", "deadline", drain)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	for _, srv := range servers {
		if e := srv.shutdown(dctx); e != nil {
			s.log.Warn("drain deadline passed; closing remaining connections", "err", e)
			srv.close()
		}
	}
	return err
}

// listenerServer is one listener's HTTP server as Serve drives it.
type listenerServer interface {
	// serve serves until shutdown (then it returns nil) or a listener
	// error.
	serve() error
	// shutdown stops accepting, closes idle connections and waits for the
	// others to finish, or for ctx (its error then).
	shutdown(ctx context.Context) error
	// close closes every connection left.
	close()
}

type stdServer struct {
	srv *http.Server
	ln  net.Listener
}

func (x stdServer) serve() error {
	if err := x.srv.Serve(x.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (x stdServer) shutdown(ctx context.Context) error { return x.srv.Shutdown(ctx) }
func (x stdServer) close()                             { _ = x.srv.Close() }
