// Package fleet owns the discrete-event fleet simulator behind `rolter
// bench routing`: E simulated engines (package engine, the same model
// `rolter sim` serves) behind R router replicas, each replica running the
// real strategies code with its own balancer and its own Tracker, so
// in-flight counts are local to a replica as in production. Engine state
// (queue depth, KV residency derived from the engines' KV events, LMCache
// occupancy, resident adapters) reaches the replicas after a configurable
// gossip delay. The replicas form the mesh cmd/rolter/mesh.go runs between
// real routers (mesh.go here): they share prefix observations and session
// pins through the balancers' ObservePrefixRemote and PinSession hooks, and
// fold the other replicas' published in-flight counts into each engine's
// load, both after the gossip delay (Config.Isolated turns this off).
// With Config.PrefillSignal each replica also passes the strategies
// RouteContext.QueuedPrefill: per engine, the estimated uncached prompt
// tokens of requests that have not produced a first token yet. An oracle
// with perfect, instant knowledge bounds what any strategy can reach.
//
// Everything runs in virtual time in one goroutine per run: no sleeping,
// no clock reads, and identical inputs and seed give identical results.
// Independent runs share a prepared Workload read-only and may run in
// parallel.
package fleet
