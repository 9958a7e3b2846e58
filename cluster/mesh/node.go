package mesh

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Errors returned when starting a node.
var (
	// ErrNoGossipKey: encryption is required and no key was configured.
	ErrNoGossipKey = errors.New("mesh: gossip encryption key required (set ROLTER_GOSSIP_KEY or a key file, or use --insecure-dev)")
	// ErrBadGossipKey: the configured key is not base64 of 16, 24 or 32 bytes.
	ErrBadGossipKey = errors.New("mesh: gossip key must be base64 of 16, 24 or 32 bytes")
)

// KeyEnv is the environment variable holding the base64 gossip key.
const KeyEnv = "ROLTER_GOSSIP_KEY"

// LoadKey reads the gossip key from path (when non-empty) or from the
// KeyEnv variable through getenv. It returns nil, nil when neither is set;
// the caller decides whether that is allowed (InsecureDev).
func LoadKey(path string, getenv func(string) string) ([]byte, error) {
	var raw string
	switch {
	case path != "":
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("mesh: gossip key file: %w", err)
		}
		raw = string(b)
	case getenv != nil:
		raw = getenv(KeyEnv)
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, ErrBadGossipKey
	}
	if err := memberlist.ValidateKey(key); err != nil {
		return nil, ErrBadGossipKey
	}
	return key, nil
}

// Config configures one pool member.
type Config struct {
	// Name is the unique memberlist node name (also the node id).
	Name string
	// Meta is announced with membership; Role must be set. Meta.NodeID
	// defaults to Name, protocol versions to this build's.
	Meta Meta
	// BindAddr/BindPort: where to listen (port 0 picks one). Ignored when
	// Transport is set.
	BindAddr string
	BindPort int
	// AdvertiseAddr/AdvertisePort override the announced address.
	AdvertiseAddr string
	AdvertisePort int
	// Key is the gossip encryption key (16/24/32 bytes). Required unless
	// InsecureDev.
	Key         []byte
	InsecureDev bool
	// Transport replaces memberlist's UDP/TCP transport (tests: Metered).
	Transport memberlist.NodeAwareTransport
	// Tune, when set, adjusts the memberlist config last (test intervals).
	Tune   func(*memberlist.Config)
	Logger *slog.Logger
	// Now is the clock; defaults to time.Now.
	Now func() time.Time

	Sidecar SidecarConfig
	Router  RouterConfig
}

// udpBudget is the largest message sent by UDP: memberlist's 1400-byte
// packet minus encryption (29 B), the user-message byte and headroom.
const udpBudget = 1300

