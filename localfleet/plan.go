// Package localfleet owns the layout of a rolter fleet run on one
// machine's loopback by `rolter demo`, `rolter bench fleet` and the e2e
// harness: the port plan of its routers and engines (fixed from a base
// port, or free ports picked by the kernel), the files the routers share
// (rolter.toml written by config.Encode, the token files), and the
// command lines of `rolter router`, `rolter sim` and `rolter sidecar`.
// Starting and stopping the processes is package supervise's.
package localfleet

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
)

// Router is one router's loopback ports.
type Router struct {
	ID                       string
	API, Admin, Raft, Gossip int
}

// Engine is one engine's loopback ports and its sidecar's.
type Engine struct {
	ID string
	// HTTP is the sim's API; KV and Replay its KV-event publisher and
	// replay sockets; Gossip and SideMetrics the sidecar's.
	HTTP, KV, Replay, Gossip, SideMetrics int
}

// Plan is every port of a fleet.
type Plan struct {
	Routers []Router
	Engines []Engine
}

func routerID(i int) string { return fmt.Sprintf("r%d", i+1) }
func engineID(j int) string { return fmt.Sprintf("engine-%d", j+1) }

// AtBase derives every port from base: router i uses base+10i+{0..3}
// (API, admin, Raft, gossip), engine j base+100+10j+{0..4} (sim API, KV
// events, KV replay, sidecar gossip, sidecar metrics). Check says whether
// they are free.
func AtBase(base, routers, engines int) Plan {
	var p Plan
	for i := range routers {
		b := base + 10*i
		p.Routers = append(p.Routers, Router{ID: routerID(i), API: b, Admin: b + 1, Raft: b + 2, Gossip: b + 3})
	}
	for j := range engines {
		b := base + 100 + 10*j
		p.Engines = append(p.Engines, Engine{ID: engineID(j), HTTP: b, KV: b + 1, Replay: b + 2, Gossip: b + 3, SideMetrics: b + 4})
	}
	return p
}

// Free takes a free loopback port for every router and engine port. The
// listeners are held until every port is chosen, so no two are the same;
// gossip ports are free on UDP too (memberlist listens on both).
func Free(routers, engines int) (Plan, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	port := func(udp bool) (int, error) {
		for range 20 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return 0, err
			}
			closers = append(closers, ln)
			p := ln.Addr().(*net.TCPAddr).Port
			if !udp {
				return p, nil
			}
			if pc, err := net.ListenPacket("udp", Addr(p)); err == nil {
				closers = append(closers, pc)
				return p, nil
			}
		}
		return 0, errors.New("localfleet: no free UDP+TCP port")
	}
	fill := func(ports ...Port) error {
		for _, p := range ports {
			v, err := port(p.UDP)
			if err != nil {
				return err
			}
			*p.dst = v
		}
		return nil
	}
	var p Plan
	for i := range routers {
		r := Router{ID: routerID(i)}
		if err := fill(r.ports()...); err != nil {
			return p, err
		}
		p.Routers = append(p.Routers, r)
	}
	for j := range engines {
		e := Engine{ID: engineID(j)}
		if err := fill(e.ports()...); err != nil {
			return p, err
		}
		p.Engines = append(p.Engines, e)
	}
	return p, nil
}

// Port is one port of the plan, named for messages; UDP marks a gossip
// port (memberlist listens on UDP and TCP).
type Port struct {
	What string
	Port int
	UDP  bool
	dst  *int
}

func (r *Router) ports() []Port {
	return []Port{{r.ID + " API (--http)", r.API, false, &r.API}, {r.ID + " admin (--admin)", r.Admin, false, &r.Admin},
		{r.ID + " Raft (--raft)", r.Raft, false, &r.Raft}, {r.ID + " gossip (--gossip)", r.Gossip, true, &r.Gossip}}
}

func (e *Engine) ports() []Port {
	return []Port{{e.ID + " sim API", e.HTTP, false, &e.HTTP}, {e.ID + " KV events", e.KV, false, &e.KV},
		{e.ID + " KV replay", e.Replay, false, &e.Replay}, {e.ID + " sidecar gossip", e.Gossip, true, &e.Gossip},
		{e.ID + " sidecar metrics", e.SideMetrics, false, &e.SideMetrics}}
}

// Ports lists every port of the plan, routers first, in plan order.
func (p Plan) Ports() []Port {
	var out []Port
	for i := range p.Routers {
		out = append(out, p.Routers[i].ports()...)
	}
	for j := range p.Engines {
		out = append(out, p.Engines[j].ports()...)
	}
	for i := range out {
		out[i].dst = nil
	}
	return out
}

// ErrPortBusy marks a port of the plan that is taken (another demo, say).
var ErrPortBusy = errors.New("port busy")

// ErrPortRange marks a port of the plan outside 1..65535.
var ErrPortRange = errors.New("port out of range")

// Check listens on every port once, before anything starts, so a busy
// port fails at once with its name instead of a child failing later. A
// busy port's error wraps ErrPortBusy and names the range the plan spans.
func Check(ports []Port) error {
	busy := func(network string, p Port, err error) error {
		why := "is already in use"
		if !errors.Is(err, syscall.EADDRINUSE) {
			why = fmt.Sprintf("cannot be opened (%v)", err)
		}
		return fmt.Errorf("%w: %s 127.0.0.1:%d (%s) %s; is another rolter demo running? "+
			"Stop it, or pick another range with --base-port (this one spans %d-%d)",
			ErrPortBusy, network, p.Port, p.What, why, ports[0].Port, ports[len(ports)-1].Port)
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for _, p := range ports {
		if p.Port <= 0 || p.Port > 65535 {
			return fmt.Errorf("%w: port %d (%s); pick another --base-port", ErrPortRange, p.Port, p.What)
		}
		ln, err := net.Listen("tcp", Addr(p.Port))
		if err != nil {
			return busy("tcp", p, err)
		}
		closers = append(closers, ln)
		if p.UDP {
			pc, err := net.ListenPacket("udp", Addr(p.Port))
			if err != nil {
				return busy("udp", p, err)
			}
			closers = append(closers, pc)
		}
	}
	return nil
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// URL is the sim's base URL.
func (e Engine) URL() string { return "http://" + Addr(e.HTTP) }

// APIURL and AdminURL are the router's base URLs.
func (r Router) APIURL() string   { return "http://" + Addr(r.API) }
func (r Router) AdminURL() string { return "http://" + Addr(r.Admin) }
