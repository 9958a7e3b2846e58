package cluster

import (
	"context"
	"crypto/hmac"
	crand "crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/rolter/rolter/cluster/raftstore"
	"github.com/rolter/rolter/config"
	"google.golang.org/protobuf/proto"
)

// Sentinel errors.
var (
	// ErrNoLeader: no leader could be reached before the wait ran out; the
	// admin API answers 503 with Retry-After.
	ErrNoLeader = errors.New("cluster: no raft leader")
	// ErrForward: the forwarding RPC to the leader failed in transport.
	ErrForward = errors.New("cluster: forwarding to the leader failed")
	// ErrUnauthenticated: a node-to-node RPC carried a bad MAC.
	ErrUnauthenticated = errors.New("cluster: node-to-node request not authenticated")
	// ErrClosed: the store was shut down.
	ErrClosed = errors.New("cluster: store closed")
	// ErrConfig: the StoreConfig is unusable.
	ErrConfig = errors.New("cluster: bad store config")
)

// Peer is one router as its Raft peers know it.
type Peer struct {
	ID   string
	Addr string // raft host:port
	// Alive is false when the discovery source has seen the router fail
	// or leave; the leader removes it after StoreConfig.DeadGrace.
	Alive bool
}

// PeerSource lists the routers known to discovery (gossip, or the static
// --join list). Called from the store's background loop; must not block.
type PeerSource interface {
	RaftPeers() []Peer
}

// StaticPeers is a PeerSource over a fixed list (the --join flag).
type StaticPeers []Peer

// RaftPeers returns the list, every peer alive.
func (s StaticPeers) RaftPeers() []Peer { return s }

