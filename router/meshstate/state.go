package meshstate

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rolter/rolter/strategies"
)

// Rules of the mesh: how long a learned record lives, how many a router
// keeps, how soon it publishes its per-engine counts, and how long a pick
// may wait for the other routers' picks of the same instant.
const (
	// Learned is the lifetime of a shared prefix observation or session
	// pin, and the longest a peer may ask for.
	Learned = 10 * time.Minute
	// MaxLearned bounds the learned table and the dedup table of what was
	// already shared: a full table is cleared of expired entries, then of
	// everything (records are hints; losing them only costs affinity).
	MaxLearned = 1 << 16
	// PublishGap is the coalescing window of this router's per-engine
	// counts: a change (a pick, a first token, an end) goes out PublishGap
	// after it happened, together with every change made in the meantime.
	// It bounds a router's load messages to one per PublishGap per peer.
	PublishGap = 2 * time.Millisecond
	// LearnedGap batches the learned records this router shares: they go
	// to the other routers together every LearnedGap (a record costs
	// bytes, not urgency: it matters for the next request of its prefix
	// or session, seconds away). `rolter router` sets cluster/mesh's
	// RouterConfig.LearnedInterval from it.
	LearnedGap = 50 * time.Millisecond
	// Heartbeat is the longest time between two publications, changed or
	// not; the transport expires a peer's counts after a few heartbeats
	// without one.
	Heartbeat = 250 * time.Millisecond
	// PeerHop is the one-way delay of a publication from one router to
	// another beyond PublishGap (cluster/mesh's direct UDP send, its MAC,
	// the receiver's decode): the median measured across three `rolter
	// router` processes on loopback with rolter_mesh_peer_load_age_seconds
	// (BENCHMARKS.md §1; its tail on a loaded machine is far longer). The
	// fleet simulator delays peer publications by it.
	PeerHop = 2 * time.Millisecond
	// MaxHold is the longest the hold after this router's own pick delays
	// the next (on a transport without intents), and the ordering's bound
	// per lower-ranked router (IntentBound): one publication of the other
	// routers' picks of the same instant, PublishGap to go out and PeerHop
	// to arrive.
	MaxHold = PublishGap + PeerHop
)

// Kind says what a learned record means.
type Kind uint8

// Kinds of learned records.
const (
	// Prefix: a prompt prefix (Record.Key, strategies.AppendPrefixHashes)
	// was routed to Record.Target.
	Prefix Kind = 1
	// Pin: a session (Record.Key, strategies.SessionHash) is pinned to
	// Record.Target.
	Pin Kind = 2
)

// Record is one learned record on the wire.
type Record struct {
	Kind   Kind
	Pool   string // the route key both ends hash with
	Target string // engine key
	Key    uint64
	TTL    time.Duration
	// At is when the record arrived; zero means now.
	At time.Time
}

// EngineLoad is one engine's entry in this router's publication.
type EngineLoad struct {
	Engine   string // engine key
	Inflight uint64 // requests in flight from this router
	// Prefill is the prompt tokens of this router's requests on the engine
	// still waiting for a first token, minus the prefix resident when each
	// was picked.
	Prefill uint64
	// Waiting is this router's admission waiters by band (indexed as
	// package admission's Band: sheddable, standard, critical) for the
	// pools the engine serves: what the other routers' releases yield to
	// (PoolWaiting).
	Waiting [3]uint64
}

// Remote is what the transport knows of one engine beyond this router.
type Remote struct {
	// Queue is the engine's running + waiting as its sidecar last reported
	// it; QueueOK is false when no fresh report exists.
	Queue   uint64
	QueueOK bool
	// Inflight and Prefill are Σ over the other routers of their latest
	// unexpired EngineLoad for the engine; PeersOK is false when none has
	// one. (Nothing here says how old they are: a transport would read
	// its clock for that on every lookup, per target per pick.)
	Inflight, Prefill uint64
	// Waiting is Σ over the other routers of their EngineLoad.Waiting.
	Waiting [3]uint64
	PeersOK bool
}

