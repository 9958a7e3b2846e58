// Package fleet owns `rolter bench fleet`: it checks the discrete-event
// fleet simulator (sim/fleet, the model behind `rolter bench routing`)
// against real processes. For every (strategy, router count) it starts R
// `rolter router` processes forming a Raft cluster and a gossip mesh, E
// `rolter sim` engines sped up by Config.Speed with KV events on, each with
// its `rolter sidecar`, replays the first requests of a trace through the
// routers at a load relative to the fleet's capacity, and measures the
// prefix-cache hit rate from the engines' own vllm:prefix_cache_* counters
// and TTFT and latency per request on the engines' clock, from each
// request's scheduled send time (rolter sim --client-clock; the client's
// own figures, scaled back to engine time, are kept beside them). Beside
// each measurement it runs sim/fleet on the same workload, engines,
// routers, load and seed, the run `rolter bench routing` makes for them,
// and joins the two request by request (requests.go).
//
// Children are supervised by package supervise; each run gets a fresh
// fleet (cold caches, new Raft state), so runs do not leak into each other.
package fleet
