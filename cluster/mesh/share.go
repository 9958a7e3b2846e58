package mesh

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxRouterVersions bounds the per-router config_version table.
const maxRouterVersions = 1024

// routerShare is what a router tells the other routers: its in-flight count
// per engine (so replicas do not herd) and learned records (prefix
// observations, session pins). Both go by direct UDP to each router: only
// routers need them, and the epidemic queue would push them through every
// sidecar too.
type routerShare struct {
	c    *core
	view *View
	cfg  RouterConfig

	mu       sync.Mutex
	inflight map[string]Load // latest published own loads
	changed  time.Time       // oldest change not yet sent (zero: a repeat is due)
	sent     map[string]Load // what the other routers were last told, non-zero only
	fullAt   time.Time       // last send of every non-zero load
	kick     chan struct{}   // a publication waits to be sent
	outbox   []Learned
	version  uint64            // config_version this router has applied
	versions map[string]uint64 // config_version each other router reported
	// This router's latest intent (zero: none yet), its rank, whether it
	// is still pending, and whether a change of it waits to be sent
	// (Intend); what each other router's newest message said of its own
	// (peers).
	intent        time.Time
	intentRank    int
	intentPending bool
	intentDirty   bool
	resolve       bool // the next PublishLoads resolves the intent
	peers         map[string]peerIntent
	intentsIn     atomic.Uint64
	// delay estimates the one-way delay of the other routers' messages
	// (nanos): each new pending intent's age on arrival moves it, half
	// the way up, a sixteenth down.
	delay atomic.Int64

	inbox chan Learned

	// What arrives from the other routers' load messages: the newest
	// send time among them (unix nanos, sender's clock), a channel closed
	// and replaced at each arrival, and the age of each change on arrival.
	peerSent atomic.Int64
	news     atomic.Pointer[chan struct{}]
	age      prometheus.Histogram
}