// Transport is the gossip the mesh state rides on. cluster/mesh's View
// implements it for real routers, the fleet simulator over virtual time.
// Share and Publish are called from request goroutines and the publish
// loop; they must not block (drop and count instead), and Publish must not
// keep loads past the call. changed is when the oldest change the
// publication carries was made (zero for a heartbeat that carries none):
// the receiver's measure of how stale it is. Engine is called on the
// request hot path, once per target per pick: it must read in-process
// state only and not allocate. Records other routers share are handed to
// State.File by whoever receives them.
type Transport interface {
	Share(r Record)
	Publish(loads []EngineLoad, changed time.Time)
	Engine(key string) (Remote, bool)
}

// PeerNews is an optional Transport capability, type-asserted, that lets
// a held pick (Ready) end early: PeerPublished is when the newest
// publication of another router received here was made (on the sender's
// clock; zero before any), and PeerNews returns a channel closed when the
// next message of another router (a publication or an intent) arrives. Neither
// may block; the request path calls PeerPublished once per pick.
type PeerNews interface {
	PeerPublished() time.Time
	PeerNews() <-chan struct{}
}

// Inventory is an optional Transport capability, type-asserted: the
// routers of the mesh. live is how many are in it now, this one included;
// rank is this router's position among them (0 ≤ rank < live) in an order
// every router agrees on (cluster/mesh's router members by node id). The
// state reads it when it is built and then at most every Heartbeat from
// Tick, never on the request path, so it may allocate.
type Inventory interface {
	Routers() (live, rank int)
}

// The balancers' mesh hooks (package strategies), type-asserted.
type prefixImporter interface {
	ObservePrefixRemote(target int, prefix string)
}
type sessionImporter interface {
	PinSession(key string, target int, at time.Time)
}

// Shares reports whether lb learns from the mesh at all (has a hook).
func Shares(lb strategies.LoadBalancer) bool {
	_, p := lb.(prefixImporter)
	_, s := lb.(sessionImporter)
	return p || s
}

// State is one router's end of the mesh. It is safe for concurrent use.
type State struct {
	tr  Transport
	now func() time.Time
	key func(string) string

	seed maphash.Seed
	// learned counts records by kind and fate: "received" from other
	// routers, "imported" into a balancer, "shared" with the others.
	learned *prometheus.CounterVec

	mu    sync.Mutex
	table map[uint64]entry  // key → where (records other routers shared)
	sent  map[uint64]string // (kind, pool, key) hash → target shared or received
	any   atomic.Bool       // table not empty: Recall's lock-free early out

	pubMu     sync.Mutex
	own       atomic.Pointer[map[string]uint64] // engine → in-flight last published
	last      map[string]EngineLoad             // last publication, by engine
	lastAt    time.Time
	pending   time.Time // the oldest change not yet published; zero: none
	scratch   []EngineLoad
	published atomic.Uint64

	lastPick atomic.Int64 // unix nanos of this router's last pick (Picked), 0 before one
	held     *prometheus.HistogramVec
	// The order of first picks (order.go), under pubMu: this router's
	// pending intent (zero: none), how many requests wait on it, and
	// whether the next publication is a pick's that follows it (due at
	// once).
	intentAt       time.Time
	intentWaiters  int
	urgent         bool
	intentsSent    atomic.Uint64
	intentTimeouts prometheus.Counter
	peerMu         sync.Mutex // Ready's scratch of the other routers' picks
	peerBuf        []PeerPick

	// The router inventory as last read (Inventory): live routers and
	// this one's rank, packed live<<32 | rank; invAt is when.
	inv   atomic.Uint64
	invAt time.Time
}

type entry struct {
	target      string
	at, expires time.Time
}

// Options tune a State. The zero value is usable.
type Options struct {
	// EngineKey maps the target names callers pass (a provider's api_base
	// in the router) to the engine keys the mesh speaks; nil: identity. It
	// runs on the hot path: it must be fast and should not allocate.
	EngineKey func(string) string
}

