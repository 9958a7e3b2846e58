// Package mesh owns rolter's gossip membership (hashicorp/memberlist, one
// pool for routers and sidecars), the summary wire format sidecars and
// routers speak, and the router's cluster view: per engine, its resident
// KV block keys, queue, KV usage, LMCache occupancy and resident adapters,
// each with an age and a state (EXACT, DEGRADED, STALE, UNKNOWN).
//
// # Members
//
// A process is one of two members over a shared core (memberlist
// lifecycle, node meta, encryption, sending, the live members by role,
// counters):
//
//   - Sidecar (StartSidecar): its Publisher mirrors one engine's resident
//     keys and status and sends them to every router.
//   - Router (StartRouter): its View is what strategies (Targets) and
//     discovery (Engines, Changed) read; the Router itself exchanges loads
//     and learned records with the other routers (PublishLoads, Share,
//     Learned, PublishConfigVersion) and answers the admin API (Snapshot).
//
// memberlist calls into the core from its own goroutines (delegate,
// events); the core hands each message to the role. Nothing is sent on the
// network under a lock: a router that must ask a sidecar for a resend
// queues the request under the engine's lock and sends it after releasing
// it.
//
// # What travels how
//
// memberlist's epidemic broadcast queue carries roughly 20 KB/s per node
// and delivers every message to every member. Only routers need engine
// summaries, so nothing of ours rides it: memberlist gossip carries
// membership and node meta (role, engine URL, models, build, protocol
// range; under 512 B) and every summary is a direct send.
//
//   - Residency deltas (sidecar → each router): changes are batched every
//     FlushInterval (50 ms, or as soon as 150 keys are pending), sequenced
//     per sidecar epoch, and sent by UDP (SendBestEffort); a batch that does
//     not fit a packet goes by TCP (SendReliable). A key costs 8 bytes:
//     sorted keys are written as varint gaps or fixed64, whichever is
//     smaller (a sparse batch of random keys has gaps needing 9 varint
//     bytes; a dense full state has gaps of about 7).
//   - Every delta and every status carries the count and an
//     order-independent digest of the set after it. A router that sees a
//     sequence gap buffers what follows and, if the gap outlives a short
//     reordering wait, asks for the missing sequence numbers (resync),
//     which the sidecar resends from a window of recent deltas; a
//     digest mismatch, an unknown epoch or a gap beyond the window gets a
//     full state over a TCP stream. So a late joiner or a lossy link
//     converges without any periodic full push; FullInterval (5 min) is
//     only a safety net. A router that joins gets a full state at once.
//   - Engine status (running, waiting, KV usage, prefix counters, block
//     size, LoRA slots and resident adapters, LMCache) goes to each router
//     by UDP every 250 ms; its loss is repaired by the next one.
//   - Routers send each other their per-engine loads (in-flight count and
//     queued-prefill tokens) by UDP when the router publishes them, which
//     router/meshstate does 2 ms after a change: only the engines whose
//     load changed since the last send, stamped with the oldest change's
//     time (the receiver keeps rolter_mesh_peer_load_age_seconds) and the
//     send time (PeerPublished, PeerNews: what meshstate's order of
//     picks waits for); every 250 ms a repeat carries every non-zero one.
//     The same messages carry the sender's latest intent (a pick pending,
//     Intend; sent alone at once when a request arrives) and whether it
//     is still pending; PeerIntents and PeerDelay (the intents' ages on
//     arrival) are what meshstate reads of them. Learned
//     records (prefix observations, session pins) go every 50 ms. View.Remote hands router/meshstate the raw
//     inputs of its load fold; what the records and loads mean is
//     meshstate's, not this package's.
//
// Router-to-router state also travels a second way, on purpose: every
// PushInterval (15 s) each router POSTs its adaptive telemetry and route
// stats to the others' admin APIs (adminapi.Pusher, to the admin
// addresses gossip or --peer-admin names). The two carry different things:
// gossip carries what must be fresh within a fraction of a second and
// fits a packet (per-engine loads, learned records, the applied
// config_version); the push carries reports of kilobytes to megabytes
// that only need to be seconds fresh, and it also works between routers
// that run without --gossip. The config_version travels both ways: GET
// /api/v1/adaptive-routing uses the gossiped one and falls back to the
// pushed one for a router that does not gossip.
//
// # Wire format
//
// Each message is one type byte and a protobuf message (schema:
// mesh.proto). It is encoded by hand with
// google.golang.org/protobuf/encoding/protowire rather than generated code:
// the messages are few and flat, the residency key lists need a custom
// packed encoding (gap-varint or fixed64) that generated code would copy
// through []uint64 anyway, decoding must enforce bounds field by field as
// it goes (a hostile peer must not make a router allocate), and the build
// needs no protoc. mesh.proto stays the reference for other
// implementations; unknown fields are skipped, and field 1 (protocol
// version) must lie in [ProtocolMin, ProtocolMax].
//
// # Trust
//
// Gossip is encrypted with memberlist's keyring (key from a file or
// ROLTER_GOSSIP_KEY, base64), required unless InsecureDev. Encryption
// authenticates the pool, not a member. Per-member identity does that
// (Config.Identity, the --gossip-tls-* flags): each member holds a
// certificate from the cluster CA whose common name is its name.
//
//   - Its meta carries a key id (the first 16 bytes of the certificate's
//     SHA-256); when a member joins, every member sends it its certificate
//     chain by TCP (type 7, unsigned: the CA's signature is what binds the
//     name to the key), and it sends its own to each of them. A receiver
//     verifies the chain against the CA, that the common name is the name
//     the member joined under, and that its key id is the one the live
//     member announces.
//   - A certificate grants one role: exactly one URI SAN, rolter:router or
//     rolter:sidecar (RoleURI). A process refuses to start with a
//     certificate for the other role or none, and a receiver takes a
//     member's messages only while the role it announces is the one its
//     certificate grants (else wrong_role): a sidecar's certificate
//     cannot speak as a router.
//   - When a certificate verifies, the two members derive the key they
//     share in their current sessions: P-256 ECDH of their certificates'
//     keys, through HKDF-SHA256 bound to both key ids and both sessions (a
//     random number each member draws at start and announces in its meta).
//     Every other message a member sends ends with its number in that
//     session (protobuf field 99, fixed64, counting from 1 per receiver)
//     and a MAC (field 100: the first 16 bytes of HMAC-SHA256 under the
//     pair key) over the type byte and everything before it. Only the
//     certificate's holder and the receiver can compute it: a receiver
//     takes a message only when the MAC checks under the key it shares
//     with the member field 2 names, and counts the rest in
//     rolter_gossip_rejected_total{reason} (no_mac, unknown_key, bad_mac,
//     bad_certificate, wrong_role). A message from a live member whose
//     certificate has not arrived asks for it (rate-limited), and a member
//     sends nothing but its certificate to one it shares no key with yet.
//     A MAC costs 1-2 µs and 29 bytes a message; a signature would cost
//     the receiver about 100 times that.
//   - Replays: a receiver keeps, per sender, the highest number it took and
//     a 256-message window below it; a number taken before, older than the
//     window or missing is refused (replay). A message recorded before
//     either member restarted was sealed in another session and does not
//     check (bad_mac). Numbers and windows are kept per member name (about
//     100 bytes each, at most 4096 names; those of members gone are
//     dropped first), across a leave and rejoin in the same session.
//   - memberlist's alive delegate refuses a joiner without a key id
//     (no_identity) and one that takes the name of a live member whose
//     certificate verified, from another address with another key
//     (name_taken, logged with both addresses). A restart at the same
//     address with a renewed certificate is accepted.
//   - Renewal: SetIdentity (the commands call it when the certificate
//     files are reloaded, on SIGHUP or when they change) swaps in a
//     certificate for the same name and role, announces its key id and
//     sends it to every member; refused files leave the running one.
//
// What it does not cover: memberlist's own membership messages, which the
// pool key alone protects (a holder of it can still disturb membership,
// for example announce another session in a member's name, which makes
// the others refuse that member's messages until it refutes), and a
// member that takes a name before its holder joins (memberlist keeps the
// first; the holder then fails to start with ErrNameConflict, and nobody
// accepts the squatter's messages, which it cannot sign). Without
// identity every message is taken from any member holding the pool key,
// as before; a member with identity refuses those.
//
// Whoever speaks, every received value is bounded: strings, adapters,
// engines and blocks per engine and in total are capped; floats are
// clamped to [0,1] and NaN refused; counts are clamped. Dropped messages
// and keys are counted in Stats.
//
// # Router view
//
// View keeps one entry per engine URL (as the sidecar announces it, see
// NormalizeURL). Strategies read it through Targets, which implements
// strategies.Residency, CacheSignal and AdapterResidency for a route's
// target list without locks or allocation: the residency index is an
// open-addressing uint64 set whose slots are atomics (one writer per
// engine, lock-free readers), everything else is atomics or immutable
// snapshots. An engine whose sidecar left, died or fell silent for
// StaleAfter (3 s) is STALE, its index is freed, and it reads as unknown.
package mesh
