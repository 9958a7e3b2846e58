package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// FaultNet puts every router's Raft and gossip traffic behind a network
// the test controls. Each router binds its real Raft and gossip ports and
// advertises a front address instead (--raft-advertise,
// --gossip-advertise), so every peer dials the front.
//
// A front must know which router is calling to cut one pair and not the
// others (a partition of the leader from the followers keeps the
// followers talking). Every connection comes from 127.0.0.1, so the
// front looks up the calling socket's owner in /proc (the test knows its
// routers' pids) and hands the connection to the Toxiproxy proxy of that
// ordered pair (caller → callee, one for Raft and one for gossip's TCP
// streams), which forwards it to the callee's real port. Partitions
// disable a pair's proxies (open connections close, new ones are
// refused); latency and connection resets are Toxiproxy toxics on every
// proxy.
//
// Toxiproxy speaks TCP only, and memberlist sends most gossip (probes,
// engine status, loads) as UDP datagrams. Those go through a relay on the
// front's UDP port written here: a datagram's source is the sender's real
// gossip port (memberlist writes from its bound socket), which names the
// pair, and the relay drops it when the pair is cut or at the loss rate,
// and delays it by the latency.
type FaultNet struct {
	srv   *toxiproxy.ApiServer
	nodes []*faultNode

	mu      sync.Mutex
	pids    map[int]int // pid → node index
	cut     map[[2]int]bool
	loss    float64
	latency time.Duration
	jitter  time.Duration
	rnd     *rand.Rand
	// UDPDropped counts datagrams the relay dropped (cut or lost).
	UDPDropped, UDPSent int
	// Unidentified counts TCP connections whose caller was not found (gone
	// before the lookup, or not a router): they are closed, never let past
	// the faults.
	Unidentified int
	// Errors counts proxies that failed to start again after a heal.
	Errors []string
}

type faultNode struct {
	RaftReal, RaftFront     string
	GossipReal, GossipFront string
	// raft[s], gossip[s] carry connections from node s to this node.
	raft, gossip []*toxiproxy.Proxy
	udpFront     *net.UDPConn
	udpPair      []*net.UDPConn // udpPair[s] forwards s's datagrams
	lns          []net.Listener
}

// NewFaultNet allocates the addresses of n routers and starts the fronts
// and the pair proxies; seed drives the UDP relay's losses and jitter.
// Close stops them.
func NewFaultNet(n int, seed uint64) (*FaultNet, error) {
	var err error
	for range 5 {
		f := &FaultNet{srv: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
			pids: map[int]int{}, cut: map[[2]int]bool{}, rnd: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
		if err = f.start(n); err == nil {
			if err = f.realPortsFree(); err == nil {
				return f, nil
			}
		}
		f.Close()
	}
	return nil, err
}

// realPortsFree checks that no proxy or front took a real port while the
// net started (they listen on ports the kernel picks, and the real ports
// were only reserved and let go).
func (f *FaultNet) realPortsFree() error {
	for _, nd := range f.nodes {
		for _, a := range []string{nd.RaftReal, nd.GossipReal} {
			ln, err := net.Listen("tcp", a)
			if err != nil {
				return fmt.Errorf("faultnet: real port %s taken: %w", a, err)
			}
			ln.Close()
		}
		pc, err := net.ListenPacket("udp", nd.GossipReal)
		if err != nil {
			return fmt.Errorf("faultnet: real port %s taken: %w", nd.GossipReal, err)
		}
		pc.Close()
	}
	return nil
}

func (f *FaultNet) start(n int) error {
	for range n {
		var addrs [4]string
		for i := range addrs {
			a, err := freeTCPUDP()
			if err != nil {
				return err
			}
			addrs[i] = a
		}
		f.nodes = append(f.nodes, &faultNode{RaftReal: addrs[0], RaftFront: addrs[1], GossipReal: addrs[2], GossipFront: addrs[3]})
	}
	for d, nd := range f.nodes {
		for s := range f.nodes {
			var raft, gossip *toxiproxy.Proxy
			if s != d {
				var err error
				if raft, err = f.proxy(fmt.Sprintf("raft-%d-%d", s, d), nd.RaftReal); err != nil {
					return err
				}
				if gossip, err = f.proxy(fmt.Sprintf("gossip-%d-%d", s, d), nd.GossipReal); err != nil {
					return err
				}
			}
			nd.raft, nd.gossip = append(nd.raft, raft), append(nd.gossip, gossip)
		}
		if err := f.front(d, nd.RaftFront, nd.RaftReal, nd.raft); err != nil {
			return err
		}
		if err := f.front(d, nd.GossipFront, nd.GossipReal, nd.gossip); err != nil {
			return err
		}
		if err := f.udpRelay(d); err != nil {
			return err
		}
	}
	return nil
}

// Node returns router i's addresses.
func (f *FaultNet) Node(i int) faultNode { return *f.nodes[i] }

// SetPID tells the net which process is router i.
func (f *FaultNet) SetPID(i, pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pids[pid] = i
}

// Partition cuts every pair of routers that are in different groups,
// both ways, and heals every other pair.
func (f *FaultNet) Partition(groups ...[]int) {
	side := map[int]int{}
	for g, members := range groups {
		for _, m := range members {
			side[m] = g
		}
	}
	f.mu.Lock()
	f.cut = map[[2]int]bool{}
	for s := range f.nodes {
		for d := range f.nodes {
			if s != d && side[s] != side[d] {
				f.cut[[2]int{s, d}] = true
			}
		}
	}
	f.mu.Unlock()
	for d, nd := range f.nodes {
		for s := range f.nodes {
			if s == d {
				continue
			}
			for _, p := range []*toxiproxy.Proxy{nd.raft[s], nd.gossip[s]} {
				if side[s] != side[d] {
					p.Stop()
				} else if err := p.Start(); err != nil && !errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
					f.fail("faultnet: restart %s: %v", p.Name, err)
				}
			}
		}
	}
}

