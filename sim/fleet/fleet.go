package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rolter/rolter/adaptive"
	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/strategies"
)

// Oracle is the name of the perfect-knowledge router.
const Oracle = "oracle"

// Arrival says how requests are spread over router replicas.
type Arrival int

// Arrival modes.
const (
	// RoundRobinArrival sends request i to replica i mod R.
	RoundRobinArrival Arrival = iota
	// RandomArrival sends each request to a uniformly drawn replica.
	RandomArrival
)

// Config is one simulation run.
type Config struct {
	// Strategy is a strategies name, or Oracle.
	Strategy string
	Engines  int
	Routers  int
	Engine   engine.Config
	// GossipDelay is how old the engine state the replicas see is: queue
	// lengths, resident adapters, CPU-tier occupancy (the sidecars'
	// status messages).
	GossipDelay time.Duration
	// ResidencyDelay is how old the prefix residency the replicas see is
	// (the engines' KV events, batched by the sidecars); 0 takes
	// GossipDelay.
	ResidencyDelay time.Duration
	// PeerDelay is how late what one replica shares or publishes over the
	// mesh (learned records, in-flight counts, prefill sums) reaches the
	// others, on top of meshstate's publish cadence (PublishGap after a
	// change), which the replicas run themselves; 0 takes
	// DefaultPeerDelay.
	PeerDelay time.Duration
	// Rate rescales arrivals to this mean rate (requests/s); 0 keeps the
	// recorded times.
	Rate    float64
	Arrival Arrival
	Seed    uint64
	// Isolated turns the mesh between replicas off: they share engine
	// state only, no learned prefixes, session pins or in-flight counts
	// (the router before the mesh shared them).
	Isolated bool
	// Admission, when set, runs package admission in every replica (see
	// admit.go); nil: every request goes to its engine at once.
	Admission *admission.Config
	// AloneQueues keeps each replica's admission waiters out of its mesh
	// publications: every replica releases as if it were the only router
	// (the ablation of admission.Queue.Release's peer rule).
	AloneQueues bool
}

// DefaultPeerDelay is Config.PeerDelay's default: meshstate.PeerHop, the
// one-way router-to-router delay measured between real routers.
const DefaultPeerDelay = meshstate.PeerHop

// ErrConfig marks an unusable Config.
var ErrConfig = errors.New("fleet: bad config")

// Result is one run's measurements. Hit rate counts prompt tokens found
// in the GPU prefix cache at first admission over all prompt tokens.
type Result struct {
	Strategy string
	Routers  int
	Requests int
	Failed   int
	HitRate  float64
	TTFT     Percentiles
	E2E      Percentiles
	// Throughput is output tokens per second from the first arrival to the
	// last completion.
	Throughput float64
	// Imbalance is the most requests any engine served over the mean.
	Imbalance float64
	// PerEngine is the number of requests each engine served.
	PerEngine    []int
	PromptTokens int
	CachedTokens int
	Preemptions  int
	// Held is the time requests waited at their routers before their
	// picks, summed (meshstate's order of the first picks of an instant;
	// TTFT and E2E include it).
	Held     time.Duration
	Duration time.Duration
	// Timings are the served requests' engine accounts, by request index
	// (an unserved request's Engine is -1).
	Timings []Timing
	// Bands are the requests of each priority band (admission.Band order):
	// TTFT from the client's arrival (queueing included) over the served
	// ones, and how many were rejected (queue full) or expired (TTL).
	Bands [admission.NumBands]BandResult
}

// Timing is one request's account in a run: the engine that served it,
// when it reached the engine, its first and last token (from the start of
// the run) and the prompt tokens it found cached.
type Timing struct {
	Engine                      int
	Arrival, FirstToken, Finish time.Duration
	CachedTokens                int
}

// BandResult is one band's share of a run.
type BandResult struct {
	Requests, Served, Rejected, Expired int
	TTFT                                Percentiles
	// Wait is the time the served requests spent in a router's queue.
	Wait Percentiles
	// Admitted counts the requests admission let through; Overfull those
	// of them sent to an engine that every router's counts together
	// showed already saturated for the band they were admitted under
	// (what several routers sending into the same freed room causes).
	Admitted, Overfull int
}

// Percentiles of a latency distribution.
type Percentiles struct{ P50, P90, P99 time.Duration }

