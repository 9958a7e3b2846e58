package router

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/strategies"
)

// snapshot is the immutable routing state built from one config. Requests
// load it once and use it to the end; Apply swaps in a new one.
type snapshot struct {
	version uint64
	cfg     *config.Config
	routes  map[string]*pool // by public model name
	groups  map[string]*pool // by group slug
	pins    map[string]*pool // by provider name ("provider/model")
	// offRoutes and offGroups hold the disabled routes' model names and
	// the disabled groups' slugs: they answer 404 as an unknown model does.
	offRoutes map[string]bool
	offGroups map[string]bool
	providers map[string]*provider
	keys      []apiKey
	models    []string // GET /v1/models ids, sorted
	// catalog is the model price catalog by upstream model.
	catalog map[string]config.ModelPrice
}

// price is what target t costs per million tokens in and out: its
// upstream model's catalog entry; for a passthrough member (no declared
// model) nothing, since the model it forwards is the caller's and unknown
// when the balancer is built (seed 000: an all-passthrough group is
// cost-neutral); otherwise its provider's own prices.
func (s *snapshot) price(t *target) (in, out float64) {
	if t.model == "" {
		return 0, 0
	}
	if m, ok := s.catalog[t.model]; ok {
		return m.PriceInPerMtok, m.PriceOutPerMtok
	}
	return t.provider.priceIn, t.provider.priceOut
}

// provider is one upstream endpoint as the snapshot sees it.
type provider struct {
	name       string
	apiBase    string
	base       *url.URL
	authHeader string // "Bearer …" when api_key_env is set; never logged
	priceIn    float64
	priceOut   float64
	up         *upstream
	// endpoints are the upstream URLs of inferencePaths, by path, parsed
	// (read-only: every request shares them).
	endpoints map[string]*url.URL
}

// target is one entry of a pool.
type target struct {
	provider *provider
	// model is the upstream model forwarded; "" for a passthrough member,
	// which forwards whatever model the caller asked for. quoted is model
	// as a JSON string (nil for a passthrough member), spliced into each
	// attempt's body as it is (request.bodyFor).
	model  string
	quoted []byte
	// label names the target in metrics: provider/model (or provider/*).
	label string
	stats *strategies.TargetStats
	// park is the target's 429 parking, shared with every pool listing
	// the same provider/model pair.
	park *parking
	// series caches the target's metric children (series.go).
	series *targetSeries
}

// parking returns the parking of the pair an attempt for requested uses
// on t: the target's own, or for a passthrough member the requested
// model's (nil when that model was never parked and create is false).
func (t *target) parking(requested string, create bool) *parking {
	if t.model != "" {
		return t.park
	}
	return t.park.forModel(requested, create)
}

// unavailable says why the target cannot take an attempt for requested at
// now ("" when it can): its provider/model pair parked, or its provider
// unhealthy or breaker-open.
func (t *target) unavailable(now time.Time, requested string) string {
	return t.unavailableAt(now.UnixNano(), requested)
}

// unavailableAt is unavailable at n, in Unix nanoseconds: a pick asks it
// of every target at one instant.
func (t *target) unavailableAt(n int64, requested string) string {
	if t.park.parkedAt(n) { // a declared target, or a passthrough member parked whole
		return "parked"
	}
	if t.model == "" { // a passthrough member: requested's own parking
		if p := t.park.forModel(requested, false); p != nil && p.parkedAt(n) {
			return "parked"
		}
	}
	return t.provider.up.unavailableAt(n)
}

// retryIn is how long until the target may be available again for
// requested (0: now or unknown).
func (t *target) retryIn(now time.Time, requested string) time.Duration {
	d := max(t.provider.up.retryIn(now), t.park.retryIn(now))
	if pk := t.parking(requested, false); pk != nil {
		d = max(d, pk.retryIn(now))
	}
	return d
}