// Heal reconnects every pair.
func (f *FaultNet) Heal() { f.Partition(nil) }

// Degrade adds latency (± jitter) to every TCP stream and datagram, resets
// a share resets of new TCP connections a second after they start, and
// drops loss of the datagrams. Zero values remove the faults.
func (f *FaultNet) Degrade(latency, jitter time.Duration, loss, resets float64) {
	f.mu.Lock()
	f.latency, f.jitter, f.loss = latency, jitter, loss
	f.mu.Unlock()
	for _, p := range f.proxies() {
		for _, name := range []string{"lat_up", "lat_down", "reset"} {
			if p.Toxics.GetToxic(name) != nil {
				if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
					f.fail("faultnet: %s: remove %s: %v", p.Name, name, err)
				}
			}
		}
		var toxics []string
		if latency > 0 {
			for _, stream := range []string{"up", "down"} {
				toxics = append(toxics, fmt.Sprintf(`{"name":"lat_%s","type":"latency","stream":"%sstream","attributes":{"latency":%d,"jitter":%d}}`,
					stream, stream, latency.Milliseconds(), jitter.Milliseconds()))
			}
		}
		if resets > 0 {
			toxics = append(toxics, fmt.Sprintf(`{"name":"reset","type":"reset_peer","stream":"upstream","toxicity":%g,"attributes":{"timeout":1000}}`, resets))
		}
		for _, j := range toxics {
			if _, err := p.Toxics.AddToxicJson(strings.NewReader(j)); err != nil {
				f.fail("faultnet: %s: add %s: %v", p.Name, j, err)
			}
		}
	}
}

func (f *FaultNet) proxies() []*toxiproxy.Proxy {
	var out []*toxiproxy.Proxy
	for _, nd := range f.nodes {
		for _, p := range append(append([]*toxiproxy.Proxy{}, nd.raft...), nd.gossip...) {
			if p != nil {
				out = append(out, p)
			}
		}
	}
	return out
}

// fail records a fault the net could not inject; the test reads Errors.
func (f *FaultNet) fail(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Errors = append(f.Errors, fmt.Sprintf(format, a...))
}

func (f *FaultNet) proxy(name, upstream string) (*toxiproxy.Proxy, error) {
	p := toxiproxy.NewProxy(f.srv, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("faultnet: start %s: %w", name, err)
	}
	return p, nil
}

// front accepts router connections at addr and passes each to the pair
// proxy of its caller; a connection whose caller is not found is closed.
func (f *FaultNet) front(d int, addr, real string, pair []*toxiproxy.Proxy) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("faultnet: front %s: %w", addr, err)
	}
	f.nodes[d].lns = append(f.nodes[d].lns, ln)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				to := real // a router calling itself crosses no link
				switch s := f.caller(c); {
				case s < 0:
					f.mu.Lock()
					f.Unidentified++
					f.mu.Unlock()
					c.Close()
					return
				case s != d:
					pair[s].Lock()
					to = pair[s].Listen
					pair[s].Unlock()
				}
				up, err := net.DialTimeout("tcp", to, time.Second)
				if err != nil {
					c.Close()
					return
				}
				pipe(c, up)
			}()
		}
	}()
	return nil
}

// pipe copies both ways until either side ends, then closes both.
func pipe(a, b net.Conn) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(a, b); done <- struct{}{} }()
	go func() { _, _ = io.Copy(b, a); done <- struct{}{} }()
	<-done
	a.Close()
	b.Close()
	<-done
}

