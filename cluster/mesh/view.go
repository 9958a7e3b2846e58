package mesh

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// RouterConfig tunes a router's cluster view and what it shares with the
// other routers. Zero values take defaults.
type RouterConfig struct {
	// StaleAfter: an engine whose sidecar sent nothing for this long is
	// STALE (default 3s; its status goes every 250ms).
	StaleAfter time.Duration
	// RepairGrace: a residency gap unrepaired for this long makes the
	// engine DEGRADED (default 2s).
	RepairGrace time.Duration
	// ResyncEvery rate-limits resync requests per engine (default 150ms).
	ResyncEvery time.Duration
	// SweepInterval is how often staleness is re-evaluated (default 250ms).
	SweepInterval time.Duration
	// Caps on what peers can make a router hold.
	MaxEngines         int // default 1024
	MaxBlocksPerEngine int // default 1<<20
	MaxBlocksTotal     int // default 1<<24
	// InflightInterval is how often this router's in-flight counts go to
	// the other routers (default 250ms); a peer's count expires after
	// 4 intervals without a refresh.
	InflightInterval time.Duration
	// LearnedInterval batches shared learned records (default 50ms).
	LearnedInterval time.Duration
	// LearnedBuffer bounds the inbound learned-record channel (default 4096).
	LearnedBuffer int
}

func (c *RouterConfig) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.StaleAfter, 3*time.Second)
	def(&c.RepairGrace, 2*time.Second)
	def(&c.ResyncEvery, 150*time.Millisecond)
	def(&c.SweepInterval, 250*time.Millisecond)
	def(&c.InflightInterval, 250*time.Millisecond)
	def(&c.LearnedInterval, 50*time.Millisecond)
	if c.MaxEngines <= 0 {
		c.MaxEngines = 1024
	}
	if c.MaxBlocksPerEngine <= 0 {
		c.MaxBlocksPerEngine = 1 << 20
	}
	if c.MaxBlocksTotal <= 0 {
		c.MaxBlocksTotal = 1 << 24
	}
	if c.LearnedBuffer <= 0 {
		c.LearnedBuffer = 4096
	}
}

// View is a router's picture of every engine, built from the sidecars'
// summaries. Reads (ResidentPrefix, Occupancy, AdapterResident, Load) are
// lock-free: they load atomics and immutable snapshots. Writes come from
// memberlist's receive goroutines, serialised per engine.
type View struct {
	c   *core
	cfg RouterConfig

	// engines is an immutable URL → engine map, copied on insert.
	engines   atomic.Pointer[map[string]*engine]
	insertMu  sync.Mutex
	byNode    sync.Map // sidecar node name → *engine
	total     atomic.Int64
	changedMu sync.Mutex
	changed   chan struct{}
}

// engine is the view of one engine. Fields read on the hot path are
// atomics; the rest is guarded by mu.
type engine struct {
	url    string
	pinned atomic.Bool // referenced by a route's Targets: never evicted

	state         atomic.Uint32 // effective ResidencyState
	set           atomic.Pointer[keySet]
	fresh         atomic.Bool // status received within StaleAfter from a live sidecar
	running       atomic.Uint64
	waiting       atomic.Uint64
	kvUsage       atomic.Uint64 // float64 bits
	lmOcc         atomic.Uint64 // float64 bits
	lmKnown       atomic.Bool
	lmAvail       atomic.Bool
	adapters      atomic.Pointer[adapterInfo]
	remote        atomic.Int64     // Σ other routers' in-flight to this engine
	remotePrefill atomic.Uint64    // Σ other routers' queued prefill tokens on it
	remoteWaiting [3]atomic.Uint64 // Σ other routers' admission waiters by band
	remoteAt      atomic.Int64     // unix nanos of the last router message about it
	own           atomic.Int64     // this router's in-flight as last published
	ownPrefill    atomic.Uint64    // this router's queued prefill as last published
	remoteAny     atomic.Bool
	lastMsg       atomic.Int64 // unix nanos of the last message from the owner

	mu          sync.Mutex
	owner       string
	meta        Meta
	alive       bool
	haveFull    bool
	overCap     bool
	epoch, seq  uint64
	wireState   ResidencyState
	statusSeq   uint64
	statusEpoch uint64
	gapSince    time.Time // zero when in sequence
	lastAsk     time.Time
	pending     map[uint64]*residencyMsg // out-of-order deltas by seq
	status      EngineStatus
	peerSeq     uint64 // sidecar's latest seq from its status
	inflight    map[string]remoteCount
	goneSince   time.Time
	// askTo and ask are a resync request queued under mu, sent by unlock
	// once mu is released: nothing goes on the network under an engine
	// lock.
	askTo *memberlist.Node
	ask   []byte
}