// vclock is the virtual clock the strategies read.
type vclock struct{ now *time.Duration }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c vclock) Now() time.Time { return epoch.Add(*c.now) }

type flight struct {
	router      int
	engine      int
	adapter     string
	queue       uint64 // strategies.QueueDepth at the pick: the load the replica's balancer saw
	prompt      int
	output      int
	uncached    int
	estUncached int // the router's estimate at pick: prompt − resident prefix in its view
	at          time.Duration
	first       time.Duration // -1 until the first token
	fin         time.Duration // completion time once done
	done        bool
}

type node struct {
	eng         *engine.Engine
	lag         *lagged
	outstanding []*flight
}

type replica struct {
	lb     strategies.LoadBalancer
	room   []bool // scratch of roomy
	stats  []*strategies.TargetStats
	loads  []uint64
	queued []uint64
	share  bool // exchanges learned records with the other replicas
	state  *meshstate.State
	next   int           // first shared record not yet delivered
	pubs   []publication // what it published, in time order
	// intents are its intent messages (meshstate.Intents), in time order;
	// resolve: the next publication withdraws the pending one.
	intents []intentMsg
	resolve bool
	pub     []meshstate.EngineLoad // scratch
}

type run struct {
	cfg      Config
	w        *Workload
	now      time.Duration
	engines  []*node
	routers  []*replica
	flights  []flight
	pending  []*flight // completed, End not yet reported
	done     []engineDone
	maxEnd   time.Duration
	oracleOn bool
	learned  []sharedRec // the mesh's shared records, in time order
	keys     map[string]int
	keyOf    []string
	nextPub  time.Duration // next publish slot of the replicas' mesh states
	firsts   []*flight     // first token produced, not yet seen by the router
	// Admission (admit.go): arrival at the replica and fate by request,
	// and the replicas' queues (nil when off).
	arrived []time.Duration
	fates   []fate
	adm     *admitState
	held    []heldPick // picks meshstate's order delays, in arrival order
	// waited is how long each request was held before its pick (nil
	// until one is): part of its TTFT, which the engine counts from the
	// pick.
	waited []time.Duration
}

type engineDone struct {
	f *flight
	c engine.Completion
}

func (r *run) viewTime() time.Duration { return r.now - r.cfg.GossipDelay }

// Run simulates w through the fleet cfg describes and returns its
// measurements. It honours ctx between arrivals.
func Run(ctx context.Context, cfg Config, w *Workload) (Result, error) {
	r, err := simulate(ctx, cfg, w)
	if err != nil {
		return Result{}, err
	}
	return r.result(), nil
}

// simulate is Run before the measurements are taken from the run.
func simulate(ctx context.Context, cfg Config, w *Workload) (*run, error) {
	if cfg.Engines <= 0 || cfg.Routers <= 0 || w == nil || w.Len() == 0 {
		return nil, fmt.Errorf("%w: need engines, routers and requests", ErrConfig)
	}
	if cfg.Strategy != Oracle && !strategies.Known(cfg.Strategy) {
		return nil, fmt.Errorf("%w: %w %q", ErrConfig, strategies.ErrUnknownStrategy, cfg.Strategy)
	}
	if cfg.GossipDelay < 0 || cfg.PeerDelay < 0 || cfg.ResidencyDelay < 0 {
		return nil, fmt.Errorf("%w: negative gossip delay", ErrConfig)
	}
	r := &run{cfg: cfg, w: w, oracleOn: cfg.Strategy == Oracle, flights: make([]flight, w.Len())}
	if r.cfg.PeerDelay == 0 {
		r.cfg.PeerDelay = DefaultPeerDelay
	}
	if r.cfg.ResidencyDelay == 0 {
		r.cfg.ResidencyDelay = r.cfg.GossipDelay
	}
	if r.oracleOn {
		r.cfg.GossipDelay, r.cfg.ResidencyDelay = 0, 0
	}
	for range cfg.Engines {
		r.engines = append(r.engines, &node{eng: engine.New(cfg.Engine), lag: &lagged{res: newResidency()}})
	}
	r.cfg.Engine = r.engines[0].eng.Config()
	if err := r.buildRouters(); err != nil {
		return nil, err
	}
	r.initAdmission()
	scale := 1.0
	if rec := w.RecordedRate(); cfg.Rate > 0 && rec > 0 {
		scale = rec / cfg.Rate
	}
	pick := newPicker(cfg.Seed)
	t0 := w.reqs[0].At
	for i := range w.reqs {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		at := time.Duration(float64(w.reqs[i].At-t0) * scale)
		r.admitUntil(at)
		r.stepTo(at)
		router := i % cfg.Routers
		if cfg.Arrival == RandomArrival {
			router = pick.IntN(cfg.Routers)
		}
		r.arrive(i, router)
	}
	if r.adm != nil {
		r.finishQueues()
	}
	for len(r.held) > 0 {
		next, _ := r.nextEvent(1 << 62)
		r.stepTo(next)
	}
	r.drain()
	return r, nil
}