// caller finds which router owns the other end of c: the socket whose
// local port is c's remote port, in the fd table of a known pid. It
// retries briefly, for a router whose pid is not registered yet.
func (f *FaultNet) caller(c net.Conn) int {
	ra, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return -1
	}
	la := c.LocalAddr().(*net.TCPAddr)
	for range 50 {
		if inode := socketInode(ra.Port, la.Port); inode != "" {
			f.mu.Lock()
			pids := make(map[int]int, len(f.pids))
			for p, i := range f.pids {
				pids[p] = i
			}
			f.mu.Unlock()
			for pid, i := range pids {
				if ownsSocket(pid, inode) {
					return i
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return -1
}

// socketInode returns the inode of the TCP socket bound to local port lport
// and connected to remote port rport on loopback ("" when none).
func socketInode(lport, rport int) string {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			if len(fs) < 10 || !strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", lport)) || !strings.HasSuffix(fs[2], fmt.Sprintf(":%04X", rport)) {
				continue
			}
			fh.Close()
			return fs[9]
		}
		fh.Close()
	}
	return ""
}

func ownsSocket(pid int, inode string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	want := "socket:[" + inode + "]"
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && l == want {
			return true
		}
	}
	return false
}

// udpRelay relays datagrams sent to node d's gossip front: from router s
// (named by its real gossip port) through udpPair[s] to d's real port;
// what d answers to udpPair[s] goes back to s from the front, so s sees
// d's advertised address.
func (f *FaultNet) udpRelay(d int) error {
	nd := f.nodes[d]
	front, err := net.ListenUDP("udp", udpAddr(nd.GossipFront))
	if err != nil {
		return fmt.Errorf("faultnet: udp front %s: %w", nd.GossipFront, err)
	}
	nd.udpFront = front
	real := udpAddr(nd.GossipReal)
	bySource := map[string]int{}
	for s, o := range f.nodes {
		bySource[udpAddr(o.GossipReal).String()] = s
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return fmt.Errorf("faultnet: udp pair socket: %w", err)
		}
		nd.udpPair = append(nd.udpPair, pc)
		back := udpAddr(o.GossipReal)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, _, err := pc.ReadFromUDP(buf)
				if err != nil {
					return
				}
				f.relay(d, s, front, back, buf[:n])
			}
		}()
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := front.ReadFromUDP(buf)
			if err != nil {
				return
			}
			s, ok := bySource[from.String()]
			if !ok || s == d {
				continue
			}
			f.relay(s, d, nd.udpPair[s], real, buf[:n])
		}
	}()
	return nil
}

// relay sends one datagram of the pair s → d from conn to to, unless the
// pair is cut or the datagram is lost; it is delayed by the latency.
func (f *FaultNet) relay(s, d int, conn *net.UDPConn, to *net.UDPAddr, b []byte) {
	f.mu.Lock()
	drop := f.cut[[2]int{s, d}] || (f.loss > 0 && f.rnd.Float64() < f.loss)
	delay := f.latency
	if f.jitter > 0 {
		delay += time.Duration(f.rnd.Int64N(int64(2*f.jitter))) - f.jitter
	}
	if drop {
		f.UDPDropped++
	} else {
		f.UDPSent++
	}
	f.mu.Unlock()
	if drop {
		return
	}
	msg := append([]byte(nil), b...)
	if delay <= 0 {
		_, _ = conn.WriteToUDP(msg, to)
		return
	}
	time.AfterFunc(delay, func() { _, _ = conn.WriteToUDP(msg, to) })
}

// Close stops the fronts, the relays and the proxies.
func (f *FaultNet) Close() {
	for _, nd := range f.nodes {
		for _, ln := range nd.lns {
			ln.Close()
		}
		if nd.udpFront != nil {
			nd.udpFront.Close()
		}
		for _, pc := range nd.udpPair {
			pc.Close()
		}
	}
	for _, p := range f.proxies() {
		p.Stop()
	}
}

// udpAddr parses a loopback HOST:PORT this file built.
func udpAddr(s string) *net.UDPAddr {
	a, _ := net.ResolveUDPAddr("udp", s)
	return a
}

// freeTCPUDP returns a loopback address whose port is free for TCP and
// UDP alike (memberlist binds both on one port).
func freeTCPUDP() (string, error) {
	// FreeAddrs' cursor: below the ephemeral range (a port released there
	// can be handed to any outgoing connection before its process binds
	// it) and never the same port twice before the walk goes round.
	for range freePortMax - freePortMin {
		addr := fmt.Sprintf("127.0.0.1:%d", nextFreePort())
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err == nil {
			pc.Close()
			return addr, nil
		}
	}
	return "", errors.New("faultnet: no port free for TCP and UDP")
}