// pool is a balancer over a fixed target list: a route, a provider group
// (shared by every group-slug/model address, seed 000) or a provider pin.
type pool struct {
	// key names the pool in metrics and allowlists: the route model,
	// "slug/*" for a group, "provider/*" for a pin.
	key      string
	strategy string
	lb       strategies.LoadBalancer // nil when the pool has no targets
	targets  []target
	// bases are the targets' provider api_base values, in target order.
	bases []string
	// adapter is true on group pools with a passthrough member: the
	// requested model is then the LoRA adapter (RouteContext.Adapter).
	adapter bool
	// specs and maxLoRAs are what lb was built from, to tell whether the
	// next snapshot can keep it.
	specs    []strategies.Target
	maxLoRAs int
	// series caches the pool's metric children (series.go).
	series *poolSeries
	// residency is the pool's KV residency source (nil: none); the proxy
	// reads it to estimate an attempt's uncached prompt tokens.
	residency strategies.Residency
	// resume continues streams broken after the first byte on another
	// target (resume.go).
	resume bool
	// reads is what of the prompt the pool's strategy reads beyond its
	// length and token ids (strategies.ReadsPromptDigest, ReadsPrompt).
	reads promptReads
	// readsLoads: the pool's strategy reads every target's load and
	// queued prefill in a pick (strategies.ReadsLoads).
	readsLoads bool
	// scratch recycles the per-target state of requests when the pool is
	// wider than an attempt's inline buffers (*targetScratch).
	scratch sync.Pool
}

// upstreamModel is the model forwarded to t for a request that asked for
// requested.
func (t *target) upstreamModel(requested string) string {
	if t.model == "" {
		return requested
	}
	return t.model
}

// resolved is a request's address resolved against a snapshot.
type resolved struct {
	pool      *pool
	requested string // the model a passthrough target forwards
	adapter   string
}

// resolve maps a public address to a pool: a route's model name, then
// "group-slug/model", then "provider-name/model".
func (s *snapshot) resolve(model string) (resolved, error) {
	if s.offRoutes[model] {
		return resolved{}, fmt.Errorf("%w: %q is disabled (GET /v1/models lists the addresses)", ErrUnknownModel, model)
	}
	if p, ok := s.routes[model]; ok {
		return resolved{pool: p, requested: model}, nil
	}
	if prefix, rest, ok := strings.Cut(model, "/"); ok && rest != "" {
		if s.offGroups[prefix] {
			return resolved{}, fmt.Errorf("%w: provider group %q is disabled (GET /v1/models lists the addresses)", ErrUnknownModel, prefix)
		}
		if p, ok := s.groups[prefix]; ok {
			r := resolved{pool: p, requested: rest}
			if p.adapter {
				r.adapter = rest
			}
			return r, nil
		}
		if p, ok := s.pins[prefix]; ok {
			return resolved{pool: p, requested: rest}, nil
		}
	}
	return resolved{}, fmt.Errorf("%w: %q (GET /v1/models lists the addresses)", ErrUnknownModel, model)
}

// builder carries what building a snapshot needs from the Server.
//
// prev is the running snapshot (nil before the first). A pool of the new
// snapshot with the same key, strategy, target list (identity and order,
// weights and prices) and sizing as its predecessor in prev keeps prev's
// balancer, so a config change elsewhere (a key, a policy PUT, another
// route) loses nothing the pool learned. A pool whose targets changed gets
// a new balancer that carries over what prev's learned keyed by target
// identity (strategies.Carrier).
type builder struct {
	prev     *snapshot
	tracker  *strategies.Tracker
	parks    *parkings
	rand     strategies.Rand
	clock    strategies.Clock
	policy   *strategies.PolicyHolder
	sources  SourceFactory
	getenv   func(string) string
	upstream func(name, apiBase string) *upstream
}

