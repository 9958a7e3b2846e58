package mesh

import (
	"context"
	"maps"
	"sync"
	"time"
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
	sentNZ   map[string]bool // URLs sent non-zero last round
	sentAt   time.Time       // last in-flight send
	kick     chan struct{}   // a publication waits to be sent
	outbox   []Learned
	version  uint64            // config_version this router has applied
	versions map[string]uint64 // config_version each other router reported

	inbox chan Learned
}

func newRouterShare(c *core, view *View, cfg RouterConfig) *routerShare {
	cfg.defaults()
	return &routerShare{c: c, view: view, cfg: cfg, inflight: map[string]Load{}, sentNZ: map[string]bool{}, versions: map[string]uint64{},
		kick: make(chan struct{}, 1), inbox: make(chan Learned, cfg.LearnedBuffer)}
}

// Load is one router's load on one engine, as routers gossip it.
type Load struct {
	Inflight uint64 // requests in flight
	// Prefill is the prompt tokens of those that have no first token yet,
	// less the prefix resident when each was picked.
	Prefill uint64
}

// PublishLoads sets this router's load per engine URL and sends it to the
// other routers at once (a send is also repeated every InflightInterval).
// The caller decides the cadence (router/meshstate publishes on change).
// The map is copied; it never blocks.
func (r *Router) PublishLoads(loads map[string]Load) {
	s := r.share
	s.mu.Lock()
	s.inflight = maps.Clone(loads)
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
			s.sendInflight()
		case <-inflight.C:
			s.mu.Lock()
			recent := s.c.now().Sub(s.sentAt) < s.cfg.InflightInterval/2
			s.mu.Unlock()
			if !recent {
				s.sendInflight()
			}
		case <-learned.C:
			s.sendLearned()
		}
	}
}

// sendInflight sends every non-zero count, plus a zero for each URL that
// was non-zero last round, split into UDP-sized messages.
func (s *routerShare) sendInflight() {
	s.mu.Lock()
	var entries []inflightEntry
	nz := map[string]bool{}
	for u, c := range s.inflight {
		if c.Inflight > 0 || c.Prefill > 0 {
			entries = append(entries, inflightEntry{URL: u, N: c.Inflight, Prefill: c.Prefill})
			nz[u] = true
		} else if s.sentNZ[u] {
			entries = append(entries, inflightEntry{URL: u})
		}
	}
	for u := range s.sentNZ {
		if _, still := s.inflight[u]; !still {
			entries = append(entries, inflightEntry{URL: u})
		}
	}
	s.sentNZ = nz
	s.sentAt = s.c.now()
	version := s.version
	s.mu.Unlock()
	routers := *s.c.routers.Load()
	if (len(entries) == 0 && version == 0) || len(routers) == 0 {
		return
	}
	for first := true; first || len(entries) > 0; first = false {
		size, i := 64, 0
		for ; i < len(entries) && i < maxEntriesPerMsg; i++ {
			size += len(entries[i].URL) + 24
			if size > udpBudget && i > 0 {
				break
			}
		}
		msg := encodeInflight(&inflightMsg{From: s.c.cfg.Name, Entries: entries[:i], ConfigVersion: version})
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
	if m.ConfigVersion > 0 {
		s.mu.Lock()
		if _, known := s.versions[m.From]; known || len(s.versions) < maxRouterVersions {
			s.versions[m.From] = m.ConfigVersion
		}
		s.mu.Unlock()
	}
	v := s.view
	now := s.c.now()
	expires := now.Add(4 * s.cfg.InflightInterval)
	for _, en := range m.Entries {
		e := v.lookup(NormalizeURL(en.URL))
		if e == nil {
			continue // only engines this router knows; no growth from peers
		}
		e.mu.Lock()
		if en.N == 0 && en.Prefill == 0 {
			delete(e.inflight, m.From)
		} else {
			e.inflight[m.From] = remoteCount{n: en.N, prefill: en.Prefill, expires: expires}
		}
		e.remoteAt.Store(now.UnixNano())
		e.sumRemoteLocked()
		e.mu.Unlock()
	}
	return nil
}

// sumRemoteLocked refreshes the other routers' totals from e.inflight.
func (e *engine) sumRemoteLocked() {
	var sum, prefill uint64
	for _, c := range e.inflight {
		sum += c.n
		prefill += c.prefill
	}
	e.remote.Store(int64(sum))
	e.remotePrefill.Store(prefill)
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
