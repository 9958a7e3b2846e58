// Package routerd owns the `rolter router` process: what runs between the
// command line and the data plane. Config (the flags, typed) → Open →
// Run. It holds
//
//   - the control-plane settings and their rules (config.go: node ids kept
//     in the data dir, TLS and tokens required once a router is not alone
//     on loopback),
//   - the config follower (follow.go): every config_version the Raft store
//     commits becomes a data-plane snapshot, with discover routes filled
//     from the gossip view (discover.go),
//   - the mesh hooks (hooks.go): the router's EngineView, SourceFactory and
//     Learner over cluster/mesh's View, delegating to router/meshstate,
//   - the router inventory (inventory.go): Raft peers, telemetry endpoints
//     and the admin API's router and engine lists from gossip,
//   - standalone mode and the SIGHUP reload (Reload; the signal itself is
//     the command's), and the listeners' TLS sources (tls.go).
//
// It declares the small interfaces it consumes (the store, the data plane,
// the engine polls, the gossip view), so the follower and discovery are
// tested with fakes, without Raft or gossip.
package routerd