func (r *run) buildRouters() error {
	n := r.cfg.Engines
	targets := make([]strategies.Target, n)
	r.keys = make(map[string]int, n)
	for i := range targets {
		key := engineKey(i)
		targets[i] = strategies.Target{ID: key, Provider: key,
			UpstreamModel: "fleet", Weight: 1, CostInPerMtok: 1, CostOutPerMtok: 1}
		r.keys[key] = i
		r.keyOf = append(r.keyOf, key)
	}
	for k := range r.cfg.Routers {
		rep := &replica{loads: make([]uint64, n), queued: make([]uint64, n),
			state: meshstate.New(gossip{r: r, k: k}, vclock{now: &r.now}.Now, meshstate.Options{})}
		if !r.oracleOn {
			tr := strategies.NewTracker()
			spec := strategies.Spec{
				Targets:   targets,
				Rand:      strategies.NewRand(r.cfg.Seed*1000003 + uint64(k) + 1),
				Clock:     vclock{now: &r.now},
				Tracker:   tr,
				Residency: view{r},
				Adapters:  view{r},
				Policy:    strategies.NewPolicyHolder(adaptive.DefaultPolicy()),
				MaxLoRAs:  r.cfg.Engine.MaxLoras,
			}
			if r.cfg.Engine.CPUTierBlocks > 0 {
				spec.Cache = view{r}
			}
			lb, err := strategies.Build(r.cfg.Strategy, spec)
			if err != nil {
				return fmt.Errorf("fleet: build %s: %w", r.cfg.Strategy, err)
			}
			rep.lb = lb
			rep.share = r.shares(lb)
			for _, t := range targets {
				rep.stats = append(rep.stats, tr.Target(t.ID))
			}
		}
		r.routers = append(r.routers, rep)
	}
	return nil
}

// advance runs every engine to t, records what they did, reports the
// completions that happened by t to the replicas that sent them, and
// brings the replicas' view to t − delay.
func (r *run) advance(t time.Duration) {
	r.now = t
	for i, n := range r.engines {
		r.collect(i, n.eng.AdvanceTo(t))
	}
	r.reportFirsts(t)
	r.reportDone(t)
	for _, n := range r.engines {
		if r.w.adapters || r.cfg.Engine.CPUTierBlocks > 0 {
			st := n.eng.Stats()
			s := sample{at: t, loras: st.ResidentLoras}
			if st.CPUTotalBlocks > 0 {
				s.occupancy = float64(st.CPUUsedBlocks) / float64(st.CPUTotalBlocks)
			}
			n.lag.samples = append(n.lag.samples, s)
		}
		n.lag.res.syncTo(r.now - r.cfg.ResidencyDelay)
	}
}

func (r *run) collect(e int, steps []engine.StepResult) {
	n := r.engines[e]
	for _, s := range steps {
		n.lag.res.record(s.End, s.Events)
		for _, o := range s.Outputs {
			if o.First {
				if f := r.flightOf(o.ID); f != nil {
					f.first = s.End
					if r.routers[f.router].lb != nil {
						r.firsts = append(r.firsts, f)
					}
				}
			}
		}
		for _, c := range s.Completed {
			f := r.flightOf(c.ID)
			if f == nil {
				continue
			}
			f.done, f.fin = true, c.Finish
			n.lag.finishes = append(n.lag.finishes, c.Finish)
			r.done = append(r.done, engineDone{f: f, c: c})
			r.pending = append(r.pending, f)
			r.maxEnd = max(r.maxEnd, c.Finish)
		}
	}
}

func (r *run) flightOf(id string) *flight {
	i, err := strconv.Atoi(id)
	if err != nil || i < 0 || i >= len(r.flights) {
		return nil
	}
	return &r.flights[i]
}