// ParsePeers parses "id=host:port,id=host:port" (the --join flag).
func ParsePeers(s string) (StaticPeers, error) {
	var out StaticPeers
	for _, part := range splitNonEmpty(s) {
		id, addr, ok := cut(part, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("%w: join peer %q: want id=host:port", ErrConfig, part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%w: join peer %q: %v", ErrConfig, part, err)
		}
		out = append(out, Peer{ID: id, Addr: addr, Alive: true})
	}
	return out, nil
}

// forwarder carries a forwarding RPC to the router at addr (its raft
// address, host:port). The default runs over the Raft port; the
// in-process harness plugs in one that calls the target Store.
type forwarder interface {
	Forward(ctx context.Context, addr string, req *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error)
}

// StoreConfig configures Open.
type StoreConfig struct {
	NodeID string
	// RaftAddr is the host:port to listen on for Raft and forwarding;
	// Advertise, when set, is the address peers dial instead.
	RaftAddr  string
	Advertise string
	// DataDir holds raft.db (raft-boltdb) and snapshots. Empty keeps
	// everything in memory (tests only).
	DataDir string
	// BootstrapExpect: bootstrap a new cluster once this many routers
	// (this one included) are known. 0 or 1 with no peers: bootstrap
	// alone.
	BootstrapExpect int
	// Peers is the discovery source (nil: none).
	Peers PeerSource
	// TLS secures Raft and forwarding (see LoadTLS). Nil is refused
	// unless InsecureDev.
	TLS         *tls.Config
	InsecureDev bool
	// InternalToken authenticates node-to-node RPCs; required.
	InternalToken string
	// Seed is rolter.toml, applied at the first bootstrap (its entries
	// file-owned); later edits arrive through a FileSyncer.
	Seed *config.Config
	// SuperadminToken is the raw bootstrap superadmin token
	// (ROLTER_ADMIN_TOKEN); only its SHA-256 enters the state.
	SuperadminToken string
	Logger          *slog.Logger

	// ForwardWait bounds how long a write waits for a leader (default 5s).
	ForwardWait time.Duration
	// DeadGrace is how long a router reported dead stays a voter
	// (default 2m).
	DeadGrace time.Duration
	// ReconcileInterval paces bootstrap, join, seed and membership checks
	// (default 1s).
	ReconcileInterval time.Duration
	// Now is the clock stamped on commands (default time.Now).
	Now func() time.Time

	// Raft's timing; zero fields keep the library's defaults (1s
	// heartbeat and election timeouts, 500ms leader lease, 50ms commit
	// timeout). A follower that hears no heartbeat for HeartbeatTimeout
	// starts an election; a leader that cannot reach a quorum for
	// LeaderLeaseTimeout steps down. LeaderLeaseTimeout must not exceed
	// HeartbeatTimeout.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// CommitTimeout is how long a leader with nothing to send waits
	// before an empty append that advances followers' commit index.
	CommitTimeout time.Duration
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (default 1024).
	SnapshotThreshold uint64

	// transport, forwarder and stores replace the network layer and the
	// persistence (the in-process harness: raft's in-memory transport,
	// stores kept across restarts). transport and forwarder go together;
	// nil stores: chosen from DataDir.
	transport raft.Transport
	forwarder forwarder
	stores    *raftStores
}

// raftStores are the persistence stores of one node.
type raftStores struct {
	Log      raft.LogStore
	Stable   raft.StableStore
	Snapshot raft.SnapshotStore
}

// Store is one router's replica of the control-plane state: the Raft
// node, the FSM and leader forwarding. All methods are safe for
// concurrent use.
type Store struct {
	cfg       StoreConfig
	raft      *raft.Raft
	fsm       *fsm
	mux       *muxLayer
	transport raft.Transport
	forwarder forwarder
	closers   []func() error
	log       *slog.Logger
	addr      raft.ServerAddress

	// cancel stops the background loop; done is closed then (nil until
	// Open started the loop).
	cancel context.CancelFunc
	done   <-chan struct{}
	wg     sync.WaitGroup

	deadSeen map[string]time.Time // touched only by the loop goroutine
	rngMu    sync.Mutex
	rng      *rand.Rand
}

// Open starts the node: it opens (or creates) the Raft state under
// DataDir, starts serving Raft, and runs a background loop that
// bootstraps or joins the cluster, seeds the state from rolter.toml when
// it leads an unseeded cluster, and keeps membership in step with
// discovery. ctx bounds only the opening itself.
func Open(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.NodeID == "" {
		return nil, fmt.Errorf("%w: node id required", ErrConfig)
	}
	if cfg.InternalToken == "" {
		return nil, fmt.Errorf("%w: internal token required (node-to-node authentication)", ErrConfig)
	}
	if (cfg.transport == nil) != (cfg.forwarder == nil) {
		return nil, fmt.Errorf("%w: transport and forwarder go together", ErrConfig)
	}
	if cfg.transport == nil && cfg.TLS == nil && !cfg.InsecureDev {
		return nil, fmt.Errorf("%w: raft needs --tls-cert/--tls-key/--tls-ca (or --insecure-dev for plaintext)", ErrConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ForwardWait <= 0 {
		cfg.ForwardWait = 5 * time.Second
	}
	if cfg.DeadGrace <= 0 {
		cfg.DeadGrace = 2 * time.Minute
	}
	if cfg.ReconcileInterval <= 0 {
		cfg.ReconcileInterval = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger.With("node_id", cfg.NodeID)
	var seed [2]uint64
	var b [16]byte
	_, _ = crand.Read(b[:])
	seed[0], seed[1] = leUint64(b[:8]), leUint64(b[8:])
	s := &Store{cfg: cfg, log: log, fsm: newFSM(log), deadSeen: map[string]time.Time{},
		rng: rand.New(rand.NewPCG(seed[0], seed[1]))}
	if err := s.openRaft(); err != nil {
		s.closeAll()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, ctx.Done()
	s.wg.Add(1)
	go s.loop(ctx)
	return s, nil
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func (s *Store) openRaft() error {
	cfg := s.cfg
	// Timing first: nothing is opened yet when it is refused.
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.Logger = hclogger(s.log, "raft")
	rc.SnapshotThreshold = 1024
	setIf(&rc.HeartbeatTimeout, cfg.HeartbeatTimeout)
	setIf(&rc.ElectionTimeout, cfg.ElectionTimeout)
	setIf(&rc.LeaderLeaseTimeout, cfg.LeaderLeaseTimeout)
	setIf(&rc.CommitTimeout, cfg.CommitTimeout)
	setIf(&rc.SnapshotThreshold, cfg.SnapshotThreshold)
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("%w: raft timing: %v", ErrConfig, err)
	}
	if cfg.transport != nil {
		s.transport, s.forwarder = cfg.transport, cfg.forwarder
	} else {
		var adv net.Addr
		if cfg.Advertise != "" {
			a, err := net.ResolveTCPAddr("tcp", cfg.Advertise)
			if err != nil {
				return fmt.Errorf("%w: advertise %q: %v", ErrConfig, cfg.Advertise, err)
			}
			adv = a
		}
		var tlsConf *tls.Config
		if !cfg.InsecureDev || cfg.TLS != nil {
			tlsConf = cfg.TLS
		}
		m, err := newMuxLayer(cfg.RaftAddr, adv, tlsConf, s.log)
		if err != nil {
			return err
		}
		s.mux = m
		s.closers = append(s.closers, m.Close)
		s.transport = raft.NewNetworkTransportWithLogger(m, 5, 10*time.Second, hclogger(s.log, "raft-net"))
		s.forwarder = m
	}
	s.addr = s.transport.LocalAddr()

	stores := cfg.stores
	if stores == nil {
		var err error
		if stores, err = openStores(cfg.DataDir, s.log); err != nil {
			return err
		}
		if c, ok := stores.Log.(interface{ Close() error }); ok {
			s.closers = append(s.closers, c.Close)
		}
	}
	r, err := raft.NewRaft(rc, s.fsm, stores.Log, stores.Stable, stores.Snapshot, s.transport)
	if err != nil {
		return fmt.Errorf("cluster: starting raft: %w", err)
	}
	s.raft = r
	if s.mux != nil {
		s.mux.start(s.serveRPC)
	}
	existing, err := raft.HasExistingState(stores.Log, stores.Stable, stores.Snapshot)
	if err != nil {
		return fmt.Errorf("cluster: reading raft state: %w", err)
	}
	if !existing && cfg.BootstrapExpect <= 1 && len(s.peers()) == 0 {
		s.log.Info("raft: bootstrapping a single-router cluster")
		if err := s.bootstrap([]Peer{{ID: cfg.NodeID, Addr: string(s.addr)}}); err != nil {
			return err
		}
	}
	return nil
}

// setIf sets *dst to v unless v is zero.
func setIf[T comparable](dst *T, v T) {
	var zero T
	if v != zero {
		*dst = v
	}
}

func openStores(dir string, log *slog.Logger) (*raftStores, error) {
	if dir == "" {
		log.Warn("raft: no data dir; state kept in memory only")
		return &raftStores{Log: raft.NewInmemStore(), Stable: raft.NewInmemStore(), Snapshot: raft.NewInmemSnapshotStore()}, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return nil, fmt.Errorf("cluster: opening raft.db: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclogger(log, "raft-snap"))
	if err != nil {
		bolt.Close()
		return nil, fmt.Errorf("cluster: snapshot store: %w", err)
	}
	return &raftStores{Log: bolt, Stable: bolt, Snapshot: snaps}, nil
}

// Close shuts the node down (it stays a voter; see Leave).
func (s *Store) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	var err error
	if s.raft != nil {
		err = s.raft.Shutdown().Error()
	}
	if cerr := s.closeAll(); err == nil {
		err = cerr
	}
	return err
}

func (s *Store) closeAll() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		// Raft's shutdown already closed the transport's listener.
		if err := s.closers[i](); !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// State returns the current immutable state.
func (s *Store) State() *State { return s.fsm.state.Load() }

// Watch returns a channel that receives after every applied
// config_version bump (coalesced: one pending wake-up at most). Read
// State() after a wake-up.
func (s *Store) Watch() <-chan struct{} { return s.fsm.watch() }

// NodeID returns this router's id.
func (s *Store) NodeID() string { return s.cfg.NodeID }

// RaftAddr returns the address peers use to reach this node.
func (s *Store) RaftAddr() string { return string(s.addr) }

// IsLeader reports whether this node is the Raft leader.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// HashToken returns the hex SHA-256 under which a token or key secret is
// stored.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Apply commits cmd through the leader and returns its result once this
// router has applied it too (so State() reflects it). On a
// follower the command is forwarded to the leader; through an election it
// retries with jittered backoff until ForwardWait (or ctx) runs out, then
// returns ErrNoLeader. The command is stamped with the time and, when it
// has none, an idempotency key, so a retry after an ambiguous failure
// (leadership lost mid-commit) applies at most once.
func (s *Store) Apply(ctx context.Context, cmd *raftstore.Command) (*raftstore.Result, error) {
	if cmd.GetTimeUnixNano() == 0 {
		cmd.TimeUnixNano = s.cfg.Now().UnixNano()
	}
	if cmd.GetIdempotencyKey() == "" {
		var b [16]byte
		_, _ = crand.Read(b[:])
		cmd.IdempotencyKey = "auto-" + hex.EncodeToString(b[:])
	}
	data, err := proto.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("cluster: encoding command: %w", err)
	}
	req := &raftstore.ForwardRequest{Kind: raftstore.RPCKind_RPC_APPLY, Command: data, NodeId: s.cfg.NodeID}
	resp, err := s.toLeader(ctx, req, s.applyLocal)
	if err != nil {
		return nil, err
	}
	// Read your writes: the caller's next State() on this router shows the
	// command's effect. The wait is bounded; a lagging replica only delays.
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardWait)
	defer cancel()
	if err := s.fsm.waitApplied(wctx, resp.GetIndex()); err != nil {
		s.log.Warn("raft: write committed but not yet applied locally", "index", resp.GetIndex(), "err", err)
	}
	return resp.GetResult(), nil
}

// toLeader runs req locally when this node leads and forwards it
// otherwise, retrying through elections until the wait runs out.
func (s *Store) toLeader(ctx context.Context, req *raftstore.ForwardRequest,
	local func(context.Context, *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error)) (*raftstore.ForwardResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardWait)
	defer cancel()
	req.Mac = rpcMAC(s.cfg.InternalToken, req)
	backoff := 20 * time.Millisecond
	var last error
	for attempt := 0; ; attempt++ {
		var resp *raftstore.ForwardResponse
		var err error
		if s.raft.State() == raft.Leader {
			resp, err = local(ctx, req)
		} else if addr, id := s.raft.LeaderWithID(); addr != "" && id != raft.ServerID(s.cfg.NodeID) {
			if resp, err = s.forwarder.Forward(ctx, string(addr), req); err == nil {
				err = faultError(resp, string(id))
			}
		} else {
			err = ErrNoLeader
		}
		if err == nil {
			return resp, nil
		}
		if errors.Is(err, ErrUnauthenticated) {
			return nil, err
		}
		last = err
		s.rngMu.Lock()
		d := backoff/2 + time.Duration(s.rng.Int64N(int64(backoff)))
		s.rngMu.Unlock()
		backoff = min(backoff*2, 400*time.Millisecond)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w after %d attempts: %v", ErrNoLeader, attempt+1, last)
		case <-s.done:
			t.Stop()
			return nil, ErrClosed
		case <-t.C:
		}
	}
}

// applyLocal proposes an apply request on this (leader) node.
func (s *Store) applyLocal(ctx context.Context, req *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error) {
	timeout := time.Until(deadlineOr(ctx, time.Now().Add(5*time.Second)))
	f := s.raft.Apply(req.GetCommand(), timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
			errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrEnqueueTimeout) {
			return nil, fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		return nil, fmt.Errorf("cluster: apply: %w", err)
	}
	res, _ := f.Response().(*raftstore.Result)
	return &raftstore.ForwardResponse{Result: res, Index: f.Index()}, nil
}

func deadlineOr(ctx context.Context, d time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok && dl.Before(d) {
		return dl
	}
	return d
}

// serveRPC handles a forwarding request arriving from another router,
// over the Raft port or from the in-process harness.
func (s *Store) serveRPC(ctx context.Context, req *raftstore.ForwardRequest) *raftstore.ForwardResponse {
	if !hmac.Equal(req.GetMac(), rpcMAC(s.cfg.InternalToken, req)) {
		s.log.Warn("raft: rejected unauthenticated forwarding request", "from", req.GetNodeId())
		return &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_UNAUTHENTICATED, Error: ErrUnauthenticated.Error()}
	}
	if s.raft.State() != raft.Leader {
		return notLeader()
	}
	var resp *raftstore.ForwardResponse
	var err error
	switch req.GetKind() {
	case raftstore.RPCKind_RPC_APPLY:
		resp, err = s.applyLocal(ctx, req)
	case raftstore.RPCKind_RPC_JOIN:
		resp, err = s.joinLocal(ctx, req)
	default:
		err = fmt.Errorf("%w: unknown rpc kind %d", errBadRequest, req.GetKind())
	}
	switch {
	case err == nil:
		return resp
	case errors.Is(err, ErrNoLeader):
		return notLeader()
	case errors.Is(err, errBadRequest):
		return &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_BAD_REQUEST, Error: err.Error()}
	default:
		return &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_FAILED, Error: err.Error()}
	}
}