// Node is one member of the gossip pool: a sidecar (with a Publisher) or a
// router (with a View). Start it with Start; stop it with Close.
type Node struct {
	cfg    Config
	log    *slog.Logger
	now    func() time.Time
	ml     *memberlist.Memberlist
	meta   []byte
	stats  Stats
	pub    *Publisher // sidecars
	view   *View      // routers
	router *routerShare

	mu      sync.RWMutex
	members map[string]member
	// routers and sidecars are immutable snapshots of the live members by
	// role, excluding this node, replaced on every membership change.
	routers  atomic.Pointer[[]*memberlist.Node]
	sidecars atomic.Pointer[[]*memberlist.Node]

	conflicts nameConflicts

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

type member struct {
	node *memberlist.Node
	meta Meta
}

// Start creates the node, starts its background loops and joins the pool
// through join (host:port list; empty starts a new pool).
func Start(ctx context.Context, cfg Config, join []string) (*Node, error) {
	if len(cfg.Key) == 0 && !cfg.InsecureDev {
		return nil, ErrNoGossipKey
	}
	if len(cfg.Key) > 0 {
		if err := memberlist.ValidateKey(cfg.Key); err != nil {
			return nil, ErrBadGossipKey
		}
	}
	if cfg.Name == "" {
		return nil, errors.New("mesh: node name required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Meta.NodeID == "" {
		cfg.Meta.NodeID = cfg.Name
	}
	if cfg.Meta.ProtoMin == 0 {
		cfg.Meta.ProtoMin, cfg.Meta.ProtoMax = ProtocolMin, ProtocolMax
	}
	cfg.Meta.EngineURL = NormalizeURL(cfg.Meta.EngineURL)
	meta, err := encodeMeta(&cfg.Meta)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), now: cfg.Now, meta: meta, members: map[string]member{}}
	n.routers.Store(&[]*memberlist.Node{})
	n.sidecars.Store(&[]*memberlist.Node{})
	switch cfg.Meta.Role {
	case RoleSidecar:
		n.pub = newPublisher(n, cfg.Sidecar)
	case RoleRouter:
		n.view = newView(n, cfg.Router)
		n.router = newRouterShare(n, cfg.Router)
	default:
		return nil, fmt.Errorf("mesh: unknown role %d", cfg.Meta.Role)
	}

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	mc.Delegate = (*delegate)(n)
	mc.Events = (*events)(n)
	mc.Conflict = (*conflictDelegate)(n)
	mc.EnableCompression = false // block keys are random: LZW only costs CPU
	mc.Logger = slog.NewLogLogger(levelHandler{n.log.Handler()}, slog.LevelDebug)
	if cfg.Meta.Role == RoleRouter {
		// A router receives ~25 messages/s from every sidecar; memberlist's
		// default 1024-message handoff queue drops bursts from 64+ sidecars.
		mc.HandoffQueueDepth = 16384
	}
	if cfg.Transport != nil {
		mc.Transport = cfg.Transport
	}
	if len(cfg.Key) > 0 {
		mc.SecretKey = cfg.Key
	}
	if cfg.Tune != nil {
		cfg.Tune(mc)
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("mesh: start memberlist: %w", err)
	}
	n.ml = ml
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	if n.pub != nil {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); n.pub.run(loopCtx) }()
	}
	if n.view != nil {
		n.wg.Add(2)
		go func() { defer n.wg.Done(); n.view.run(loopCtx) }()
		go func() { defer n.wg.Done(); n.router.run(loopCtx) }()
	}
	if len(join) > 0 {
		if _, err := ml.Join(join); err != nil {
			n.Close()
			return nil, fmt.Errorf("mesh: join %v: %w", join, err)
		}
		// The push/pull exchange of Join carried the pool's members: a
		// member already named like this node has been reported by now.
		if err := n.Conflict(); err != nil {
			_ = n.Leave(time.Second)
			return nil, err
		}
	}
	return n, nil
}

// Name returns the node name.
func (n *Node) Name() string { return n.cfg.Name }

// Addr returns the host:port others join through.
func (n *Node) Addr() string { return n.ml.LocalNode().FullAddress().Addr }

// Publisher returns the sidecar publisher (nil on a router).
func (n *Node) Publisher() *Publisher { return n.pub }

// View returns the router's cluster view (nil on a sidecar).
func (n *Node) View() *View { return n.view }

// Stats returns the node's counters.
func (n *Node) Stats() *Stats { return &n.stats }

// NumMembers returns the number of live members, this node included.
func (n *Node) NumMembers() int { return n.ml.NumMembers() }

// Join contacts seeds (host:port list) to join their pool; it succeeds when
// at least one answers. Start joins its seeds itself; Join is for a node
// that started before any seed was up.
func (n *Node) Join(seeds []string) error {
	if _, err := n.ml.Join(seeds); err != nil {
		return fmt.Errorf("mesh: join %v: %w", seeds, err)
	}
	return nil
}

// Leave announces departure (bounded by timeout) and stops the node.
func (n *Node) Leave(timeout time.Duration) error {
	err := n.ml.Leave(timeout)
	return errors.Join(err, n.Close())
}

// Close stops the node without announcing departure (peers detect it).
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	if n.cancel != nil {
		n.cancel()
	}
	err := n.ml.Shutdown()
	n.wg.Wait()
	return err
}

// send delivers msg to one member: UDP when it fits a packet, else the
// reliable TCP stream. Failures are counted, never returned to a loop.
func (n *Node) send(to *memberlist.Node, msg []byte) {
	var err error
	if len(msg) <= udpBudget {
		err = n.ml.SendBestEffort(to, msg)
	} else {
		err = n.ml.SendReliable(to, msg)
	}
	n.stats.MsgsSent.Add(1)
	n.stats.AppBytesSent.Add(uint64(len(msg)))
	if err != nil {
		n.stats.SendErrors.Add(1)
	}
}

func (n *Node) memberByName(name string) (member, bool) {
	n.mu.RLock()
	m, ok := n.members[name]
	n.mu.RUnlock()
	return m, ok
}

// rebuildRoles refreshes the per-role snapshots; called with n.mu held.
func (n *Node) rebuildRoles() {
	var routers, sidecars []*memberlist.Node
	for name, m := range n.members {
		if name == n.cfg.Name {
			continue
		}
		switch m.meta.Role {
		case RoleRouter:
			routers = append(routers, m.node)
		case RoleSidecar:
			sidecars = append(sidecars, m.node)
		}
	}
	n.routers.Store(&routers)
	n.sidecars.Store(&sidecars)
}

