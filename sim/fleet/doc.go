// Package fleet owns the discrete-event fleet simulator behind `rolter
// bench routing`: E simulated engines (package engine, the same model
// `rolter sim` serves) behind R router replicas, each replica running the
// real strategies code with its own balancer and its own Tracker, so
// in-flight counts are local to a replica as in production. Engine state
// (queue depth, KV residency derived from the engines' KV events, LMCache
// occupancy, resident adapters) reaches the replicas after a configurable
// gossip delay. An oracle with perfect, instant knowledge bounds what any
// strategy can reach.
//
// Everything runs in virtual time in one goroutine per run: no sleeping,
// no clock reads, and identical inputs and seed give identical results.
// Independent runs share a prepared Workload read-only and may run in
// parallel.
package fleet