type remoteCount struct {
	n, prefill uint64
	waiting    [3]uint64
	expires    time.Time
}

// adapterInfo is an immutable snapshot of an engine's adapters.
type adapterInfo struct {
	names    []string
	maxLoras int
}

const maxPending = 128

// reorderWait is how long a sequence gap may be reordering (UDP vs TCP,
// parallel stream handlers) before the router asks for a resend.
const reorderWait = 40 * time.Millisecond

func newView(c *core, cfg RouterConfig) *View {
	cfg.defaults()
	v := &View{c: c, cfg: cfg, changed: make(chan struct{})}
	v.engines.Store(&map[string]*engine{})
	return v
}

// lookup returns the engine for url without locking.
func (v *View) lookup(url string) *engine { return (*v.engines.Load())[url] }

// engineFor returns the entry for url, creating it when the cap allows (or
// always, for pinned route targets).
func (v *View) engineFor(url string, pin bool) *engine {
	if e := v.lookup(url); e != nil {
		if pin {
			e.pinned.Store(true)
		}
		return e
	}
	v.insertMu.Lock()
	defer v.insertMu.Unlock()
	old := *v.engines.Load()
	if e := old[url]; e != nil {
		return e
	}
	if !pin && len(old) >= v.cfg.MaxEngines && !v.evictLocked(old) {
		v.c.stats.EnginesRefused.Add(1)
		return nil
	}
	old = *v.engines.Load()
	next := make(map[string]*engine, len(old)+1)
	for k, e := range old {
		next[k] = e
	}
	e := &engine{url: url, inflight: map[string]remoteCount{}}
	e.pinned.Store(pin)
	next[url] = e
	v.engines.Store(&next)
	return e
}

// evictLocked removes one unpinned engine gone for more than 10×StaleAfter
// to make room; it reports whether it did.
func (v *View) evictLocked(old map[string]*engine) bool {
	now := v.c.now()
	for url, e := range old {
		e.mu.Lock()
		gone := !e.alive && !e.goneSince.IsZero() && now.Sub(e.goneSince) > 10*v.cfg.StaleAfter
		e.mu.Unlock()
		if gone && !e.pinned.Load() {
			next := make(map[string]*engine, len(old))
			for k, x := range old {
				if k != url {
					next[k] = x
				}
			}
			v.engines.Store(&next)
			return true
		}
	}
	return false
}

// Changed returns a channel closed at the next change in the set of live
// engines or their models (discovery).
func (v *View) Changed() <-chan struct{} {
	v.changedMu.Lock()
	defer v.changedMu.Unlock()
	return v.changed
}

func (v *View) notify() {
	v.changedMu.Lock()
	close(v.changed)
	v.changed = make(chan struct{})
	v.changedMu.Unlock()
}

// memberUp binds a sidecar's node name to its engine entry.
func (v *View) memberUp(name string, meta Meta) {
	if meta.Role != RoleSidecar || meta.EngineURL == "" {
		return
	}
	e := v.engineFor(meta.EngineURL, false)
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.owner != name && e.owner != "" && e.alive {
		// Another live sidecar already speaks for this engine: keep it.
		// The newcomer takes over if the owner leaves (see memberGone).
		e.mu.Unlock()
		v.c.stats.Conflicts.Add(1)
		return
	}
	changed := !e.alive || e.owner != name || !slices.Equal(e.meta.Models, meta.Models)
	if e.owner != name && e.owner != "" {
		v.byNode.Delete(e.owner)
		e.resetLocked(v)
	}
	e.owner, e.meta, e.alive = name, meta, true
	e.goneSince = time.Time{}
	e.lastMsg.Store(v.c.now().UnixNano())
	// Leave STALE now: Engines lists the engine from this notify on (a
	// route target's entry is STALE until its sidecar joins).
	e.refreshLocked(v, v.c.now())
	e.mu.Unlock()
	v.byNode.Store(name, e)
	if changed {
		v.notify()
	}
}

