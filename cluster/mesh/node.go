package mesh

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/binary"
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
	// ErrGossipAddrInUse: another process listens on the gossip address.
	ErrGossipAddrInUse = errors.New("mesh: gossip address taken")
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

// Config configures one pool member. StartSidecar and StartRouter set
// Meta.Role; each reads its own part (Sidecar or Router) and ignores the
// other.
type Config struct {
	// Name is the unique memberlist node name (also the node id).
	Name string
	// Meta is announced with membership. Meta.NodeID defaults to Name,
	// protocol versions to this build's.
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
	// Identity, when set, is this member's certificate from the cluster
	// CA: Name must be empty or its common name, every message carries a
	// MAC under the key this member shares with its receiver, and only
	// messages whose MAC checks under the claimed sender's key are taken.
	// Without it a message is taken from any member that has the pool's
	// Key (see doc.go, Trust).
	Identity *Identity
	// Transport replaces memberlist's UDP/TCP transport (tests: Metered).
	Transport memberlist.NodeAwareTransport
	// Timing overrides memberlist's LAN failure-detection timings; zero
	// fields keep them.
	Timing Timing
	Logger *slog.Logger
	// Now is the clock; defaults to time.Now.
	Now func() time.Time

	Sidecar SidecarConfig
	Router  RouterConfig
}

// Timing is the membership protocol's timing. A zero field keeps
// memberlist's LAN default (in parentheses).
type Timing struct {
	ProbeInterval    time.Duration // how often a member probes another (1s)
	ProbeTimeout     time.Duration // how long it waits for the ack (500ms)
	GossipInterval   time.Duration // membership gossip rounds (200ms)
	PushPullInterval time.Duration // full membership exchange with one member (30s)
	TCPTimeout       time.Duration // stream dial and exchange (10s)
	// GossipToTheDead is how long a dead member still receives gossip (30s).
	GossipToTheDead time.Duration
	// SuspicionMult scales how long a suspect has to refute before it is
	// declared dead (4).
	SuspicionMult int
}

// FastTiming shortens the intervals so tests converge in about a second
// while keeping memberlist's failure-detection logic intact.
var FastTiming = Timing{
	ProbeInterval:    200 * time.Millisecond,
	ProbeTimeout:     100 * time.Millisecond,
	GossipInterval:   50 * time.Millisecond,
	PushPullInterval: 2 * time.Second,
	TCPTimeout:       2 * time.Second,
	GossipToTheDead:  2 * time.Second,
	SuspicionMult:    4,
}

func (t Timing) apply(mc *memberlist.Config) {
	set := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	set(&mc.ProbeInterval, t.ProbeInterval)
	set(&mc.ProbeTimeout, t.ProbeTimeout)
	set(&mc.GossipInterval, t.GossipInterval)
	set(&mc.PushPullInterval, t.PushPullInterval)
	set(&mc.TCPTimeout, t.TCPTimeout)
	set(&mc.GossipToTheDeadTime, t.GossipToTheDead)
	if t.SuspicionMult > 0 {
		mc.SuspicionMult = t.SuspicionMult
	}
}

// udpBudget is the largest message sent by UDP: memberlist's 1400-byte
// packet minus encryption (29 B), the user-message byte and headroom.
const udpBudget = 1300