// notLeader answers a request that reached a router which does not lead.
func notLeader() *raftstore.ForwardResponse {
	return &raftstore.ForwardResponse{Fault: raftstore.Fault_FAULT_NOT_LEADER, NotLeader: true}
}

// errBadRequest marks a forwarding request the leader cannot act on.
var errBadRequest = errors.New("bad forwarding request")

// faultError is the error a forwarding response from node carries: nil,
// ErrUnauthenticated, ErrNoLeader (retry) or ErrForward. The fault code
// decides, never the error text, which is only the detail. A response
// from a router older than the fault field has only not_leader and text.
func faultError(resp *raftstore.ForwardResponse, node string) error {
	switch resp.GetFault() {
	case raftstore.Fault_FAULT_NONE:
		switch {
		case resp.GetNotLeader():
			return fmt.Errorf("%w: %s is no longer leader", ErrNoLeader, node)
		case resp.GetError() != "":
			return fmt.Errorf("%w: %s: %s", ErrForward, node, resp.GetError())
		}
		return nil
	case raftstore.Fault_FAULT_UNAUTHENTICATED:
		return fmt.Errorf("%w (by %s)", ErrUnauthenticated, node)
	case raftstore.Fault_FAULT_NOT_LEADER:
		return fmt.Errorf("%w: %s is no longer leader", ErrNoLeader, node)
	default:
		return fmt.Errorf("%w: %s: %s: %s", ErrForward, node, strings.ToLower(resp.GetFault().String()), resp.GetError())
	}
}

// hclogger adapts slog to raft's hclog, at warn level and above.
func hclogger(log *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: slogWriter{log}, DisableTime: true})
}

// slogWriter turns hclog's lines ("[WARN]  raft: msg: k=v") into slog
// records at their level, without hclog's own level tag (slog's time and
// level lead the line).
type slogWriter struct{ log *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	msg, level := string(trimNL(p)), slog.LevelWarn
	for _, l := range []struct {
		tag   string
		level slog.Level
	}{{"[ERROR]", slog.LevelError}, {"[WARN]", slog.LevelWarn}, {"[INFO]", slog.LevelInfo}, {"[DEBUG]", slog.LevelDebug},
		{"[TRACE]", slog.LevelDebug}} {
		if rest, ok := strings.CutPrefix(msg, l.tag); ok {
			msg, level = strings.TrimLeft(rest, " "), l.level
			break
		}
	}
	w.log.Log(context.Background(), level, msg, "component", "raft")
	return len(p), nil
}

func trimNL(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == '\r') {
		p = p[:len(p)-1]
	}
	return p
}
