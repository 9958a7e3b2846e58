package admission

import "math"

// Engine is what a router knows of one engine when it decides admission.
type Engine struct {
	// Load is the requests on the engine as the router's strategies see
	// them: its own in-flight plus the mesh's estimate of everyone else's.
	Load uint64
	// Waiting is the engine's waiting queue as its sidecar last reported
	// it; WaitingOK is false when no fresh report exists.
	Waiting   uint64
	WaitingOK bool
	// KVUsage is the engine's KV-cache usage in [0,1]; KVOK is false when
	// unknown.
	KVUsage float64
	KVOK    bool
	// QueuedPrefill is the prompt tokens of requests on the engine still
	// waiting for a first token (this router's and the others').
	QueuedPrefill uint64
}

// Thresholds say when an engine is saturated. A zero field disables its
// signal; an engine is saturated when any enabled signal reaches its
// threshold. Signals the router does not know (no sidecar report) are
// not taken as saturated.
type Thresholds struct {
	// MaxLoad is the load (running + waiting as the router sees it) at
	// which an engine is saturated.
	MaxLoad uint64
	// MaxWaiting is the engine's own waiting queue at which it is
	// saturated.
	MaxWaiting uint64
	// MaxKVUsage is the KV-cache usage in (0,1] at which it is saturated.
	MaxKVUsage float64
	// MaxQueuedPrefill is the queued prefill tokens at which it is
	// saturated.
	MaxQueuedPrefill uint64
}

// Enabled reports whether any signal is enabled.
func (t Thresholds) Enabled() bool {
	return t.MaxLoad > 0 || t.MaxWaiting > 0 || t.MaxKVUsage > 0 || t.MaxQueuedPrefill > 0
}

// Scaled returns t with its count and prefill thresholds times f (f ≤ 0
// or ≥ 1: t unchanged). A scaled threshold stays at least 1, so a band
// with a small fill is still admitted to an idle engine. MaxKVUsage is
// kept: KV cache is a hard limit every band shares (past it the engine
// preempts, whoever is waiting).
func (t Thresholds) Scaled(f float64) Thresholds {
	if f <= 0 || f >= 1 {
		return t
	}
	scale := func(v uint64) uint64 {
		if v == 0 {
			return 0
		}
		return max(uint64(math.Round(float64(v)*f)), 1)
	}
	t.MaxLoad = scale(t.MaxLoad)
	t.MaxWaiting = scale(t.MaxWaiting)
	t.MaxQueuedPrefill = scale(t.MaxQueuedPrefill)
	return t
}

// Saturated reports whether e has reached a threshold.
func (t Thresholds) Saturated(e Engine) bool { return t.Headroom(e) == 0 }

// Headroom is how many more requests e takes before it is saturated: the
// smallest gap under a count threshold (load, waiting), and at most 1
// while a queued-prefill threshold is enabled (how many requests fit
// under it depends on their prompts, which count once they are picked).
// An engine below every threshold with no count threshold enabled has a
// headroom of 1 too: one request per look, whose effect the next look
// shows.
func (t Thresholds) Headroom(e Engine) int {
	if t.MaxKVUsage > 0 && e.KVOK && e.KVUsage >= t.MaxKVUsage {
		return 0
	}
	if t.MaxQueuedPrefill > 0 && e.QueuedPrefill >= t.MaxQueuedPrefill {
		return 0
	}
	room, counted := uint64(math.MaxInt32), false
	if t.MaxLoad > 0 {
		room, counted = min(room, gap(t.MaxLoad, e.Load)), true
	}
	if t.MaxWaiting > 0 && e.WaitingOK {
		room, counted = min(room, gap(t.MaxWaiting, e.Waiting)), true
	}
	if t.MaxQueuedPrefill > 0 {
		room = min(room, 1)
	}
	if !counted {
		return 1
	}
	return int(room)
}

// Utilization is e's fill against its thresholds: the largest ratio of a
// signal to its threshold (1 and above: saturated). It is what the
// saturation gauge exports for autoscalers; 0 when nothing is enabled or
// known.
func (t Thresholds) Utilization(e Engine) float64 {
	u := 0.0
	if t.MaxLoad > 0 {
		u = max(u, float64(e.Load)/float64(t.MaxLoad))
	}
	if t.MaxWaiting > 0 && e.WaitingOK {
		u = max(u, float64(e.Waiting)/float64(t.MaxWaiting))
	}
	if t.MaxKVUsage > 0 && e.KVOK {
		u = max(u, e.KVUsage/t.MaxKVUsage)
	}
	if t.MaxQueuedPrefill > 0 {
		u = max(u, float64(e.QueuedPrefill)/float64(t.MaxQueuedPrefill))
	}
	return u
}

// Spread is the factor by which a router scales its own count on an
// engine (in-flight, queued prefill) to estimate what every router has
// put there lately: (own + peers) / own over the waiters queued for the
// pool, own counted at least 1, and at most routers. The other routers'
// counts reach a router a gossip delay late; routers that all have
// waiters release in proportion to them, so while this router added its
// count the others have likely added theirs. 1 when no other router has
// waiters (or the router is alone).
func Spread(own, peers, routers int) float64 {
	if peers <= 0 || routers <= 1 {
		return 1
	}
	return min(float64(own+peers)/float64(max(own, 1)), float64(routers))
}

// Estimate is an engine count as a router estimates it from its own
// count, the other routers' last reported and the Spread factor: the
// larger of own + peers and own × spread.
func Estimate(own, peers uint64, spread float64) uint64 {
	return max(own+peers, uint64(float64(own)*spread))
}

func gap(limit, v uint64) uint64 {
	if v >= limit {
		return 0
	}
	return limit - v
}

// Share is how many of a pool's headroom requests one router releases
// now: headroom × own / (own + peers), rounded up, where own is the work
// waiting in this router's queue and peers the work the other routers last
// reported waiting for the same pool; never more than own. With peers
// unknown (0) a router takes the whole headroom. Every router computing
// its share of the same freed capacity keeps the routers together from
// sending more than the capacity that freed.
func Share(headroom, own, peers int) int {
	if headroom <= 0 || own <= 0 {
		return 0
	}
	if peers <= 0 {
		return min(headroom, own)
	}
	n := (headroom*own + own + peers - 1) / (own + peers)
	return min(max(n, 1), own)
}