// reportFirsts takes off its router's queued prefill every attempt whose
// first token came by t (a step reported by AdvanceTo may end after t).
func (r *run) reportFirsts(t time.Duration) {
	r.firsts = slices.DeleteFunc(r.firsts, func(f *flight) bool {
		if f.first > t {
			return false
		}
		r.routers[f.router].stats[f.engine].PrefillDone(uint64(f.estUncached))
		r.changed(f.router, f.first)
		return true
	})
}

// reportDone ends, in completion order, the attempts that finished by t.
func (r *run) reportDone(t time.Duration) {
	if len(r.pending) == 0 {
		return
	}
	slices.SortStableFunc(r.pending, func(a, b *flight) int { return cmp.Compare(a.fin, b.fin) })
	k := 0
	for _, f := range r.pending {
		fin := f.fin
		if fin > t {
			break
		}
		k++
		if rep := r.routers[f.router]; rep.lb != nil {
			rep.stats[f.engine].End(strategies.Outcome{Success: true, Latency: fin - f.at, QueueDepth: f.queue,
				PromptTokens: f.prompt, At: epoch.Add(fin)})
			if c, ok := rep.lb.(strategies.Completer); ok {
				c.Served(f.engine)
			}
			r.changed(f.router, fin)
		}
		n := r.engines[f.engine]
		n.outstanding = slices.DeleteFunc(n.outstanding, func(x *flight) bool { return x == f })
	}
	r.pending = slices.Delete(r.pending, 0, k)
}

// route picks an engine for request i at replica k and submits it.
func (r *run) route(i, k int) {
	p := &r.w.reqs[i]
	rep := r.routers[k]
	f := &r.flights[i]
	*f = flight{router: k, adapter: p.Adapter, prompt: len(p.Tokens), output: p.MaxTokens, at: r.now, first: -1}
	var target int
	if r.oracleOn {
		target, f.uncached = r.oraclePick(p)
	} else {
		// As router/proxy.go builds them: own in-flight + the mesh's
		// load fold; own queued prefill + the other replicas' sums.
		for e := range r.engines {
			key := r.keyOf[e]
			q, _ := rep.state.Load(key)
			rep.loads[e] = rep.stats[e].InFlight() + q
			rep.queued[e] = rep.stats[e].QueuedPrefill() + rep.state.PeerPrefill(key)
		}
		rc := p.rc
		rc.QueuedPrefill = rep.queued
		if rep.share {
			r.deliver(k)
			rep.state.Recall(meshPool, rep.lb, r.keyOf, &rc)
		}
		t, ok := rep.lb.PickEligible(&rc, rep.loads, r.roomy(i, k))
		if !ok || t < 0 || t >= len(r.engines) {
			t = 0
		}
		target = t
		rep.state.Picked(epoch.Add(r.now))
		rep.lb.Observe(target, &rc)
		if rep.share {
			rep.state.Observed(meshPool, r.keyOf[target], &rc)
		}
		f.queue = strategies.QueueDepth(rep.loads, target)
		rep.stats[target].Begin()
		f.estUncached = r.estimateUncached(target, p)
		rep.stats[target].QueuePrefill(uint64(f.estUncached))
		r.changed(k, r.now)
	}
	n := r.engines[target]
	f.engine = target
	err := n.eng.Submit(engine.Request{ID: strconv.Itoa(i), Tokens: p.Tokens, MaxTokens: p.MaxTokens,
		Lora: p.Adapter, Arrival: r.now})
	if err != nil {
		f.done = true
		if rep.lb != nil {
			rep.stats[target].End(strategies.Outcome{Success: false, At: epoch.Add(r.now)})
			rep.stats[target].PrefillDone(uint64(f.estUncached))
			r.changed(k, r.now)
		}
		return
	}
	n.lag.submits = append(n.lag.submits, r.now)
	n.outstanding = append(n.outstanding, f)
	r.admitted(i)
}

// drain runs every engine dry and reports the remaining completions.
func (r *run) drain() {
	for i, n := range r.engines {
		for guard := 0; !n.eng.Idle() && guard < 1<<20; guard++ {
			r.collect(i, n.eng.AdvanceTo(n.eng.Now()+time.Hour))
		}
	}
	r.reportFirsts(r.maxEnd)
	r.reportDone(r.maxEnd)
}
