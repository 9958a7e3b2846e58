// Package fleet owns the discrete-event fleet simulator behind `rolter
// bench routing`: E simulated engines (package engine, the same model
// `rolter sim` serves) behind R router replicas, each replica running the
// real strategies code with its own balancer and its own Tracker, so
// in-flight counts are local to a replica as in production. Engine state
// (queue depth, KV residency derived from the engines' KV events, LMCache
// occupancy, resident adapters) reaches the replicas after a configurable
// gossip delay. The replicas run the router's own mesh code, package
// router/meshstate, over a virtual-time transport (mesh.go): they share
// prefix observations and session pins through the balancers'
// ObservePrefixRemote and PinSession hooks, fold the other replicas'
// published in-flight counts into each engine's load, and pass the
// strategies RouteContext.QueuedPrefill (per engine, the uncached prompt
// tokens of requests without a first token yet: the replica's own, live,
// plus the others' as last published), everything the others send
// arriving after the gossip delay (Config.Isolated turns the exchange
// off). An oracle
// with perfect, instant knowledge bounds what any strategy can reach.
//
// Everything runs in virtual time in one goroutine per run: no sleeping,
// no clock reads, and identical inputs and seed give identical results.
// Independent runs share a prepared Workload read-only and may run in
// parallel.
package fleet
