package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
)

// This file keeps the Raft membership in step with discovery:
//   - a router without Raft state either joins an existing cluster (asks
//     any known peer, which hands the request to the leader) or, once
//     BootstrapExpect routers are known and nobody answers as leader,
//     bootstraps with exactly those routers (every one of them computes
//     the same configuration, which raft accepts);
//   - the leader seeds the state from rolter.toml once (later edits arrive
//     as file syncs, filesync.go), adds routers that
//     discovery knows but Raft does not as voters, and removes voters that
//     discovery has reported dead for longer than DeadGrace.

func (s *Store) peers() []Peer {
	if s.cfg.Peers == nil {
		return nil
	}
	var out []Peer
	for _, p := range s.cfg.Peers.RaftPeers() {
		if p.ID != s.cfg.NodeID {
			out = append(out, p)
		}
	}
	return out
}

func (s *Store) bootstrap(peers []Peer) error {
	var conf raft.Configuration
	for _, p := range peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	if err := s.raft.BootstrapCluster(conf).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("cluster: bootstrap: %w", err)
	}
	return nil
}

// loop reconciles until ctx (Close) ends it.
func (s *Store) loop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		s.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.raft.LeaderCh():
		}
	}
}

func (s *Store) reconcile(ctx context.Context) {
	if s.raft.State() == raft.Leader {
		s.lead(ctx)
		return
	}
	if s.member() {
		return
	}
	peers := s.peers()
	if len(peers) == 0 {
		return
	}
	for _, p := range peers {
		if !p.Alive {
			continue
		}
		if err := s.askJoin(ctx, p); err == nil {
			s.log.Info("raft: joined the cluster", "via", p.ID)
			return
		}
	}
	expect := s.cfg.BootstrapExpect
	if expect < 1 {
		return
	}
	known := []Peer{{ID: s.cfg.NodeID, Addr: string(s.addr), Alive: true}}
	for _, p := range peers {
		if p.Alive {
			known = append(known, p)
		}
	}
	if len(known) < expect {
		return
	}
	sort.Slice(known, func(i, j int) bool { return known[i].ID < known[j].ID })
	// Bootstrap with the expected count; when the local node is not among
	// the first `expect` ids it waits to be added by the leader instead.
	set := known[:expect]
	if !containsID(set, s.cfg.NodeID) {
		return
	}
	if hasState, _ := s.hasLogs(); hasState {
		return
	}
	s.log.Info("raft: bootstrapping", "servers", ids(set))
	if err := s.bootstrap(set); err != nil {
		s.log.Warn("raft: bootstrap failed", "err", err)
	}
}

// member reports whether this node appears in its own Raft configuration
// (bootstrapped or already added by a leader).
func (s *Store) member() bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == raft.ServerID(s.cfg.NodeID) {
			return true
		}
	}
	return false
}

func (s *Store) hasLogs() (bool, error) {
	return s.raft.LastIndex() > 0, nil
}

func containsID(ps []Peer, id string) bool {
	for _, p := range ps {
		if p.ID == id {
			return true
		}
	}
	return false
}

func ids(ps []Peer) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID + "=" + p.Addr
	}
	return strings.Join(out, ",")
}

// askJoin asks peer p to have the leader add this node as a voter.
func (s *Store) askJoin(ctx context.Context, p Peer) error {
	req := &raftstore.ForwardRequest{Kind: raftstore.RPCKind_RPC_JOIN, NodeId: s.cfg.NodeID, RaftAddr: string(s.addr)}
	req.Mac = rpcMAC(s.cfg.InternalToken, req)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.forwarder.Forward(ctx, p.Addr, req)
	if err != nil {
		return err
	}
	return faultError(resp, p.ID)
}

// joinLocal adds the requesting router as a voter (leader only).
func (s *Store) joinLocal(_ context.Context, req *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error) {
	id, addr := raft.ServerID(req.GetNodeId()), raft.ServerAddress(req.GetRaftAddr())
	if id == "" || addr == "" {
		return nil, fmt.Errorf("%w: join needs a node id and a raft address", errBadRequest)
	}
	if err := s.addVoter(id, addr); err != nil {
		return nil, err
	}
	return &raftstore.ForwardResponse{}, nil
}