// memberGone marks a departed sidecar's engine STALE at once.
func (v *View) memberGone(name string, meta Meta) {
	x, ok := v.byNode.Load(name)
	if !ok {
		return
	}
	e := x.(*engine)
	e.mu.Lock()
	if e.owner == name {
		e.alive = false
		e.goneSince = v.c.now()
		e.resetLocked(v)
		e.refreshLocked(v, v.c.now())
	}
	e.mu.Unlock()
	v.byNode.Delete(name)
	v.notify()
	// Hand the engine to another live sidecar announcing the same URL
	// (e.g. a sidecar restarted under a new name before the old one's
	// death was detected).
	var heir string
	var heirMeta Meta
	v.c.eachMember(func(other string, m member) {
		if heir == "" && other != name && m.meta.Role == RoleSidecar && m.meta.EngineURL == e.url {
			heir, heirMeta = other, m.meta
		}
	})
	if heir != "" {
		v.memberUp(heir, heirMeta)
	}
}

// resetLocked drops residency and status (memory freed; state neutral).
func (e *engine) resetLocked(v *View) {
	if s := e.set.Swap(nil); s != nil {
		v.total.Add(-int64(s.Len()))
	}
	e.haveFull, e.overCap = false, false
	e.epoch, e.seq, e.peerSeq = 0, 0, 0
	e.pending = nil
	e.gapSince = time.Time{}
	e.statusSeq = 0
	e.fresh.Store(false)
}

// refreshLocked recomputes the effective state from what is known at now.
func (e *engine) refreshLocked(v *View, now time.Time) {
	fresh := e.alive && now.UnixNano()-e.lastMsg.Load() <= int64(v.cfg.StaleAfter)
	if !fresh && (e.haveFull || e.set.Load() != nil) {
		// A set kept after a divergence (haveFull cleared while waiting
		// for a full state) is freed too: STALE holds no index.
		e.resetLocked(v)
	}
	e.fresh.Store(fresh && e.statusSeq > 0)
	var st ResidencyState
	switch {
	case !fresh:
		st = StateStale
	case !e.haveFull:
		st = StateUnknown
	case e.wireState == StateDegraded || e.overCap ||
		(!e.gapSince.IsZero() && now.Sub(e.gapSince) > v.cfg.RepairGrace):
		st = StateDegraded
	default:
		st = StateExact
	}
	e.state.Store(uint32(st))
}

// sender resolves a message's sender to its engine, counting strays.
func (v *View) sender(from string) *engine {
	x, ok := v.byNode.Load(from)
	if !ok {
		v.c.stats.UnknownSender.Add(1)
		return nil
	}
	return x.(*engine)
}

// handle applies one sidecar message. It runs on a memberlist goroutine.
func (v *View) handle(typ byte, body []byte) error {
	if typ == msgEngineStatus {
		m, err := decodeStatus(body)
		if err != nil {
			return err
		}
		if e := v.sender(m.From); e != nil {
			v.applyStatus(e, m)
		}
		return nil
	}
	m, err := decodeResidency(body, maxKeysPerMsg) // transient; the caps bound what is kept
	if err != nil {
		return err
	}
	if typ == msgResidencyFull && m.Cleared {
		return fmt.Errorf("%w: full state marked cleared", errMalformed)
	}
	if e := v.sender(m.From); e != nil {
		v.applyResidency(e, typ == msgResidencyFull, m)
	}
	return nil
}

