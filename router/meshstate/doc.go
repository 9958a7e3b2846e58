// Package meshstate owns what router replicas share with each other, and
// the rules that turn it into routing inputs. One implementation serves
// `rolter router` (over cluster/mesh's gossip) and the fleet simulator
// behind `rolter bench routing` (over virtual-time gossip), so the
// benchmark measures the code that ships.
//
// It holds:
//
//   - the learned tables: prompt-prefix observations and session pins the
//     other routers shared (Learned TTL, MaxLearned entries, newest record
//     per key wins), handed to a pool's balancer through the strategies
//     mesh hooks (ObservePrefixRemote, PinSession) before its next pick for
//     a matching request, and this router's own observations shared once
//     per (key, target);
//   - the load fold: the load a strategy sees for an engine beyond this
//     router's own in-flight, max(engine running + waiting − own published
//     in-flight, Σ other routers' in-flight);
//   - the other routers' per-engine queued-prefill sums, added to this
//     router's own in RouteContext.QueuedPrefill;
//   - the publish cadence of this router's per-engine counts and sums:
//     PublishGap (2 ms) after a change, with every change made meanwhile
//     (Changed, Tick, Run woken by strategies.Tracker.Changes), and at
//     least every Heartbeat;
//   - the order of the first picks of an instant, against same-instant
//     herding: a router announces an intent when a request reaches it
//     (Intents, at once, not after PublishGap), and a pick at rank k
//     waits until every lower-ranked router with an intent of the same
//     instant has published the pick that followed it, at most
//     IntentBound(k) (rank 0 never waits; a pick after an intent is
//     published at once); on a transport without intents, the older
//     hold: a pick that follows this router's own pick within MaxHold
//     waits for a publication another router made after it (Arrive,
//     Ready, Release; Wait for the router, once per request,
//     cancellably);
//   - the router inventory the order needs: how many routers the mesh
//     has and this one's rank (Routers; admission reads the count).
//
// Time comes from an injected clock; the package starts no goroutine of
// its own except in Run, which the router calls and the simulator does not
// (it calls Tick at virtual times instead). The Transport interface is the
// gossip it needs.
package meshstate
