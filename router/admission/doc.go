// Package admission owns rolter's admission control: when every eligible
// engine of a pool is saturated, a request waits in its router's queue
// instead of joining an engine queue nobody can reorder.
//
// It provides three pieces, none of which speaks HTTP:
//
//   - Thresholds decides from what a router already knows of an engine
//     (its load, gossiped waiting queue and KV usage, queued prefill tokens)
//     whether the engine is saturated and how many more requests it takes
//     before it is (its headroom).
//   - Queue is a pure, single-threaded data structure over an injected
//     time: one FIFO per band (critical, standard, sheddable), each bounded
//     in length and wait (TTL); higher bands leave first; a lower-band
//     waiter that has waited PromoteAfter per band step is served ahead of
//     the band above (the starvation guard); within a band, flows (API keys
//     or a fairness id) share by deficit round-robin. The fleet simulator
//     drives it in virtual time.
//   - Gate wraps one Queue for concurrent requests on real time: Admit
//     blocks a request until it is released, its TTL passes, or its context
//     ends; a pump goroutine runs only while someone waits.
//
// Release is decided by each router alone from the state it sees: the
// number released per update is the pool's headroom times this router's
// share of the queued work (Share), so routers that see the same freed
// capacity do not all send their queue at it.
package admission
