package localfleet

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
)

func TestAtBaseIsTheDocumentedLayout(t *testing.T) {
	p := AtBase(4000, 3, 4)
	if r := p.Routers[2]; r != (Router{ID: "r3", API: 4020, Admin: 4021, Raft: 4022, Gossip: 4023}) {
		t.Errorf("router 3: %+v", r)
	}
	if e := p.Engines[3]; e != (Engine{ID: "engine-4", HTTP: 4130, KV: 4131, Replay: 4132, Gossip: 4133, SideMetrics: 4134}) {
		t.Errorf("engine 4: %+v", e)
	}
	if n := len(p.Ports()); n != 3*4+4*5 {
		t.Errorf("%d ports, want 32", n)
	}
}

func TestFreeGivesDistinctPorts(t *testing.T) {
	p, err := Free(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]string{}
	for _, port := range p.Ports() {
		if port.Port <= 0 {
			t.Fatalf("%s has no port", port.What)
		}
		if other, dup := seen[port.Port]; dup {
			t.Fatalf("%s and %s share port %d", port.What, other, port.Port)
		}
		seen[port.Port] = port.What
	}
	if err := Check(p.Ports()); err != nil {
		t.Fatalf("a free plan does not check: %v", err)
	}
}

func TestCheckNamesTheBusyPort(t *testing.T) {
	// Hold a port whose neighbour below is free, so the plan's r1 API port
	// (busy-1) is not itself taken by something else on a shared machine.
	var ln net.Listener
	var busy int
	for try := 0; ; try++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if below, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port-1)); err == nil {
			below.Close()
			ln, busy = l, port
			break
		}
		l.Close()
		if try == 50 {
			t.Fatal("found no free port pair")
		}
	}
	defer ln.Close()
	p := AtBase(busy-1, 1, 0) // the busy port is r1's admin
	err := Check(p.Ports())
	if !errors.Is(err, ErrPortBusy) || !strings.Contains(err.Error(), "r1 admin (--admin)") || !strings.Contains(err.Error(), "already in use") {
		t.Fatalf("Check = %v, want the busy r1 admin port named", err)
	}
	if err := Check(AtBase(65534, 1, 0).Ports()); !errors.Is(err, ErrPortRange) {
		t.Fatalf("ports beyond 65535: %v, want ErrPortRange", err)
	}
}

func TestRouterArgsJoinEveryOtherRouter(t *testing.T) {
	p := AtBase(4000, 3, 1)
	args := p.RouterArgs(1, Files{Dir: "/d", Config: "/d/rolter.toml", AdminToken: "/d/a", InternalToken: "/d/i"})
	flag := func(name string) string {
		i := slices.Index(args, name)
		if i < 0 || i+1 >= len(args) {
			t.Fatalf("no %s in %v", name, args)
		}
		return args[i+1]
	}
	want := "r1=127.0.0.1:4002,r2=127.0.0.1:4012,r3=127.0.0.1:4022,127.0.0.1:4003,127.0.0.1:4023"
	if got := flag("--join"); got != want {
		t.Errorf("--join %s, want %s (every Raft peer, the other routers' gossip)", got, want)
	}
	if flag("--node-id") != "r2" || flag("--bootstrap-expect") != "3" || flag("--data-dir") != "/d/data/r2" {
		t.Errorf("args %v", args)
	}
	side := p.SidecarArgs(0, false)
	if slices.Contains(side, "--kv-events") || !slices.Contains(side, "127.0.0.1:4003,127.0.0.1:4013,127.0.0.1:4023") {
		t.Errorf("sidecar without KV events: %v", side)
	}
	if sim := p.SimArgs(0, 2.5, true, "--kv-blocks", "64"); !slices.Contains(sim, "tcp://127.0.0.1:4101") || sim[len(sim)-1] != "64" ||
		!slices.Contains(sim, "2.5") {
		t.Errorf("sim args %v", sim)
	}
}