func (v *View) applyStatus(e *engine, m *statusMsg) {
	now := v.c.now()
	e.mu.Lock()
	defer v.unlock(e)
	if e.owner != m.From {
		v.c.stats.Conflicts.Add(1)
		return
	}
	if m.Seq <= e.statusSeq && m.Epoch == e.statusEpoch {
		v.c.stats.StatusReordered.Add(1)
		return
	}
	e.statusSeq, e.statusEpoch = max(m.Seq, 1), m.Epoch
	e.lastMsg.Store(now.UnixNano())
	s := m.Status
	e.status = s
	e.running.Store(s.Running)
	e.waiting.Store(s.Waiting)
	e.kvUsage.Store(math.Float64bits(s.KVUsage))
	e.lmOcc.Store(math.Float64bits(s.LMCacheOccupancy))
	e.lmKnown.Store(s.LMCacheKnown)
	e.lmAvail.Store(s.LMCacheAvailable)
	if old := e.adapters.Load(); old == nil || old.maxLoras != s.MaxLoras || !slices.Equal(old.names, s.Adapters) {
		e.adapters.Store(&adapterInfo{names: s.Adapters, maxLoras: s.MaxLoras})
	}
	e.peerSeq = max(e.peerSeq, m.ResSeq)
	switch {
	case !e.haveFull || m.Epoch != e.epoch:
		v.askLocked(e, now, true)
	case m.ResSeq == e.seq:
		e.wireState = m.ResState
		if set := e.set.Load(); !e.overCap && set != nil && (uint64(set.Len()) != m.Count || set.Digest() != m.Digest) {
			v.c.stats.Divergences.Add(1)
			v.askLocked(e, now, true)
		}
	case m.ResSeq > e.seq:
		if e.gapSince.IsZero() {
			e.gapSince = now
		} else if now.Sub(e.gapSince) >= reorderWait {
			v.askLocked(e, now, false) // the last deltas were lost
		}
	}
	e.refreshLocked(v, now)
}

// unlock releases e.mu and then sends the resync request askLocked
// queued, if any.
func (v *View) unlock(e *engine) {
	to, msg := e.askTo, e.ask
	e.askTo, e.ask = nil, nil
	e.mu.Unlock()
	if msg != nil {
		v.c.send(to, msg)
	}
}

// askLocked queues a resync request, at most once per ResyncEvery; the
// caller releases e.mu with unlock, which sends it.
func (v *View) askLocked(e *engine, now time.Time, full bool) {
	if now.Sub(e.lastAsk) < v.cfg.ResyncEvery {
		return
	}
	mem, ok := v.c.memberByName(e.owner)
	if !ok {
		return
	}
	e.lastAsk = now
	v.c.stats.ResyncsAsked.Add(1)
	m := resyncMsg{From: v.c.cfg.Name, Epoch: e.epoch, HaveSeq: e.seq, Full: full || !e.haveFull}
	if !m.Full && len(e.pending) > 0 {
		// Name the holes below the highest buffered delta; anything after
		// it (lost tail) comes too when the list ends below peerSeq.
		top := e.seq
		for seq := range e.pending {
			top = max(top, seq)
		}
		for seq := e.seq + 1; seq < top && len(m.Missing) < maxMissing; seq++ {
			if _, ok := e.pending[seq]; !ok {
				m.Missing = append(m.Missing, seq)
			}
		}
		if e.peerSeq > top || len(m.Missing) == maxMissing {
			m.Missing = nil // tail lost too, or too many holes: resend all after HaveSeq
		}
	}
	e.askTo, e.ask = mem.node, encodeResync(&m)
}