func (b *builder) build(cfg *config.Config, version uint64) (*snapshot, error) {
	s := &snapshot{
		version:   version,
		cfg:       cfg,
		routes:    make(map[string]*pool, len(cfg.Routes)),
		groups:    make(map[string]*pool, len(cfg.ProviderGroups)),
		pins:      make(map[string]*pool, len(cfg.Providers)),
		offRoutes: map[string]bool{},
		offGroups: map[string]bool{},
		catalog:   make(map[string]config.ModelPrice, len(cfg.Models)),
		providers: make(map[string]*provider, len(cfg.Providers)),
	}
	for _, m := range cfg.Models {
		s.catalog[m.Model] = m
	}
	for _, pc := range cfg.Providers {
		u, err := url.Parse(pc.APIBase)
		if err != nil {
			return nil, fmt.Errorf("router: provider %q: api_base: %w", pc.Name, err)
		}
		p := &provider{name: pc.Name, apiBase: pc.APIBase, base: u, priceIn: pc.PriceInPerMtok,
			priceOut: pc.PriceOutPerMtok, up: b.upstream(pc.Name, pc.APIBase)}
		if pc.APIKeyEnv != "" {
			if k := b.getenv(pc.APIKeyEnv); k != "" {
				p.authHeader = "Bearer " + k
			}
		}
		p.endpoints = make(map[string]*url.URL, len(inferencePaths))
		for _, path := range inferencePaths {
			eu, err := url.Parse(joinURL(p, path))
			if err != nil {
				return nil, fmt.Errorf("router: provider %q: %w", pc.Name, err)
			}
			p.endpoints[path] = eu
		}
		s.providers[pc.Name] = p
	}
	mkTarget := func(t config.Target, passthrough bool) (target, error) {
		p, ok := s.providers[t.Provider]
		if !ok {
			return target{}, fmt.Errorf("no provider named %q", t.Provider)
		}
		m := t.Model
		if passthrough {
			m = ""
		}
		label := p.name + "/" + m
		var quoted []byte
		if m == "" {
			label = p.name + "/*"
		} else {
			quoted = quotedJSON(m)
		}
		return target{provider: p, model: m, quoted: quoted, label: label, stats: b.tracker.Target(label),
			park: b.parks.get(label + "\x00" + p.apiBase), series: &targetSeries{}}, nil
	}
	for _, rc := range cfg.Routes {
		if !rc.IsEnabled() {
			s.offRoutes[rc.Model] = true
			continue
		}
		p := &pool{key: rc.Model, strategy: rc.Strategy, series: &poolSeries{}, resume: cfg.Retry.Resumes(rc.ResumeStreams)}
		for _, tc := range rc.Targets {
			t, err := mkTarget(tc, false)
			if err != nil {
				return nil, fmt.Errorf("router: route %q: %w", rc.Model, err)
			}
			p.targets = append(p.targets, t)
		}
		if err := b.balance(s, p, weights(rc.Targets), rc.MaxLoRAs, b.prevPool(func(sn *snapshot) *pool { return sn.routes[rc.Model] })); err != nil {
			return nil, fmt.Errorf("router: route %q: %w", rc.Model, err)
		}
		s.routes[rc.Model] = p
		s.models = append(s.models, rc.Model)
	}
	for _, gc := range cfg.ProviderGroups {
		if !gc.IsEnabled() {
			s.offGroups[gc.Slug] = true
			continue
		}
		p := &pool{key: gc.Slug + "/*", strategy: gc.Strategy, series: &poolSeries{}, resume: cfg.Retry.Resumes(gc.ResumeStreams)}
		declared := map[string]bool{}
		for _, mc := range gc.Members {
			t, err := mkTarget(mc, mc.Model == "")
			if err != nil {
				return nil, fmt.Errorf("router: provider group %q: %w", gc.Slug, err)
			}
			if t.model == "" {
				p.adapter = true
			} else {
				declared[t.model] = true
			}
			p.targets = append(p.targets, t)
		}
		if err := b.balance(s, p, weights(gc.Members), gc.MaxLoRAs, b.prevPool(func(sn *snapshot) *pool { return sn.groups[gc.Slug] })); err != nil {
			return nil, fmt.Errorf("router: provider group %q: %w", gc.Slug, err)
		}
		s.groups[gc.Slug] = p
		if p.adapter {
			s.models = append(s.models, gc.Slug+"/*")
		}
		for m := range declared {
			s.models = append(s.models, gc.Slug+"/"+m)
		}
	}
	for _, pc := range cfg.Providers {
		t, _ := mkTarget(config.Target{Provider: pc.Name, Weight: 1}, true)
		p := &pool{key: pc.Name + "/*", strategy: "round_robin", targets: []target{t}, series: &poolSeries{},
			resume: cfg.Retry.Resumes(nil)}
		if err := b.balance(s, p, []int{1}, 0, b.prevPool(func(sn *snapshot) *pool { return sn.pins[pc.Name] })); err != nil {
			return nil, fmt.Errorf("router: provider %q: %w", pc.Name, err)
		}
		s.pins[pc.Name] = p
	}
	sort.Strings(s.models)
	for _, kc := range cfg.Keys {
		k := apiKey{name: kc.Name, models: kc.Models, fairness: kc.FairnessHeader, maxBand: admission.Standard}
		if b, ok := admission.ParseBand(kc.MaxPriority); ok {
			k.maxBand = b
		}
		if len(kc.Providers) > 0 {
			k.providers = make(map[string]bool, len(kc.Providers))
			for _, p := range kc.Providers {
				k.providers[p] = true
			}
		}
		if _, err := hex.Decode(k.sum[:], []byte(kc.SHA256)); err != nil {
			return nil, fmt.Errorf("router: key %q: sha256: %w", kc.Name, err)
		}
		s.keys = append(s.keys, k)
	}
	return s, nil
}