// New returns the mesh state of one router over tr, reading time from now.
func New(tr Transport, now func() time.Time, o Options) *State {
	key := o.EngineKey
	if key == nil {
		key = func(s string) string { return s }
	}
	s := &State{tr: tr, now: now, key: key, seed: maphash.MakeSeed(),
		table: map[uint64]entry{}, sent: map[uint64]string{}, last: map[string]EngineLoad{},
		learned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rolter_mesh_learned_records_total",
			Help: "Prefix observations and session pins shared between routers, by kind and what happened to them " +
				"(shared: sent to the other routers; received: from them; imported: into a balancer for a request)."},
			[]string{"kind", "event"}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rolter_mesh_pick_hold_seconds",
			Help: "How long picks waited for the other routers' picks of the same instant, by reason: intent " +
				"(a lower-ranked router's pick of the instant), instant (the other routers' picks after this " +
				"router's own); picks that did not wait are not counted.",
			Buckets: []float64{.0001, .00025, .0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03}},
			[]string{"reason"}),
		intentTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "rolter_mesh_intent_timeouts_total",
			Help: "Picks whose wait for a lower-ranked router's pick of the same instant ended on its bound " +
				"(the peer's pick did not arrive in time), not on the pick."})}
	empty := map[string]uint64{}
	s.own.Store(&empty)
	s.inv.Store(1 << 32)
	s.readInventory(now())
	return s
}

// readInventory refreshes the router inventory from the transport.
func (s *State) readInventory(now time.Time) {
	s.invAt = now
	inv, ok := s.tr.(Inventory)
	if !ok {
		return
	}
	live, rank := inv.Routers()
	live = max(live, 1)
	rank = min(max(rank, 0), live-1)
	s.inv.Store(uint64(live)<<32 | uint64(rank))
}

// Routers returns how many routers the mesh has (this one included) and
// this router's rank among them, as the transport's Inventory last said
// (1, 0 without one): the rank orders the first picks of an instant
// (Arrive, Ready); admission reads the count. It does not allocate.
func (s *State) Routers() (live, rank int) {
	v := s.inv.Load()
	return int(v >> 32), int(v & (1<<32 - 1))
}

// Collector returns the state's metrics for a registry.
func (s *State) Collector() prometheus.Collector {
	return collectors{s.learned, s.held, s.intentTimeouts, intentCounts{s}}
}

type collectors []prometheus.Collector

var descWindow = prometheus.NewDesc("rolter_mesh_intent_window_seconds",
	"The order of first picks' window now: how long a pick listens for a lower-ranked router's intent, and "+
		"the wait allowed per lower rank (4 ms, or the measured one-way delay of the other routers' messages + 2 ms).",
	nil, nil)

var descIntents = prometheus.NewDesc("rolter_mesh_intents_total",
	"Intents (a pick pending, announced for the order of the first picks of an instant): sent by this router, "+
		"received from the others.", []string{"event"}, nil)

// intentCounts exports the intents sent and, when the transport counts
// them (IntentsReceived), received.
type intentCounts struct{ s *State }

func (c intentCounts) Describe(ch chan<- *prometheus.Desc) { ch <- descIntents; ch <- descWindow }

func (c intentCounts) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descIntents, prometheus.CounterValue, float64(c.s.intentsSent.Load()), "sent")
	if r, ok := c.s.tr.(IntentsReceived); ok {
		ch <- prometheus.MustNewConstMetric(descIntents, prometheus.CounterValue, float64(r.IntentsReceived()), "received")
	}
	ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, c.s.window().Seconds())
}

func (c collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c {
		x.Describe(ch)
	}
}

func (c collectors) Collect(ch chan<- prometheus.Metric) {
	for _, x := range c {
		x.Collect(ch)
	}
}

// Picked records that this router picked an engine at now (see Ready):
// a pick that follows this router's intent is published at once. It does
// not allocate.
func (s *State) Picked(now time.Time) {
	s.lastPick.Store(now.UnixNano())
	s.picked(now)
}