// delegate is the memberlist.Delegate view of a Node. Its methods run on
// memberlist's goroutines and never block.
type delegate Node

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.meta) > limit {
		return nil
	}
	return d.meta
}

// NotifyMsg dispatches on the leading type byte. buf is only valid during
// the call; decoders copy what they keep.
func (d *delegate) NotifyMsg(buf []byte) {
	n := (*Node)(d)
	if len(buf) == 0 {
		n.stats.Malformed.Add(1)
		return
	}
	n.stats.MsgsReceived.Add(1)
	var err error
	switch typ, body := buf[0], buf[1:]; {
	case n.view != nil && (typ == msgResidencyDelta || typ == msgResidencyFull || typ == msgEngineStatus):
		err = n.view.handle(typ, body)
	case n.view != nil && (typ == msgInflight || typ == msgLearned):
		err = n.router.handle(typ, body)
	case n.pub != nil && typ == msgResync:
		err = n.pub.handleResync(body)
	default:
		err = fmt.Errorf("%w: message type %d not for a %s", errMalformed, typ, n.cfg.Meta.Role)
	}
	if err != nil {
		n.stats.Malformed.Add(1)
		n.log.Debug("dropped gossip message", "err", err)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// events is the memberlist.EventDelegate view of a Node.
type events Node

func (e *events) NotifyJoin(mn *memberlist.Node)   { (*Node)(e).memberUp(mn, true) }
func (e *events) NotifyUpdate(mn *memberlist.Node) { (*Node)(e).memberUp(mn, false) }
func (e *events) NotifyLeave(mn *memberlist.Node) {
	n := (*Node)(e)
	n.mu.Lock()
	m, ok := n.members[mn.Name]
	delete(n.members, mn.Name)
	n.rebuildRoles()
	n.mu.Unlock()
	if ok && n.view != nil {
		n.view.memberGone(mn.Name, m.meta)
	}
}

func (n *Node) memberUp(mn *memberlist.Node, joined bool) {
	meta, err := decodeMeta(mn.Meta)
	if err != nil {
		n.stats.Malformed.Add(1)
		n.log.Debug("member with bad meta ignored", "member", mn.Name, "err", err)
		return
	}
	cp := *mn
	n.mu.Lock()
	n.members[mn.Name] = member{node: &cp, meta: meta}
	n.rebuildRoles()
	n.mu.Unlock()
	if mn.Name == n.cfg.Name {
		return
	}
	if n.view != nil {
		n.view.memberUp(mn.Name, meta)
	}
	if n.pub != nil && joined && meta.Role == RoleRouter {
		n.pub.routerJoined(mn.Name)
	}
}

// levelHandler maps memberlist's "[LEVEL]" prefixed log lines to slog
// levels.
type levelHandler struct{ slog.Handler }

func (h levelHandler) Handle(ctx context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, "[ERR]"):
		r.Level = slog.LevelError
	case strings.Contains(r.Message, "[WARN]"):
		r.Level = slog.LevelWarn
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// Stats are a node's counters; every field is read and written atomically.
type Stats struct {
	MsgsSent        atomic.Uint64
	MsgsReceived    atomic.Uint64
	AppBytesSent    atomic.Uint64
	SendErrors      atomic.Uint64
	Malformed       atomic.Uint64 // dropped: undecodable, bad version, bad values
	UnknownSender   atomic.Uint64 // dropped: sender not a known sidecar/router
	Conflicts       atomic.Uint64 // dropped: two sidecars claim one engine URL
	KeysDropped     atomic.Uint64 // keys refused by the per-engine/total caps
	EnginesRefused  atomic.Uint64 // engines refused by the engine cap
	ResyncsAsked    atomic.Uint64 // router: resync requests sent
	FullsApplied    atomic.Uint64 // router: full states applied
	Divergences     atomic.Uint64 // router: count/digest mismatch after apply
	FullsSent       atomic.Uint64 // sidecar: full states sent
	DeltasResent    atomic.Uint64 // sidecar: deltas resent on request
	LearnedDropped  atomic.Uint64 // router: learned records dropped (queue full)
	StatusReordered atomic.Uint64 // router: older status ignored
	NameConflicts   atomic.Uint64 // another member claimed this node's name, or this node another's
}