func newRouterShare(c *core, view *View, cfg RouterConfig) *routerShare {
	cfg.defaults()
	s := &routerShare{c: c, view: view, cfg: cfg, inflight: map[string]Load{}, sent: map[string]Load{}, versions: map[string]uint64{},
		peers: map[string]peerIntent{},
		kick:  make(chan struct{}, 1), inbox: make(chan Learned, cfg.LearnedBuffer),
		age: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rolter_mesh_peer_load_age_seconds",
			Help: "Age of another router's load change when its message reached this router: from the change " +
				"(a pick, first token or end there) to its arrival here, on the sender's clock against this one's.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0015, .002, .003, .004, .005, .0075, .01, .025, .05, .1, .25}})}
	ch := make(chan struct{})
	s.news.Store(&ch)
	return s
}

// Load is one router's load on one engine, as routers gossip it.
type Load struct {
	Inflight uint64 // requests in flight
	// Prefill is the prompt tokens of those that have no first token yet,
	// less the prefix resident when each was picked.
	Prefill uint64
	// Waiting is the router's admission waiters by band (sheddable,
	// standard, critical) for the pools the engine serves.
	Waiting [3]uint64
}

// PublishLoads sets this router's load per engine URL and sends it to the
// other routers at once: the engines whose load changed since the last
// send when changed (the oldest change's time) is set, every non-zero one
// when it is zero (a heartbeat; a full send is also repeated every
// InflightInterval). The caller decides the cadence (router/meshstate
// publishes on change). The map is copied; it never blocks.
func (r *Router) PublishLoads(loads map[string]Load, changed time.Time) {
	s := r.share
	s.mu.Lock()
	s.inflight = maps.Clone(loads)
	if s.resolve {
		s.intentPending, s.resolve, s.intentDirty = false, false, true
	}
	if !changed.IsZero() && (s.changed.IsZero() || changed.Before(s.changed)) {
		s.changed = changed
	}
	s.mu.Unlock()
	for url, e := range *r.view.engines.Load() {
		e.own.Store(int64(min(loads[url].Inflight, maxCount)))
		e.ownPrefill.Store(loads[url].Prefill)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// peerIntent is what another router's newest load message said of its
// pending pick.
type peerIntent struct {
	rank    int
	intent  int64 // the latest intent it announced (unix nanos; 0: none)
	pending bool  // the newest message still carries it
	sent    int64 // when that message was built
}

// PeerIntent is another router's pending pick as its newest message that
// reached this router says (PeerIntents).
type PeerIntent struct {
	Rank    int       // the rank it announced with its latest intent
	Intent  time.Time // when it announced its latest intent
	Pending bool      // its newest message still carries that intent
}

// Intend sets this router's pending pick (router/meshstate's order of the
// first picks of an instant): at non-zero is when it was announced, rank
// this router's rank; a zero at withdraws it. The change goes to every
// other router at once, in a load message without engines when nothing
// else is due. Every load message carries the latest intent and whether
// it is still pending: a receiver that never got the intent's own message
// (it went in the same send as the pick that resolved it) still learns
// that the pick of that intent is in. It never blocks.
func (r *Router) Intend(rank int, at time.Time) {
	s := r.share
	s.mu.Lock()
	if !at.IsZero() {
		s.intent, s.intentRank = at, rank
	}
	s.intentPending, s.intentDirty, s.resolve = !at.IsZero(), true, false
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// ResolveIntent says the next PublishLoads carries the pick that followed
// this router's pending intent: that message carries the intent as
// resolved, so the other routers see it resolved together with the loads.
func (r *Router) ResolveIntent() {
	s := r.share
	s.mu.Lock()
	s.resolve = s.intentPending
	s.mu.Unlock()
}

// PeerIntents appends to buf the latest intent of every other router that
// has announced one, and whether it is still pending. It does not allocate beyond buf's growth.
func (r *Router) PeerIntents(buf []PeerIntent) []PeerIntent {
	s := r.share
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.peers {
		if p.intent > 0 {
			buf = append(buf, PeerIntent{Rank: p.rank, Intent: time.Unix(0, p.intent), Pending: p.pending})
		}
	}
	return buf
}

// IntentsReceived returns how many intents of other routers arrived.
func (r *Router) IntentsReceived() uint64 { return r.share.intentsIn.Load() }

// PublishConfigVersion sets the config_version this router has applied;
// it travels with the in-flight counts, so the other routers can tell
// which replicas have converged on a config change.
func (r *Router) PublishConfigVersion(version uint64) {
	s := r.share
	s.mu.Lock()
	s.version = version
	s.mu.Unlock()
}

// configVersion returns the config_version router name last reported; ok
// is false when it has reported none.
func (s *routerShare) configVersion(name string) (version uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	version, ok = s.versions[name]
	return version, ok
}

// Share queues a learned record for the other routers. It never blocks; a
// full queue drops the record (counted).
func (r *Router) Share(rec Learned) {
	s := r.share
	if rec.TTL > maxLearnedTTL {
		rec.TTL = maxLearnedTTL
	}
	s.mu.Lock()
	if len(s.outbox) < s.cfg.LearnedBuffer {
		s.outbox = append(s.outbox, rec)
	} else {
		r.stats.LearnedDropped.Add(1)
	}
	s.mu.Unlock()
}

// Learned returns the channel of records other routers shared. Records
// arrive in batches; when the consumer falls behind, new ones are dropped
// (counted) rather than blocking the gossip receive loop.
func (r *Router) Learned() <-chan Learned { return r.share.inbox }

func (s *routerShare) run(ctx context.Context) {
	inflight := time.NewTicker(s.cfg.InflightInterval)
	defer inflight.Stop()
	learned := time.NewTicker(s.cfg.LearnedInterval)
	defer learned.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			s.sendInflight(false)
		case <-inflight.C:
			s.mu.Lock()
			recent := s.c.now().Sub(s.fullAt) < s.cfg.InflightInterval/2
			s.mu.Unlock()
			if !recent {
				s.sendInflight(true)
			}
		case <-learned.C:
			s.sendLearned()
		}
	}
}

// PeerPublished returns when the newest load message of another router
// that reached this one was built, on that router's clock (zero before
// any).
func (r *Router) PeerPublished() time.Time {
	if n := r.share.peerSent.Load(); n > 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// PeerNews returns a channel closed when the next load message of another
// router arrives.
func (r *Router) PeerNews() <-chan struct{} { return *r.share.news.Load() }

// sendInflight sends this router's loads to every other router, split
// into UDP-sized messages: the engines whose load differs from the last
// send (a zero for one no longer loaded) after a change, or every
// non-zero one (and a zero for each that was non-zero) for a repeat:
// when full is set or no change is pending.
func (s *routerShare) sendInflight(full bool) {
	s.mu.Lock()
	var entries []inflightEntry
	now := s.c.now()
	changed := s.changed
	// A kick for an intent alone is no repeat: it sends the intent and
	// whatever changed.
	full = full || changed.IsZero() && !s.intentDirty
	var zero Load
	for u, c := range s.inflight {
		// s.sent holds non-zero loads only: a missing one was sent as 0.
		if c != s.sent[u] || full && c != zero {
			entries = append(entries, inflightEntry{URL: u, N: c.Inflight, Prefill: c.Prefill, Waiting: c.Waiting})
		}
	}
	for u := range s.sent {
		c, listed := s.inflight[u]
		if !listed {
			entries = append(entries, inflightEntry{URL: u})
		}
		if c == zero {
			delete(s.sent, u)
		}
	}
	for u, c := range s.inflight {
		if c != zero {
			s.sent[u] = c
		}
	}
	s.changed = time.Time{}
	if full {
		s.fullAt = now
	}
	version := s.version
	var intent, rank uint64
	if !s.intent.IsZero() {
		intent, rank = uint64(s.intent.UnixNano()), uint64(max(s.intentRank, 0))
	}
	pending := s.intentPending
	dirty := s.intentDirty
	s.intentDirty = false
	s.mu.Unlock()
	routers := *s.c.routers.Load()
	if (len(entries) == 0 && version == 0 && !dirty) || len(routers) == 0 {
		return
	}
	var changedAt uint64
	if !changed.IsZero() {
		changedAt = uint64(changed.UnixNano())
	}
	for first := true; first || len(entries) > 0; first = false {
		size, i := 80, 0
		for ; i < len(entries) && i < maxEntriesPerMsg; i++ {
			size += len(entries[i].URL) + 24
			if size > udpBudget && i > 0 {
				break
			}
		}
		msg := encodeInflight(&inflightMsg{From: s.c.cfg.Name, Entries: entries[:i], ConfigVersion: version,
			Changed: changedAt, Sent: uint64(now.UnixNano()), Intent: intent, Rank: rank, Pending: pending})
		entries = entries[i:]
		for _, r := range routers {
			s.c.send(r, msg)
		}
	}
}

func (s *routerShare) sendLearned() {
	s.mu.Lock()
	out := s.outbox
	s.outbox = nil
	s.mu.Unlock()
	routers := *s.c.routers.Load()
	if len(out) == 0 || len(routers) == 0 {
		return
	}
	for len(out) > 0 {
		size, i := 64, 0
		for ; i < len(out) && i < maxEntriesPerMsg; i++ {
			size += learnedSize(&out[i])
			if size > udpBudget && i > 0 {
				break
			}
		}
		msg := encodeLearned(&learnedMsg{From: s.c.cfg.Name, Records: out[:i]})
		out = out[i:]
		for _, r := range routers {
			s.c.send(r, msg)
		}
	}
}

// handle applies another router's message; runs on a memberlist goroutine.
func (s *routerShare) handle(typ byte, body []byte) error {
	if typ == msgLearned {
		m, err := decodeLearned(body)
		if err != nil {
			return err
		}
		if !s.fromRouter(m.From) {
			return nil
		}
		for _, r := range m.Records {
			r.Target = NormalizeURL(r.Target)
			select {
			case s.inbox <- r:
			default:
				s.c.stats.LearnedDropped.Add(1)
			}
		}
		return nil
	}
	m, err := decodeInflight(body)
	if err != nil {
		return err
	}
	if !s.fromRouter(m.From) {
		return nil
	}
	s.mu.Lock()
	if m.ConfigVersion > 0 {
		if _, known := s.versions[m.From]; known || len(s.versions) < maxRouterVersions {
			s.versions[m.From] = m.ConfigVersion
		}
	}
	s.notePeerIntentLocked(m)
	s.mu.Unlock()
	v := s.view
	now := s.c.now()
	expires := now.Add(4 * s.cfg.InflightInterval)
	for _, en := range m.Entries {
		e := v.lookup(NormalizeURL(en.URL))
		if e == nil {
			continue // only engines this router knows; no growth from peers
		}
		e.mu.Lock()
		if en.N == 0 && en.Prefill == 0 && en.Waiting == ([3]uint64{}) {
			delete(e.inflight, m.From)
		} else {
			e.inflight[m.From] = remoteCount{n: en.N, prefill: en.Prefill, waiting: en.Waiting, expires: expires}
		}
		e.remoteAt.Store(now.UnixNano())
		e.sumRemoteLocked()
		e.mu.Unlock()
	}
	if m.Changed > 0 {
		s.age.Observe(max(now.Sub(time.Unix(0, int64(min(m.Changed, 1<<62)))), 0).Seconds())
	}
	if sent := int64(min(m.Sent, 1<<62)); sent > 0 {
		for {
			old := s.peerSent.Load()
			if sent <= old || s.peerSent.CompareAndSwap(old, sent) {
				break
			}
		}
	}
	next := make(chan struct{})
	close(*s.news.Swap(&next))
	return nil
}

// notePeerIntentLocked keeps what m, the newest message of its sender so
// far, says of the sender's pending pick (s.mu held); an older message
// arriving late changes nothing.
func (s *routerShare) notePeerIntentLocked(m *inflightMsg) {
	p, known := s.peers[m.From]
	if !known && (m.Intent == 0 || len(s.peers) >= maxRouterVersions) {
		return
	}
	sent := int64(min(m.Sent, 1<<62))
	if known && sent < p.sent {
		return
	}
	p.sent = sent
	p.pending = m.Intent > 0 && m.Pending
	if m.Intent > 0 {
		if int64(m.Intent) != p.intent {
			s.intentsIn.Add(1)
			if m.Pending {
				s.noteDelay(s.c.now().Sub(time.Unix(0, int64(m.Intent))))
			}
		}
		p.intent, p.rank = int64(m.Intent), int(m.Rank)
	}
	s.peers[m.From] = p
}

// noteDelay moves the delay estimate towards age, one intent's age on
// arrival (on the sender's clock against this one's: clamped to [0, 1 s]).
func (s *routerShare) noteDelay(age time.Duration) {
	age = min(max(age, 0), time.Second)
	est := time.Duration(s.delay.Load())
	if age > est {
		est += (age - est) / 2
	} else {
		est -= (est - age) / 16
	}
	s.delay.Store(int64(est))
}

// PeerDelay returns the estimated one-way delay of the other routers'
// messages, from their intents' ages on arrival (0 before any).
func (r *Router) PeerDelay() time.Duration { return time.Duration(r.share.delay.Load()) }

// sumRemoteLocked refreshes the other routers' totals from e.inflight.
func (e *engine) sumRemoteLocked() {
	var sum, prefill uint64
	var waiting [3]uint64
	for _, c := range e.inflight {
		sum += c.n
		prefill += c.prefill
		for b, n := range c.waiting {
			waiting[b] += n
		}
	}
	e.remote.Store(int64(sum))
	e.remotePrefill.Store(prefill)
	for b, n := range waiting {
		e.remoteWaiting[b].Store(n)
	}
	e.remoteAny.Store(len(e.inflight) > 0)
}

func (s *routerShare) fromRouter(name string) bool {
	m, ok := s.c.memberByName(name)
	if !ok || m.meta.Role != RoleRouter || name == s.c.cfg.Name {
		s.c.stats.UnknownSender.Add(1)
		return false
	}
	return true
}