// holdAfter is the hold of a pick after this router's own pick at last
// (unix nanos), on a transport without intents: the other routers' picks
// of the same instant reach this router first (routers that pick at one
// instant on one picture all see the same emptiest engine). It is nonzero
// when the mesh has other routers, this router picked within MaxHold and
// no publication of another router made since that pick has arrived
// (PeerNews; without it the hold runs its course): then until that
// pick's MaxHold has passed. A request is held once, with every request
// that arrives during the same hold, and all of them go when it ends: a
// steady stream is delayed by at most MaxHold, never throttled.
func (s *State) holdAfter(last int64, now time.Time) time.Duration {
	if live, _ := s.Routers(); live <= 1 || last == 0 {
		return 0
	}
	d := time.Unix(0, last).Add(MaxHold).Sub(now)
	if d <= 0 {
		return 0
	}
	if pn, ok := s.tr.(PeerNews); ok {
		if p := pn.PeerPublished(); !p.IsZero() && p.UnixNano() > last {
			return 0
		}
	}
	return d
}

func kindLabel(k Kind) string {
	if k == Pin {
		return "session_pin"
	}
	return "prefix"
}

func (s *State) hash(kind Kind, pool string, k uint64) uint64 {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteByte(byte(kind))
	h.WriteString(pool)
	h.WriteByte(0)
	var b [8]byte
	for i := range b {
		b[i] = byte(k >> (8 * i))
	}
	h.Write(b[:])
	return h.Sum64()
}