// carryMapping maps each target of p to the same target of prev (by
// identity, strategies.Mapping), or -1. A provider pointed at a new
// api_base is another engine, so what the old one learned is not carried
// to it (as upstream state is keyed by name and api_base).
func carryMapping(prev, p *pool) []int {
	from := strategies.Mapping(prev.specs, p.specs)
	for j, i := range from {
		if i >= 0 && prev.bases[i] != p.bases[j] {
			from[j] = -1
		}
	}
	return from
}

func weights(ts []config.Target) []int {
	w := make([]int, len(ts))
	for i, t := range ts {
		w[i] = max(t.Weight, 1)
	}
	return w
}

// prevPool returns the running snapshot's pool that get finds (nil: none).
func (b *builder) prevPool(get func(*snapshot) *pool) *pool {
	if b.prev == nil {
		return nil
	}
	return get(b.prev)
}

// balance builds p's balancer once for the snapshot's life, or keeps
// prev's when nothing it was built from changed. A pool with no targets
// (a discover route the mesh has not filled) has none.
func (b *builder) balance(s *snapshot, p *pool, w []int, maxLoRAs int, prev *pool) error {
	p.reads = promptReads{digest: strategies.ReadsPromptDigest(p.strategy), text: strategies.ReadsPrompt(p.strategy)}
	p.readsLoads = strategies.ReadsLoads(p.strategy)
	if len(p.targets) == 0 {
		return nil
	}
	spec := strategies.Spec{
		Targets: make([]strategies.Target, len(p.targets)),
		Stats:   make([]*strategies.TargetStats, len(p.targets)),
		Rand:    b.rand, Clock: b.clock, Tracker: b.tracker, Policy: b.policy,
		MaxLoRAs: maxLoRAs,
	}
	bases := make([]string, len(p.targets))
	for i := range p.targets {
		t := &p.targets[i]
		in, out := s.price(t)
		spec.Targets[i] = strategies.Target{ID: t.label, Provider: t.provider.name, UpstreamModel: t.model, Weight: w[i],
			CostInPerMtok: in, CostOutPerMtok: out}
		spec.Stats[i] = t.stats
		bases[i] = t.provider.apiBase
	}
	p.bases = bases
	p.specs, p.maxLoRAs = spec.Targets, maxLoRAs
	if prev != nil && prev.lb != nil && prev.strategy == p.strategy && prev.maxLoRAs == maxLoRAs &&
		strategies.SameBalancer(prev.specs, p.specs) && slices.Equal(prev.bases, p.bases) {
		p.lb = prev.lb
		return nil
	}
	if b.sources != nil {
		spec.Residency, spec.Cache, spec.Adapters = b.sources.Sources(bases)
		p.residency = spec.Residency
	}
	lb, err := strategies.Build(p.strategy, spec)
	if err != nil {
		return err
	}
	if c, ok := lb.(strategies.Carrier); ok && prev != nil && prev.lb != nil {
		c.CarryOver(prev.lb, carryMapping(prev, p))
	}
	p.lb = lb
	return nil
}