// core is what a sidecar and a router member share: the memberlist
// lifecycle, this node's meta, the live members by role, sending, and the
// counters. The role plugs in through roleHooks.
type core struct {
	cfg Config
	log *slog.Logger
	now func() time.Time
	ml  *memberlist.Memberlist
	// tx is ml (or a test's recorder) once memberlist.Create returned.
	// memberlist delivers messages from inside Create, before that, so a
	// reply asked for then is counted as a send error, never sent to nil.
	tx   atomic.Pointer[sender]
	meta atomic.Pointer[[]byte] // encoded; SetIdentity replaces it
	// id is this member's certificate (SetIdentity replaces it); nil:
	// messages are neither authenticated nor checked.
	id atomic.Pointer[Identity]
	// udpMax is the largest message sent by UDP (udpBudget plus the MAC
	// when there is one).
	udpMax int
	stats  Stats
	hooks  roleHooks

	mu      sync.RWMutex
	members map[string]member
	// routers and sidecars are immutable snapshots of the live members by
	// role, excluding this node, replaced on every membership change.
	routers  atomic.Pointer[[]*memberlist.Node]
	sidecars atomic.Pointer[[]*memberlist.Node]

	conflicts nameConflicts
	taken     nameConflicts // names refused at join: held by a live member under another key

	// peers holds the verified certificate key of each member (under mu);
	// idOut queues this member's certificate for a member to receive it.
	peers   map[string]*peerKey
	idOut   chan identityReq
	idMu    sync.Mutex
	idSent  map[string]time.Time // last certificate sent to each member
	idAsked map[string]time.Time // last time a member's certificate was asked for
	// nums holds the message numbers per peer name (see numbers).
	numMu sync.Mutex
	nums  map[string]*numbers

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// sender is the part of memberlist a member sends through.
type sender interface {
	SendBestEffort(to *memberlist.Node, msg []byte) error
	SendReliable(to *memberlist.Node, msg []byte) error
}

// roleHooks is how memberlist's callbacks reach a role. Each runs on a
// memberlist goroutine and must not block.
type roleHooks struct {
	// handle applies one message of a type the role accepts; ok is false
	// for a type it does not.
	handle func(typ byte, body []byte) (ok bool, err error)
	// up: another member joined (joined) or updated its meta.
	up func(name string, meta Meta, joined bool)
	// gone: another member left or died.
	gone func(name string, meta Meta)
	// loops are started after memberlist and stopped by Close.
	loops []func(context.Context)
}

type member struct {
	node *memberlist.Node
	meta Meta
}

// newCore validates cfg and prepares a member of role; start brings it up.
func newCore(cfg Config, role Role) (*core, error) {
	if len(cfg.Key) == 0 && !cfg.InsecureDev {
		return nil, ErrNoGossipKey
	}
	if len(cfg.Key) > 0 {
		if err := memberlist.ValidateKey(cfg.Key); err != nil {
			return nil, ErrBadGossipKey
		}
	}
	if cfg.Identity != nil {
		if err := cfg.Identity.check(time.Now()); err != nil {
			return nil, err
		}
		switch cn := cfg.Identity.Name(); {
		case cfg.Name == "":
			cfg.Name = cn
		case cfg.Name != cn:
			return nil, fmt.Errorf("%w: node name %q is not the certificate's common name %q", ErrIdentity, cfg.Name, cn)
		}
		if got := cfg.Identity.Role(); got != role {
			return nil, fmt.Errorf("%w: the certificate of %q grants the role %s (URI SAN %s), not %s", ErrIdentity,
				cfg.Identity.Name(), got, RoleURI(got), role)
		}
		cfg.Meta.keyID = cfg.Identity.keyID
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, err
		}
		cfg.Meta.session = binary.LittleEndian.Uint64(b[:])
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
	cfg.Meta.Role = role
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
	c := &core{cfg: cfg, log: cfg.Logger.With("node", cfg.Name), now: cfg.Now, members: map[string]member{},
		udpMax: udpBudget}
	c.meta.Store(&meta)
	if cfg.Identity != nil {
		c.id.Store(cfg.Identity)
		c.udpMax += sealOverhead
		c.peers = map[string]*peerKey{}
		c.idOut = make(chan identityReq, 256)
		c.idSent, c.idAsked = map[string]time.Time{}, map[string]time.Time{}
		c.nums = map[string]*numbers{}
	}
	c.routers.Store(&[]*memberlist.Node{})
	c.sidecars.Store(&[]*memberlist.Node{})
	return c, nil
}

// start creates memberlist, starts the role's loops and joins the pool
// through join (host:port list; empty starts a new pool).
func (c *core) start(ctx context.Context, join []string) error {
	cfg := c.cfg
	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertiseAddr = cfg.AdvertiseAddr
	mc.AdvertisePort = cfg.AdvertisePort
	mc.Delegate = (*delegate)(c)
	mc.Events = (*events)(c)
	mc.Conflict = (*conflictDelegate)(c)
	if c.identity() != nil {
		mc.Alive = (*aliveDelegate)(c)
	}
	mc.EnableCompression = false // block keys are random: LZW only costs CPU
	mc.Logger = slog.NewLogLogger(levelHandler{c.log.Handler()}, slog.LevelDebug)
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
	cfg.Timing.apply(mc)
	ml, err := memberlist.Create(mc)
	if err != nil && strings.Contains(err.Error(), "address already in use") {
		// memberlist formats the listener's error with %v: match its text.
		return fmt.Errorf("%w: %s:%d is in use by another process (two routers or sidecars on one machine need "+
			"a --gossip port each): %v", ErrGossipAddrInUse, mc.BindAddr, mc.BindPort, err)
	}
	if err != nil {
		return fmt.Errorf("mesh: start memberlist: %w", err)
	}
	c.ml = ml
	c.setSender(ml)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	loops := c.hooks.loops
	if c.identity() != nil {
		loops = append(loops, c.identityLoop)
	}
	for _, loop := range loops {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); loop(loopCtx) }()
	}
	if len(join) > 0 {
		if _, err := ml.Join(join); err != nil {
			c.Close()
			return joinError(join, err)
		}
		// The push/pull exchange of Join carried the pool's members: a
		// member already named like this node has been reported by now.
		// Stop without a leave message: it would announce, in the shared
		// name, that the member holding it left.
		if err := c.Conflict(); err != nil {
			c.Close()
			return err
		}
	}
	return nil
}