// Recall imports into lb what other routers shared about rc's prompt
// prefixes and session. targets are the pool's targets in target order
// (mapped through Options.EngineKey). Each filed record is handed over once and then dropped (the
// balancer holds it from then on).
func (s *State) Recall(pool string, lb strategies.LoadBalancer, targets []string, rc *strategies.RouteContext) {
	if !s.any.Load() {
		return
	}
	pi, okP := lb.(prefixImporter)
	si, okS := lb.(sessionImporter)
	if (!okP || rc.Prompt == "") && (!okS || rc.SessionKey == "") {
		return
	}
	// Hash outside the lock: prompts can be long.
	var buf [32]strategies.PrefixHash
	var hs []strategies.PrefixHash
	if okP && rc.Prompt != "" {
		hs = strategies.AppendPrefixHashes(buf[:0], pool, rc.Prompt)
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ph := range hs {
		if e, ok := s.table[ph.Hash]; ok {
			delete(s.table, ph.Hash)
			if i := s.index(targets, e.target); i >= 0 && now.Before(e.expires) {
				pi.ObservePrefixRemote(i, rc.Prompt[:ph.Cut])
				s.learned.WithLabelValues("prefix", "imported").Inc()
			}
		}
	}
	if okS && rc.SessionKey != "" {
		h := strategies.SessionHash(pool, rc.SessionKey)
		if e, ok := s.table[h]; ok {
			delete(s.table, h)
			if i := s.index(targets, e.target); i >= 0 && now.Before(e.expires) {
				si.PinSession(rc.SessionKey, i, e.at)
				s.learned.WithLabelValues("session_pin", "imported").Inc()
			}
		}
	}
	s.any.Store(len(s.table) > 0)
}

func (s *State) index(targets []string, target string) int {
	for i, t := range targets {
		if s.key(t) == target {
			return i
		}
	}
	return -1
}

// Observed shares rc's prefixes and session pin on target with the other
// routers, each (key, target) pair once.
func (s *State) Observed(pool, target string, rc *strategies.RouteContext) {
	if rc.Prompt == "" && rc.SessionKey == "" {
		return
	}
	target = s.key(target)
	// Every record of the request is hashed first, then de-duplicated
	// under one lock (not one per prefix), then shared outside it.
	type pending struct {
		kind          Kind
		key, local    uint64
		alreadyShared bool
	}
	var buf [33]pending
	recs := buf[:0]
	if rc.Prompt != "" {
		var hs [32]strategies.PrefixHash
		for _, ph := range strategies.AppendPrefixHashes(hs[:0], pool, rc.Prompt) {
			recs = append(recs, pending{kind: Prefix, key: ph.Hash})
		}
	}
	if rc.SessionKey != "" {
		recs = append(recs, pending{kind: Pin, key: strategies.SessionHash(pool, rc.SessionKey)})
	}
	for i := range recs {
		recs[i].local = s.hash(recs[i].kind, pool, recs[i].key)
	}
	s.mu.Lock()
	for i := range recs {
		r := &recs[i]
		if r.alreadyShared = s.sent[r.local] == target; !r.alreadyShared {
			if len(s.sent) >= MaxLearned {
				clear(s.sent)
			}
			s.sent[r.local] = target
		}
	}
	s.mu.Unlock()
	for _, r := range recs {
		if !r.alreadyShared {
			s.tr.Share(Record{Kind: r.kind, Pool: pool, Target: target, Key: r.key, TTL: Learned})
			s.learned.WithLabelValues(kindLabel(r.kind), "shared").Inc()
		}
	}
}

// File files a record another router shared (newest per key wins).
func (s *State) File(r Record) {
	s.learned.WithLabelValues(kindLabel(r.Kind), "received").Inc()
	at := r.At
	if at.IsZero() {
		at = s.now()
	}
	ttl := r.TTL
	if ttl <= 0 || ttl > Learned {
		ttl = Learned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.table) >= MaxLearned {
		for k, e := range s.table {
			if !at.Before(e.expires) {
				delete(s.table, k)
			}
		}
		if len(s.table) >= MaxLearned {
			clear(s.table)
		}
	}
	s.table[r.Key] = entry{target: r.Target, at: at, expires: at.Add(ttl)}
	s.any.Store(true)
	// What another router shares, this one need not share back.
	if len(s.sent) >= MaxLearned {
		clear(s.sent)
	}
	s.sent[s.hash(r.Kind, r.Pool, r.Key)] = r.Target
}

// Load is the load a strategy should see on the engine beyond this
// router's own in-flight, which the caller adds: the engine's running +
// waiting as its sidecar reported it and Σ of the routers' in-flight are
// two estimates of the same requests (adding them would count every other
// router's requests twice), so the engine's total is the larger, less
// this router's own in-flight as last published: max(queue − own, Σ
// others). ok is false when the mesh knows neither. It does not allocate.
func (s *State) Load(engine string) (uint64, bool) {
	engine = s.key(engine)
	r, ok := s.tr.Engine(engine)
	if !ok || (!r.QueueOK && !r.PeersOK) {
		return 0, false
	}
	var queue, others int64
	if r.QueueOK {
		queue = int64(r.Queue) - int64((*s.own.Load())[engine])
	}
	if r.PeersOK {
		others = int64(r.Inflight)
	}
	return uint64(max(queue, others, 0)), true
}

// PeerInflight is Σ over the other routers of the requests they last
// published as in flight on the engine (0 when none did): fresher than
// the engine's own queue report, which admission needs (a slot freed on
// the engine shows here within a publish gap plus the gossip delay). It
// does not allocate.
func (s *State) PeerInflight(engine string) uint64 {
	r, ok := s.tr.Engine(s.key(engine))
	if !ok || !r.PeersOK {
		return 0
	}
	return r.Inflight
}

// PeerPrefill is Σ over the other routers of the prefill tokens they last
// published as queued on the engine (0 when none did). The router adds
// its own sum (strategies.TargetStats.QueuedPrefill) for
// RouteContext.QueuedPrefill. It does not allocate.
func (s *State) PeerPrefill(engine string) uint64 {
	r, ok := s.tr.Engine(s.key(engine))
	if !ok || !r.PeersOK {
		return 0
	}
	return r.Prefill
}

// Changed records that this router's per-engine counts changed at now
// (a pick, a first token, an end): Tick publishes them once PublishGap
// has passed since the oldest change not yet published. It does not
// allocate.
func (s *State) Changed(now time.Time) {
	s.pubMu.Lock()
	if s.pending.IsZero() || now.Before(s.pending) {
		s.pending = now
	}
	s.pubMu.Unlock()
}

// Due reports when the changes recorded so far are to be published
// (the oldest's time + PublishGap); ok is false when none waits.
func (s *State) Due() (at time.Time, ok bool) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if s.pending.IsZero() {
		return time.Time{}, false
	}
	if s.urgent {
		return s.pending, true
	}
	return s.pending.Add(PublishGap), true
}

