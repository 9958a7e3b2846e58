package main

import (
	"fmt"
	"net"
	"strings"
)

// Plaintext on loopback. One router (or a router and its sidecars) on a
// laptop talks only over 127.0.0.1: nobody else can see or inject that
// traffic, so it needs neither Raft TLS nor a gossip key; it starts with a
// warning. As soon as a process binds or advertises another address, or a
// router joins peers, TLS and the gossip key (or an explicit
// --insecure-dev) are required again.

// isLoopback reports whether addr (HOST:PORT) reaches only this machine:
// 127.0.0.0/8, ::1 or localhost. An empty or unspecified host binds every
// interface, so it is not loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// nonLoopback names the first of addrs (flag name → HOST:PORT, empty ones
// skipped) that is not loopback, or returns "".
func nonLoopback(addrs ...[2]string) string {
	for _, a := range addrs {
		if a[1] != "" && !isLoopback(a[1]) {
			return fmt.Sprintf("%s %s is not a loopback address", a[0], a[1])
		}
	}
	return ""
}

// needsSecurity returns why this router's Raft and gossip must be
// secured, or "" when it is alone on loopback.
func (f *clusterFlags) needsSecurity(join joinList) string {
	switch {
	case len(join.raft) > 0:
		return "it joins Raft peers (--join id=host:port)"
	case len(join.seeds) > 0:
		return "it joins a gossip pool (--join host:port), whose routers it would join in Raft"
	case f.bootstrapExpect > 1:
		return fmt.Sprintf("it expects %d routers (--bootstrap-expect)", f.bootstrapExpect)
	}
	return nonLoopback([2]string{"--raft", f.raftAddr}, [2]string{"--raft-advertise", f.raftAdvertise},
		[2]string{"--gossip", f.gossip.addr}, [2]string{"--gossip-advertise", f.gossip.advertise})
}

// needsKey returns why a sidecar's gossip must be encrypted, or "" when
// it binds, advertises and joins loopback addresses only.
func (g *gossipFlags) needsKey(seeds []string) string {
	addrs := [][2]string{{"--gossip", g.addr}, {"--gossip-advertise", g.advertise}}
	for _, s := range seeds {
		addrs = append(addrs, [2]string{"--join", s})
	}
	if g.addr == "" {
		return "--gossip is empty (every interface)"
	}
	return nonLoopback(addrs...)
}
