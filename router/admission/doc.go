// Package admission owns rolter's admission control: when every eligible
// engine of a pool is saturated, a request waits in its router's queue
// instead of joining an engine queue nobody can reorder.
//
// It provides three pieces, none of which speaks HTTP:
//
//   - Thresholds decides from what a router already knows of an engine
//     (its load, gossiped waiting queue and KV usage, queued prefill tokens)
//     whether the engine is saturated and how many more requests it takes
//     before it is (its headroom). Each band sees the thresholds scaled by
//     its Fill (Config.For), so lower bands leave engines room, and a short
//     queue, for the bands above; Config.Room is the pick's test.
//   - Queue is a pure, single-threaded data structure over an injected
//     time: one FIFO per band (critical, standard, sheddable), each bounded
//     in length (counting other routers' waiters) and wait (TTL); higher
//     bands leave first; a lower-band waiter that has waited PromoteAfter
//     per band step is served ahead of the band above for at most one
//     release in PromoteEvery (the starvation guard); within a band, flows
//     (API keys or a fairness id) share by deficit round-robin. AdmitsNow
//     and Release are the admission decisions, which the fleet simulator
//     calls in virtual time as the Gate does in real time.
//   - Gate wraps one Queue for concurrent requests on real time: Admit
//     blocks a request until it is released, its TTL passes, or its context
//     ends; a pump goroutine runs only while someone waits.
//
// Release is decided by each router alone from the state it sees and what
// the other routers report waiting: per band, this router's Share of the
// pool's headroom against their waiters of that band and above, so
// routers that see the same freed capacity do not all send their queue at
// it, and a lower band yields to higher-band work on any router. Spread
// and Estimate scale a router's own engine counts while the others'
// arrive late.
package admission