func (s *Store) addVoter(id raft.ServerID, addr raft.ServerAddress) error {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == id && srv.Address == addr && srv.Suffrage == raft.Voter {
			return nil
		}
	}
	s.log.Info("raft: adding voter", "id", id, "addr", addr)
	if err := s.raft.AddVoter(id, addr, 0, 10*time.Second).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		}
		return fmt.Errorf("cluster: add voter %s: %w", id, err)
	}
	return nil
}

// lead runs the leader's duties: seed once, then reconcile membership.
func (s *Store) lead(ctx context.Context) {
	if !s.State().Seeded {
		var sum string
		if s.cfg.SuperadminToken != "" {
			sum = HashToken(s.cfg.SuperadminToken)
		}
		cmd := &raftstore.Command{Op: raftstore.Op_OP_SEED, Actor: "system", IdempotencyKey: "seed",
			Payload: &raftstore.Command_Seed{Seed: seedFromConfig(s.cfg.Seed, sum)}}
		if _, err := s.Apply(ctx, cmd); err != nil {
			s.log.Warn("raft: seeding from rolter.toml failed", "err", err)
		} else {
			s.log.Info("raft: state seeded from rolter.toml")
		}
	}
	if s.cfg.Peers == nil {
		return
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := map[raft.ServerID]raft.Server{}
	for _, srv := range f.Configuration().Servers {
		servers[srv.ID] = srv
	}
	now := s.cfg.Now()
	for _, p := range s.peers() {
		srv, known := servers[raft.ServerID(p.ID)]
		switch {
		case p.Alive && (!known || srv.Address != raft.ServerAddress(p.Addr)):
			delete(s.deadSeen, p.ID)
			if err := s.addVoter(raft.ServerID(p.ID), raft.ServerAddress(p.Addr)); err != nil {
				s.log.Warn("raft: adding voter failed", "id", p.ID, "err", err)
			}
		case p.Alive:
			delete(s.deadSeen, p.ID)
		case known:
			since, seen := s.deadSeen[p.ID]
			if !seen {
				s.deadSeen[p.ID] = now
				continue
			}
			if now.Sub(since) < s.cfg.DeadGrace {
				continue
			}
			s.log.Info("raft: removing dead router", "id", p.ID, "dead_for", now.Sub(since))
			if err := s.raft.RemoveServer(raft.ServerID(p.ID), 0, 10*time.Second).Error(); err != nil {
				s.log.Warn("raft: removing dead router failed", "id", p.ID, "err", err)
			} else {
				delete(s.deadSeen, p.ID)
			}
		}
	}
}

// RaftServer is one member of the Raft configuration.
type RaftServer struct {
	ID     string `json:"id"`
	Addr   string `json:"raft_addr"`
	Voter  bool   `json:"voter"`
	Leader bool   `json:"leader"`
}

// Info is this router's view of the Raft cluster.
type Info struct {
	NodeID        string       `json:"node_id"`
	RaftAddr      string       `json:"raft_addr"`
	Role          string       `json:"raft_role"` // leader, follower, candidate, shutdown
	Leader        string       `json:"leader"`    // leader's node id ("" when none)
	LeaderAddr    string       `json:"leader_raft_addr"`
	AppliedIndex  uint64       `json:"applied_index"`
	ConfigVersion uint64       `json:"config_version"`
	Servers       []RaftServer `json:"servers"`
}

// Info returns this router's view of the cluster.
func (s *Store) Info() Info {
	addr, id := s.raft.LeaderWithID()
	in := Info{NodeID: s.cfg.NodeID, RaftAddr: string(s.addr), Role: strings.ToLower(s.raft.State().String()),
		Leader: string(id), LeaderAddr: string(addr), AppliedIndex: s.raft.AppliedIndex(),
		ConfigVersion: s.State().ConfigVersion}
	if f := s.raft.GetConfiguration(); f.Error() == nil {
		for _, srv := range f.Configuration().Servers {
			in.Servers = append(in.Servers, RaftServer{ID: string(srv.ID), Addr: string(srv.Address),
				Voter: srv.Suffrage == raft.Voter, Leader: srv.ID == id})
		}
	}
	sort.Slice(in.Servers, func(i, j int) bool { return in.Servers[i].ID < in.Servers[j].ID })
	return in
}

func splitNonEmpty(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func cut(s, sep string) (string, string, bool) { return strings.Cut(s, sep) }
