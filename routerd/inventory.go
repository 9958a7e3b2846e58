package routerd

import (
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/adminapi"
	"github.com/rolter/rolter/cluster"
	"github.com/rolter/rolter/cluster/mesh"
)

// meshInventory is adminapi's Inventory and EngineInventory, the Raft
// store's PeerSource and the telemetry pusher's Endpoints over the gossip
// view. Routers that left or died stay listed as not alive (the Raft
// leader removes them after its grace) until forget after they went.
type meshInventory struct {
	view    poolSnapshot
	engines adminapi.EngineInventory
	self    string
	static  cluster.StaticPeers // --join id=host:port, kept as given
	admin   []string            // --peer-admin, kept as given
	now     func() time.Time
	// adminScheme is how the pool's routers serve their admin ports:
	// "https" when this one has --admin-tls-cert ("" means "http").
	adminScheme string

	mu   sync.Mutex
	seen map[string]seenRouter
}

type seenRouter struct {
	info    mesh.RouterInfo
	goneAt  time.Time // zero while in the pool
	present bool
}

// forgetAfter is how long a router gone from the pool is still reported.
const forgetAfter = 24 * time.Hour

// poolSnapshot is the gossip view as the inventory reads it: every
// member's announcement. Snapshot never blocks.
type poolSnapshot interface {
	Snapshot() mesh.Snapshot
}

func newMeshInventory(node *mesh.Router, self string, static cluster.StaticPeers, admin []string) *meshInventory {
	return &meshInventory{view: node, engines: adminapi.MeshEngines{Mesh: node}, self: self, static: static, admin: admin,
		now: time.Now, seen: map[string]seenRouter{}}
}

// routers returns every router gossip knows or knew, this one excluded,
// sorted by node id, and whether each is in the pool now.
func (m *meshInventory) routers() []seenRouter {
	snap := m.view.Snapshot()
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.seen {
		r.present = false
		m.seen[id] = r
	}
	for _, r := range snap.Routers {
		if r.NodeID == m.self || r.NodeID == "" {
			continue
		}
		m.seen[r.NodeID] = seenRouter{info: r, present: true}
	}
	out := make([]seenRouter, 0, len(m.seen))
	for id, r := range m.seen {
		if !r.present {
			if r.goneAt.IsZero() {
				r.goneAt = now
				m.seen[id] = r
			} else if now.Sub(r.goneAt) > forgetAfter {
				delete(m.seen, id)
				continue
			}
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b seenRouter) int { return strings.Compare(a.info.NodeID, b.info.NodeID) })
	return out
}

// hostFrom fills an unspecified host in addr (0.0.0.0, ::, empty) with the
// host of the member's gossip address.
func hostFrom(addr, gossip string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		if gh, _, err := net.SplitHostPort(gossip); err == nil {
			return net.JoinHostPort(gh, port)
		}
	}
	return addr
}

// RaftPeers implements cluster.PeerSource: the static --join peers, and
// every router announcing a Raft address in the pool (alive) or gone from
// it (not alive).
func (m *meshInventory) RaftPeers() []cluster.Peer {
	out := slices.Clone(m.static)
	for _, r := range m.routers() {
		if r.info.RaftAddr == "" || slices.ContainsFunc(m.static, func(p cluster.Peer) bool { return p.ID == r.info.NodeID }) {
			continue
		}
		out = append(out, cluster.Peer{ID: r.info.NodeID, Addr: hostFrom(r.info.RaftAddr, r.info.Address), Alive: r.present})
	}
	return out
}

// TelemetryEndpoints implements adminapi.Endpoints: --peer-admin and the
// admin addresses the routers in the pool announce.
func (m *meshInventory) TelemetryEndpoints() []string {
	out := slices.Clone(m.admin)
	for _, r := range m.routers() {
		if !r.present || r.info.AdminAddr == "" {
			continue
		}
		u := m.scheme() + "://" + hostFrom(r.info.AdminAddr, r.info.Address)
		if !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// Routers implements adminapi.Inventory.
func (m *meshInventory) Routers() []adminapi.RouterInfo {
	out := []adminapi.RouterInfo{{RouterInfo: mesh.RouterInfo{NodeID: m.self}, Alive: true}}
	for _, r := range m.routers() {
		ri := adminapi.RouterInfo{RouterInfo: r.info, Alive: r.present}
		if r.info.AdminAddr != "" {
			ri.AdminAddr = hostFrom(r.info.AdminAddr, r.info.Address)
		}
		out = append(out, ri)
	}
	return out
}

// Engines implements adminapi.EngineInventory.
func (m *meshInventory) Engines() []mesh.EngineSnapshot { return m.engines.Engines() }

// scheme is the scheme of the pool's admin URLs.
func (m *meshInventory) scheme() string {
	if m.adminScheme == "" {
		return "http"
	}
	return m.adminScheme
}