func (v *View) applyResidency(e *engine, full bool, m *residencyMsg) {
	now := v.c.now()
	e.mu.Lock()
	defer v.unlock(e)
	if e.owner != m.From {
		v.c.stats.Conflicts.Add(1)
		return
	}
	e.lastMsg.Store(now.UnixNano())
	switch {
	case full:
		if e.haveFull && m.Epoch == e.epoch && m.Seq < e.seq {
			break // older than what we have
		}
		set := newKeySet(min(len(m.Added), v.cfg.MaxBlocksPerEngine))
		if old := e.set.Load(); old != nil {
			v.total.Add(-int64(old.Len()))
		}
		e.set.Store(set)
		e.overCap = false
		v.addKeys(e, set, m.Added)
		e.epoch, e.seq, e.haveFull, e.wireState = m.Epoch, m.Seq, true, m.State
		v.c.stats.FullsApplied.Add(1)
		v.verifyLocked(e, m, now)
		v.drainLocked(e, now)
	case !e.haveFull || m.Epoch != e.epoch:
		v.askLocked(e, now, true)
	case m.Seq <= e.seq:
		// duplicate or resent
	case m.Seq == e.seq+1:
		v.applyDeltaLocked(e, m, now)
		v.drainLocked(e, now)
	default:
		if e.pending == nil {
			e.pending = map[uint64]*residencyMsg{}
		}
		if len(e.pending) < maxPending {
			e.pending[m.Seq] = m
		}
		if e.gapSince.IsZero() {
			e.gapSince = now // maybe only reordered: ask if it persists
		} else if now.Sub(e.gapSince) >= reorderWait {
			v.askLocked(e, now, false)
		}
	}
	e.refreshLocked(v, now)
}

// drainLocked applies buffered deltas that are now in sequence.
func (v *View) drainLocked(e *engine, now time.Time) {
	for seq := range e.pending {
		if seq <= e.seq {
			delete(e.pending, seq)
		}
	}
	for {
		m, ok := e.pending[e.seq+1]
		if !ok {
			break
		}
		delete(e.pending, m.Seq)
		v.applyDeltaLocked(e, m, now)
	}
	if len(e.pending) == 0 && e.seq >= e.peerSeq {
		e.gapSince = time.Time{}
	}
}

func (v *View) applyDeltaLocked(e *engine, m *residencyMsg, now time.Time) {
	set := e.set.Load()
	if m.Cleared {
		if set != nil {
			v.total.Add(-int64(set.Len()))
		}
		set = newKeySet(len(m.Added))
		e.set.Store(set)
		e.overCap = false
	}
	for _, k := range m.Removed {
		if set.Remove(k) {
			v.total.Add(-1)
		}
	}
	v.addKeys(e, set, m.Added)
	e.seq = m.Seq
	e.peerSeq = max(e.peerSeq, m.Seq)
	e.wireState = m.State
	v.verifyLocked(e, m, now)
}

// addKeys inserts keys up to the per-engine and total caps; keys beyond
// them are counted and the engine marked DEGRADED (its view is partial).
func (v *View) addKeys(e *engine, set *keySet, keys []uint64) {
	for i, k := range keys {
		if set.Len() >= v.cfg.MaxBlocksPerEngine || v.total.Load() >= int64(v.cfg.MaxBlocksTotal) {
			v.c.stats.KeysDropped.Add(uint64(len(keys) - i))
			e.overCap = true
			return
		}
		if set.Add(k) {
			v.total.Add(1)
		}
	}
}

// verifyLocked checks the set against the sender's count and digest; a
// mismatch means divergence and asks for a full state.
func (v *View) verifyLocked(e *engine, m *residencyMsg, now time.Time) {
	set := e.set.Load()
	if e.overCap || set == nil {
		return
	}
	if uint64(set.Len()) != m.Count || set.Digest() != m.Digest {
		v.c.stats.Divergences.Add(1)
		e.haveFull = false
		e.lastAsk = time.Time{}
		v.askLocked(e, now, true)
	}
}

// run re-evaluates staleness and expires peers' in-flight counts.
func (v *View) run(ctx context.Context) {
	t := time.NewTicker(v.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			v.sweep()
		}
	}
}

func (v *View) sweep() {
	now := v.c.now()
	for _, e := range *v.engines.Load() {
		e.mu.Lock()
		wasFresh := e.state.Load() != uint32(StateStale)
		e.refreshLocked(v, now)
		for r, c := range e.inflight {
			if now.After(c.expires) {
				delete(e.inflight, r)
			}
		}
		e.sumRemoteLocked()
		if e.haveFull && e.peerSeq > e.seq {
			if e.gapSince.IsZero() {
				e.gapSince = now
			} else if now.Sub(e.gapSince) >= reorderWait {
				v.askLocked(e, now, false)
			}
		}
		stale := e.state.Load() == uint32(StateStale)
		v.unlock(e)
		if wasFresh && stale {
			v.notify()
		}
	}
}