// PoolWaiting is the other routers' admission waiters by band for a pool
// whose targets are engines (names as callers pass them): per band, the
// largest Remote.Waiting over the engines. Every router publishes a pool's
// waiters on each of the pool's engines, so for engines that serve one
// pool this is the pool's count exactly; where pools share an engine it
// counts the busier pool. It does not allocate.
func (s *State) PoolWaiting(engines []string) (w [3]uint64) {
	for _, e := range engines {
		r, ok := s.tr.Engine(s.key(e))
		if !ok || !r.PeersOK {
			continue
		}
		for b := range w {
			w[b] = max(w[b], r.Waiting[b])
		}
	}
	return w
}

// Tick publishes loads (this router's per-engine counts and sums at now)
// when they differ from the last publication and PublishGap has passed
// since the oldest change not yet published (Changed, or this Tick when
// nobody said), or when Heartbeat has passed since the last publication.
// A change undone before it was due (a pick whose attempt failed at once)
// is dropped. loads is read, not kept. It reports whether it published.
// It also rereads the router inventory (Inventory) once Heartbeat has
// passed since the last read.
func (s *State) Tick(now time.Time, loads []EngineLoad) bool {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if now.Sub(s.invAt) >= Heartbeat {
		s.readInventory(now)
	}
	changed := len(loads) != len(s.last)
	for _, l := range loads {
		if p, ok := s.last[l.Engine]; !ok || p != l {
			changed = true
			break
		}
	}
	switch {
	case !changed:
		s.pending = time.Time{}
	case s.pending.IsZero():
		s.pending = now
	}
	beat := now.Sub(s.lastAt) >= Heartbeat
	// A pick that follows this router's intent goes out at once.
	due := s.urgent || changed && now.Sub(s.pending) >= PublishGap
	if !beat && !due {
		return false
	}
	s.resolveLocked()
	clear(s.last)
	own := make(map[string]uint64, len(loads))
	for _, l := range loads {
		s.last[l.Engine] = l
		own[l.Engine] = l.Inflight
	}
	s.own.Store(&own)
	s.lastAt = now
	since := s.pending
	s.pending = time.Time{}
	s.scratch = append(s.scratch[:0], loads...)
	s.tr.Publish(s.scratch, since)
	s.published.Add(1)
	return true
}

// Publications returns how many times Tick published.
func (s *State) Publications() uint64 { return s.published.Load() }

// Run is the router's publish loop, until ctx ends: each signal on
// changes (the router's counts changed; see strategies.Tracker.Changes)
// is a Changed, and Tick runs with collect's loads when that change is
// due (PublishGap later), and every Heartbeat/5 besides (the heartbeat,
// and any change nobody signalled). The simulator calls Changed and Tick
// itself.
func (s *State) Run(ctx context.Context, collect func() []EngineLoad, changes <-chan struct{}) {
	beat := time.NewTicker(Heartbeat / 5)
	defer beat.Stop()
	due := time.NewTimer(time.Hour)
	due.Stop()
	armed := false
	arm := func() {
		if at, ok := s.Due(); ok && !armed {
			due.Reset(max(at.Sub(s.now()), 0))
			armed = true
		}
	}
	for {
		select {
		case <-ctx.Done():
			due.Stop()
			return
		case <-changes:
			s.Changed(s.now())
			arm()
		case <-due.C:
			armed = false
			s.Tick(s.now(), collect())
			arm()
		case <-beat.C:
			s.Tick(s.now(), collect())
			arm()
		}
	}
}
