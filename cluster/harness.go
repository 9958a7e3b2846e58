package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	"github.com/rolter/rolter/cluster/raftstore"
)

// InmemCluster runs several Stores in one process over raft's in-memory
// transport, with an in-process forwarder: the harness for tests of the
// store, forwarding and the admin API. Nodes can be stopped (a crash:
// their transport disconnects) and restarted on their retained stores.
type InmemCluster struct {
	tmpl  StoreConfig
	fwd   *inprocForwarder
	mu    sync.Mutex
	nodes []*inmemNode
}

type inmemNode struct {
	id     string
	trans  *raft.InmemTransport
	stores *raftStores
	store  *Store
}

// fastRaft sets in-process timing on cfg: elections within a few hundred
// milliseconds, commits within a few. Set fields are kept.
func fastRaft(cfg *StoreConfig) {
	setIf(&cfg.HeartbeatTimeout, 150*time.Millisecond)
	setIf(&cfg.ElectionTimeout, 150*time.Millisecond)
	setIf(&cfg.LeaderLeaseTimeout, 100*time.Millisecond)
	setIf(&cfg.CommitTimeout, 5*time.Millisecond)
}

// NewInmemCluster starts n nodes ("n1".."nN") that discover each other
// through a static peer list and bootstrap with BootstrapExpect n. tmpl
// supplies the shared settings (Seed, SuperadminToken, InternalToken,
// Logger...); its NodeID, Transport, Forwarder, Peers and Stores are set
// per node.
func NewInmemCluster(ctx context.Context, n int, tmpl StoreConfig) (*InmemCluster, error) {
	fastRaft(&tmpl)
	if tmpl.ReconcileInterval == 0 {
		tmpl.ReconcileInterval = 50 * time.Millisecond
	}
	c := &InmemCluster{tmpl: tmpl, fwd: &inprocForwarder{nodes: map[raft.ServerAddress]*Store{}}}
	var peers StaticPeers
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id + ".raft"))
		c.nodes = append(c.nodes, &inmemNode{id: id, trans: trans, stores: &raftStores{
			Log: raft.NewInmemStore(), Stable: raft.NewInmemStore(), Snapshot: raft.NewInmemSnapshotStore()}})
		peers = append(peers, Peer{ID: id, Addr: string(addr), Alive: true})
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	c.tmpl.Peers = peers
	c.tmpl.BootstrapExpect = n
	for i := range c.nodes {
		if err := c.Start(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Start (re)opens node i on its retained stores.
func (c *InmemCluster) Start(ctx context.Context, i int) error {
	c.mu.Lock()
	nd := c.nodes[i]
	c.mu.Unlock()
	cfg := c.tmpl
	cfg.NodeID, cfg.transport, cfg.forwarder, cfg.stores = nd.id, nd.trans, c.fwd, nd.stores
	s, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	nd.store = s
	c.mu.Unlock()
	c.fwd.set(nd.trans.LocalAddr(), s)
	for _, o := range c.nodes {
		if o != nd {
			o.trans.Connect(nd.trans.LocalAddr(), nd.trans)
			nd.trans.Connect(o.trans.LocalAddr(), o.trans)
		}
	}
	return nil
}

// Stop crashes node i: it is cut off from the others and shut down; its
// stores are kept for Start.
func (c *InmemCluster) Stop(i int) error {
	c.mu.Lock()
	nd := c.nodes[i]
	s := nd.store
	nd.store = nil
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	c.fwd.set(nd.trans.LocalAddr(), nil)
	for _, o := range c.nodes {
		if o != nd {
			o.trans.Disconnect(nd.trans.LocalAddr())
		}
	}
	nd.trans.DisconnectAll()
	return s.Close()
}

// Node returns node i's store (nil while stopped).
func (c *InmemCluster) Node(i int) *Store {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].store
}

// Len is the number of nodes, running or not.
func (c *InmemCluster) Len() int { return len(c.nodes) }

// Leader returns the index of the running node that is leader, or -1.
func (c *InmemCluster) Leader() int {
	for i := range c.nodes {
		if s := c.Node(i); s != nil && s.IsLeader() {
			return i
		}
	}
	return -1
}

// WaitLeader waits until a running node is leader and every running node
// agrees on it.
func (c *InmemCluster) WaitLeader(ctx context.Context) (int, error) {
	for {
		if l := c.Leader(); l >= 0 {
			id := c.Node(l).NodeID()
			agreed := true
			for i := range c.nodes {
				if s := c.Node(i); s != nil && s.Info().Leader != id {
					agreed = false
				}
			}
			if agreed {
				return l, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("%w: waiting for a leader: %v", ErrNoLeader, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Close stops every node.
func (c *InmemCluster) Close() {
	for i := range c.nodes {
		_ = c.Stop(i)
	}
}

// inprocForwarder delivers forwarding RPCs by calling the target Store.
type inprocForwarder struct {
	mu    sync.Mutex
	nodes map[raft.ServerAddress]*Store
}

func (f *inprocForwarder) set(addr raft.ServerAddress, s *Store) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[addr] = s
}

func (f *inprocForwarder) Forward(ctx context.Context, addr string, req *raftstore.ForwardRequest) (*raftstore.ForwardResponse, error) {
	f.mu.Lock()
	s := f.nodes[raft.ServerAddress(addr)]
	f.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("%w: %s unreachable", ErrForward, addr)
	}
	return s.serveRPC(ctx, req), nil
}
