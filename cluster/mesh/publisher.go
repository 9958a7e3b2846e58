package mesh

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// SidecarConfig tunes a sidecar's publisher. Zero values take defaults.
type SidecarConfig struct {
	// FlushInterval batches residency changes (default 50ms). A batch is
	// also sent early once it holds maxKeysPerPacket keys.
	FlushInterval time.Duration
	// StatusInterval is how often the engine summary goes to each router
	// (default 250ms).
	StatusInterval time.Duration
	// FullInterval is how often a full residency state is pushed to every
	// router as a safety net (default 5m; negative disables). Routers also
	// ask for one whenever they cannot apply a delta.
	FullInterval time.Duration
	// ResendWindow is how many recent deltas are kept to answer a router
	// that missed some (default 256); older gaps get a full state.
	ResendWindow int
}

func (c *SidecarConfig) defaults() {
	if c.FlushInterval <= 0 {
		c.FlushInterval = 50 * time.Millisecond
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = 250 * time.Millisecond
	}
	if c.FullInterval == 0 {
		c.FullInterval = 5 * time.Minute
	}
	if c.ResendWindow <= 0 {
		c.ResendWindow = 256
	}
}

// maxKeysPerPacket keys fit a UDP message (8 bytes each plus header);
// batches of up to maxChunks packets are split rather than sent by TCP.
const (
	maxKeysPerPacket = 150
	maxChunks        = 16
)

// EngineStatus is the sidecar's latest view of its engine, from the
// engine's /metrics and the LMCache signal.
type EngineStatus struct {
	MetricsOK     bool // the last /metrics scrape succeeded
	Running       uint64
	Waiting       uint64
	KVUsage       float64 // [0,1]
	PrefixHits    uint64
	PrefixQueries uint64
	BlockSize     int
	MaxLoras      int
	Adapters      []string // resident LoRA adapters
	// LMCacheKnown is false when there is no (fresh) LMCache signal.
	LMCacheKnown     bool
	LMCacheOccupancy float64 // [0,1]
	LMCacheAvailable bool
}

// ResidencyDelta is one change to the engine's resident block keys, as the
// sidecar's tracker produces it. Cleared empties the set first, then
// Removed and then Added are applied. State, when non-zero, sets the
// residency state (EXACT, or DEGRADED while a gap is unrepaired).
type ResidencyDelta struct {
	Added   []uint64
	Removed []uint64
	Cleared bool
	State   ResidencyState
}

// Publisher is a sidecar's outbound side: it mirrors the engine's resident
// block keys, batches changes into sequenced deltas sent to every router,
// answers routers' resync requests from a window of recent deltas or with a
// full state, and sends the engine summary every StatusInterval.
//
// Apply, Reset and SetStatus may be called from any goroutine; they only
// take a short lock and never do network I/O.
type Publisher struct {
	c   *core
	cfg SidecarConfig

	mu      sync.Mutex
	set     *keySet
	changed map[uint64]bool // key → present at the last published seq
	cleared bool            // the set was cleared since the last publish
	state   ResidencyState
	epoch   uint64
	seq     uint64
	// pubState, pubCount and pubDigest describe the set as of seq.
	pubState  ResidencyState
	pubCount  uint64
	pubDigest uint64
	ring      []sentDelta // the last ResendWindow deltas, oldest first
	status    EngineStatus
	statusSeq uint64
	fullWant  map[string]bool // routers owed a full state

	wake   chan struct{} // a batch is full
	fullCh chan struct{}
	resend chan *resyncMsg
}

type sentDelta struct {
	seq uint64
	msg []byte
}

func newPublisher(c *core, cfg SidecarConfig) *Publisher {
	cfg.defaults()
	return &Publisher{
		c: c, cfg: cfg,
		set:      newKeySet(0),
		changed:  map[uint64]bool{},
		state:    StateExact,
		pubState: StateExact,
		epoch:    uint64(c.now().UnixNano()),
		fullWant: map[string]bool{},
		wake:     make(chan struct{}, 1),
		fullCh:   make(chan struct{}, 1),
		resend:   make(chan *resyncMsg, 64),
	}
}

// note records that k changed; was is its presence before the change.
func (p *Publisher) note(k uint64, was bool) {
	if p.cleared {
		return
	}
	if prev, seen := p.changed[k]; seen {
		if prev == p.set.Has(k) {
			delete(p.changed, k) // back where it was published
		}
		return
	}
	p.changed[k] = was
}