// Name returns the node name.
func (c *core) Name() string { return c.cfg.Name }

// Addr returns the host:port others join through.
func (c *core) Addr() string { return c.ml.LocalNode().FullAddress().Addr }

// Stats returns the node's counters.
func (c *core) Stats() *Stats { return &c.stats }

// NumMembers returns the number of live members, this node included.
func (c *core) NumMembers() int { return c.ml.NumMembers() }

// Join contacts seeds (host:port list) to join their pool; it succeeds when
// at least one answers. Starting joins its seeds itself; Join is for a
// node that started before any seed was up.
func (c *core) Join(seeds []string) error {
	if _, err := c.ml.Join(seeds); err != nil {
		return joinError(seeds, err)
	}
	return nil
}

// joinError is a failed join in one line: memberlist reports one error per
// seed as an indented multi-line list.
func joinError(seeds []string, err error) error {
	msg := err.Error()
	var many interface{ WrappedErrors() []error }
	if errors.As(err, &many) {
		var parts []string
		for _, e := range many.WrappedErrors() {
			parts = append(parts, e.Error())
		}
		msg = strings.Join(parts, "; ")
	}
	return &wrapped{msg: fmt.Sprintf("mesh: join %v: %s", seeds, msg), err: err}
}

// wrapped is an error with its own message that still unwraps to err.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// Leave announces departure (bounded by timeout) and stops the node.
func (c *core) Leave(timeout time.Duration) error {
	err := c.ml.Leave(timeout)
	return errors.Join(err, c.Close())
}

// Close stops the node without announcing departure (peers detect it).
func (c *core) Close() error {
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if c.cancel != nil {
		c.cancel()
	}
	err := c.ml.Shutdown()
	c.wg.Wait()
	return err
}

// setSender makes tx what this member sends through.
func (c *core) setSender(tx sender) { c.tx.Store(&tx) }

// sender is what this member sends through; nil until start created it.
func (c *core) sender() sender {
	if p := c.tx.Load(); p != nil {
		return *p
	}
	return nil
}

// send delivers msg to one member: UDP when it fits a packet, else the
// reliable TCP stream. Failures are counted, never returned to a loop.
func (c *core) send(to *memberlist.Node, msg []byte) {
	tx := c.sender()
	msg, ok := c.sealFor(to.Name, msg)
	if !ok || tx == nil {
		c.stats.SendErrors.Add(1)
		return
	}
	var err error
	if len(msg) <= c.udpMax {
		err = tx.SendBestEffort(to, msg)
	} else {
		err = tx.SendReliable(to, msg)
	}
	c.stats.MsgsSent.Add(1)
	c.stats.AppBytesSent.Add(uint64(len(msg)))
	if err != nil {
		c.stats.SendErrors.Add(1)
	}
}

// sendReliable delivers msg to one member by TCP; it reports success.
func (c *core) sendReliable(to *memberlist.Node, msg []byte) bool {
	msg, ok := c.sealFor(to.Name, msg)
	if !ok {
		c.stats.SendErrors.Add(1)
		return false
	}
	return c.sendPlain(to, msg)
}

// sendPlain is sendReliable without a MAC: for certificates, which the
// CA's signature authenticates.
func (c *core) sendPlain(to *memberlist.Node, msg []byte) bool {
	tx := c.sender()
	if tx == nil {
		c.stats.SendErrors.Add(1)
		return false
	}
	if err := tx.SendReliable(to, msg); err != nil {
		c.stats.SendErrors.Add(1)
		return false
	}
	c.stats.MsgsSent.Add(1)
	c.stats.AppBytesSent.Add(uint64(len(msg)))
	return true
}

func (c *core) memberByName(name string) (member, bool) {
	c.mu.RLock()
	m, ok := c.members[name]
	c.mu.RUnlock()
	return m, ok
}

// eachMember calls f for every live member (this node included) under a
// read lock; f must not block.
func (c *core) eachMember(f func(name string, m member)) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, m := range c.members {
		f(name, m)
	}
}

// rebuildRoles refreshes the per-role snapshots; called with c.mu held.
func (c *core) rebuildRoles() {
	var routers, sidecars []*memberlist.Node
	for name, m := range c.members {
		if name == c.cfg.Name {
			continue
		}
		switch m.meta.Role {
		case RoleRouter:
			routers = append(routers, m.node)
		case RoleSidecar:
			sidecars = append(sidecars, m.node)
		}
	}
	c.routers.Store(&routers)
	c.sidecars.Store(&sidecars)
}

// delegate is the memberlist.Delegate view of a core. Its methods run on
// memberlist's goroutines and never block.
type delegate core

func (d *delegate) NodeMeta(limit int) []byte {
	meta := *d.meta.Load()
	if len(meta) > limit {
		return nil
	}
	return meta
}

// NotifyMsg dispatches on the leading type byte. buf is only valid during
// the call; decoders copy what they keep.
func (d *delegate) NotifyMsg(buf []byte) {
	c := (*core)(d)
	if len(buf) == 0 {
		c.stats.Malformed.Add(1)
		return
	}
	c.stats.MsgsReceived.Add(1)
	typ, body := buf[0], buf[1:]
	if typ == msgIdentity {
		if err := c.handleIdentity(body); err != nil {
			c.stats.Malformed.Add(1)
			c.log.Debug("dropped gossip message", "err", err)
		}
		return
	}
	if c.identity() != nil {
		if body = c.verified(buf); body == nil {
			return
		}
	}
	ok, err := c.hooks.handle(typ, body)
	if !ok {
		err = fmt.Errorf("%w: message type %d not for a %s", errMalformed, typ, c.cfg.Meta.Role)
	}
	if err != nil {
		c.stats.Malformed.Add(1)
		c.log.Debug("dropped gossip message", "err", err)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// events is the memberlist.EventDelegate view of a core.
type events core

func (e *events) NotifyJoin(mn *memberlist.Node)   { (*core)(e).memberUp(mn, true) }
func (e *events) NotifyUpdate(mn *memberlist.Node) { (*core)(e).memberUp(mn, false) }
func (e *events) NotifyLeave(mn *memberlist.Node) {
	c := (*core)(e)
	c.mu.Lock()
	m, ok := c.members[mn.Name]
	delete(c.members, mn.Name)
	delete(c.peers, mn.Name)
	c.rebuildRoles()
	c.mu.Unlock()
	if ok && c.hooks.gone != nil {
		c.hooks.gone(mn.Name, m.meta)
	}
}

func (c *core) memberUp(mn *memberlist.Node, joined bool) {
	meta, err := decodeMeta(mn.Meta)
	if err != nil {
		c.stats.Malformed.Add(1)
		c.log.Debug("member with bad meta ignored", "member", mn.Name, "err", err)
		return
	}
	cp := *mn
	c.mu.Lock()
	c.members[mn.Name] = member{node: &cp, meta: meta}
	c.rebuildRoles()
	c.mu.Unlock()
	if mn.Name == c.cfg.Name {
		return
	}
	if joined && c.identity() != nil {
		c.sendIdentity(mn.Name, false)
	}
	if c.hooks.up != nil {
		c.hooks.up(mn.Name, meta, joined)
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
	// Rejected counts messages and members refused by identity checks,
	// by reason (see rejectReasons).
	Rejected [numRejectReasons]atomic.Uint64
}