// Apply records one residency delta.
func (p *Publisher) Apply(d ResidencyDelta) {
	p.mu.Lock()
	if d.Cleared {
		p.set = newKeySet(0)
		p.changed = map[uint64]bool{}
		p.cleared = true
	}
	for _, k := range d.Removed {
		if p.set.Remove(k) {
			p.note(k, true)
		}
	}
	for _, k := range d.Added {
		if p.set.Add(k) {
			p.note(k, false)
		}
	}
	if d.State != StateUnknown {
		p.state = d.State
	}
	full := len(p.changed) >= maxKeysPerPacket
	p.mu.Unlock()
	if full {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// Reset replaces the resident set with keys (a full snapshot from the
// tracker, e.g. after a resync with the engine); only the difference is
// published.
func (p *Publisher) Reset(keys []uint64, state ResidencyState) {
	next := newKeySet(len(keys))
	for _, k := range keys {
		next.Add(k)
	}
	var removed []uint64
	p.mu.Lock()
	p.set.Each(func(k uint64) {
		if !next.Has(k) {
			removed = append(removed, k)
		}
	})
	p.mu.Unlock()
	p.Apply(ResidencyDelta{Removed: removed, Added: keys, State: state})
}

// SetStatus replaces the engine summary sent at the next StatusInterval.
func (p *Publisher) SetStatus(s EngineStatus) {
	s.Adapters = slices.Clone(s.Adapters)
	p.mu.Lock()
	p.status = s
	p.mu.Unlock()
}

// Len returns the number of resident keys the publisher holds.
func (p *Publisher) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.set.Len()
}

// flushLocked turns the pending changes into the next delta messages (none
// when there is nothing to publish). A batch of up to maxChunks packets is
// split into UDP-sized deltas with consecutive seqs, so it never races a
// TCP send; a larger batch (or a clear) is one message sent by TCP.
func (p *Publisher) flushLocked() [][]byte {
	if !p.cleared && len(p.changed) == 0 && p.state == p.pubState {
		return nil
	}
	var added, removed []uint64
	if p.cleared {
		p.set.Each(func(k uint64) { added = append(added, k) })
	} else {
		for k, was := range p.changed {
			if was {
				removed = append(removed, k)
			} else {
				added = append(added, k)
			}
		}
	}
	step := len(added) + len(removed)
	if !p.cleared && step > maxKeysPerPacket && step <= maxChunks*maxKeysPerPacket {
		step = maxKeysPerPacket
	}
	var msgs [][]byte
	first := true
	for first || len(added)+len(removed) > 0 {
		m := residencyMsg{From: p.c.cfg.Name, Epoch: p.epoch, Cleared: p.cleared && first, State: p.state}
		if m.Cleared {
			p.pubCount, p.pubDigest = 0, 0
		}
		first = false
		nr := min(step, len(removed))
		m.Removed, removed = removed[:nr], removed[nr:]
		na := min(step-nr, len(added))
		m.Added, added = added[:na], added[na:]
		for _, k := range m.Removed {
			p.pubCount--
			p.pubDigest -= mixKey(k)
		}
		for _, k := range m.Added {
			p.pubCount++
			p.pubDigest += mixKey(k)
		}
		p.seq++
		m.Seq, m.Count, m.Digest = p.seq, p.pubCount, p.pubDigest
		msg := encodeResidency(msgResidencyDelta, &m)
		if len(p.ring) >= p.cfg.ResendWindow {
			p.ring = slices.Delete(p.ring, 0, len(p.ring)-p.cfg.ResendWindow+1)
		}
		p.ring = append(p.ring, sentDelta{seq: p.seq, msg: msg})
		msgs = append(msgs, msg)
	}
	p.cleared = false
	clear(p.changed)
	p.pubState = p.state
	return msgs
}

func (p *Publisher) flush() {
	p.mu.Lock()
	msgs := p.flushLocked()
	p.mu.Unlock()
	p.sendAll(msgs)
}

func (p *Publisher) sendAll(msgs [][]byte) {
	for _, msg := range msgs {
		for _, r := range *p.c.routers.Load() {
			p.c.send(r, msg)
		}
	}
}

// fullLocked publishes pending changes and encodes the full state at the
// resulting seq.
func (p *Publisher) fullLocked() (delta [][]byte, full []byte) {
	delta = p.flushLocked()
	m := residencyMsg{From: p.c.cfg.Name, Epoch: p.epoch, Seq: p.seq, State: p.pubState, Count: p.pubCount, Digest: p.pubDigest}
	m.Added = make([]uint64, 0, p.set.Len())
	p.set.Each(func(k uint64) { m.Added = append(m.Added, k) })
	return delta, encodeResidency(msgResidencyFull, &m)
}

func (p *Publisher) sendStatus() {
	p.mu.Lock()
	p.statusSeq++
	m := statusMsg{From: p.c.cfg.Name, Seq: p.statusSeq, Epoch: p.epoch, ResSeq: p.seq,
		Count: p.pubCount, Digest: p.pubDigest, ResState: p.pubState, Status: p.status}
	p.mu.Unlock()
	msg := encodeStatus(&m)
	for _, r := range *p.c.routers.Load() {
		p.c.send(r, msg)
	}
}

// routerJoined queues a full state for a router that just joined.
func (p *Publisher) routerJoined(name string) { p.wantFull(name) }

func (p *Publisher) wantFull(names ...string) {
	p.mu.Lock()
	for _, name := range names {
		p.fullWant[name] = true
	}
	p.mu.Unlock()
	select {
	case p.fullCh <- struct{}{}:
	default:
	}
}

// handleResync queues a router's resync request; it runs on memberlist's
// receive goroutine and never blocks.
func (p *Publisher) handleResync(body []byte) error {
	m, err := decodeResync(body)
	if err != nil {
		return err
	}
	select {
	case p.resend <- m:
	default: // the router will ask again
	}
	return nil
}

// answerResync resends the deltas a router missed, or queues a full state.
func (p *Publisher) answerResync(m *resyncMsg) {
	mem, ok := p.c.memberByName(m.From)
	if !ok || mem.meta.Role != RoleRouter {
		p.c.stats.UnknownSender.Add(1)
		return
	}
	p.mu.Lock()
	var msgs [][]byte
	answered := false
	if !m.Full && m.Epoch == p.epoch && m.HaveSeq <= p.seq &&
		(m.HaveSeq == p.seq || (len(p.ring) > 0 && p.ring[0].seq <= m.HaveSeq+1)) {
		answered = true
		want := m.Missing
		for _, d := range p.ring {
			if d.seq <= m.HaveSeq {
				continue
			}
			if len(m.Missing) > 0 {
				if len(want) == 0 || d.seq != want[0] {
					continue
				}
				want = want[1:]
			}
			msgs = append(msgs, d.msg)
		}
		answered = len(want) == 0
	}
	p.mu.Unlock()
	if !answered {
		p.wantFull(m.From)
		return
	}
	for _, msg := range msgs {
		p.c.send(mem.node, msg)
		p.c.stats.DeltasResent.Add(1)
	}
}

// run is the publisher loop: flush batches, send status, answer resyncs.
// Full states go through a separate worker so a slow TCP send never holds
// up deltas.
func (p *Publisher) run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); p.fullWorker(ctx) }()
	defer func() { <-done }()
	flush := time.NewTicker(p.cfg.FlushInterval)
	defer flush.Stop()
	status := time.NewTicker(p.cfg.StatusInterval)
	defer status.Stop()
	var fullC <-chan time.Time
	if p.cfg.FullInterval > 0 {
		full := time.NewTicker(p.cfg.FullInterval)
		defer full.Stop()
		fullC = full.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-flush.C:
			p.flush()
		case <-p.wake:
			p.flush()
		case <-status.C:
			p.sendStatus()
		case m := <-p.resend:
			p.answerResync(m)
		case <-fullC:
			var names []string
			for _, r := range *p.c.routers.Load() {
				names = append(names, r.Name)
			}
			p.wantFull(names...)
		}
	}
}

func (p *Publisher) fullWorker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.fullCh:
		}
		p.mu.Lock()
		want := p.fullWant
		p.fullWant = map[string]bool{}
		var delta [][]byte
		var full []byte
		if len(want) > 0 {
			delta, full = p.fullLocked()
		}
		p.mu.Unlock()
		p.sendAll(delta)
		for name := range want {
			mem, ok := p.c.memberByName(name)
			if !ok {
				continue
			}
			p.sendFull(mem.node, full)
		}
	}
}

func (p *Publisher) sendFull(to *memberlist.Node, full []byte) {
	if p.c.sendReliable(to, full) {
		p.c.stats.FullsSent.Add(1)
	}
}
