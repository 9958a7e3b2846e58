package deploy

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// peer is a pod (or a client outside the mesh) in a namespace.
type peer struct {
	Namespace       string
	NamespaceLabels map[string]string
	Labels          map[string]string
}

// ingressAllowed evaluates the NetworkPolicies of f the way a
// NetworkPolicy-enforcing CNI does for ingress: a pod no policy selects
// accepts everything; otherwise some rule of some selecting policy must
// admit the source and the port (named ports resolve on the destination).
func ingressAllowed(f *fleet, from peer, to workload, port int32, proto corev1.Protocol) bool {
	ns := f.Namespace
	if ns == "" {
		ns = defaultNamespace
	}
	selected := false
	for _, np := range f.NetworkPolicies {
		if ok, _ := selects(&np.Spec.PodSelector, to.Template.Labels); !ok || !hasIngress(np) {
			continue
		}
		selected = true
		for _, rule := range np.Spec.Ingress {
			if portMatches(rule.Ports, to, port, proto) && sourceMatches(rule.From, from, ns) {
				return true
			}
		}
	}
	return !selected
}

func hasIngress(np networkingv1.NetworkPolicy) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return true
	}
	for _, t := range np.Spec.PolicyTypes {
		if t == networkingv1.PolicyTypeIngress {
			return true
		}
	}
	return false
}

func portMatches(ports []networkingv1.NetworkPolicyPort, to workload, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if cp := podPort(&to.Template.Spec, p.Port.String(), proto); cp != nil && cp.ContainerPort == port {
			return true
		}
	}
	return false
}

func sourceMatches(from []networkingv1.NetworkPolicyPeer, src peer, policyNS string) bool {
	if len(from) == 0 {
		return true
	}
	for _, p := range from {
		if p.IPBlock != nil {
			continue // pod-to-pod checks only: ipBlock never stands for a pod here
		}
		if p.NamespaceSelector != nil {
			if ok, _ := selects(p.NamespaceSelector, src.NamespaceLabels); !ok {
				continue
			}
		} else if src.Namespace != policyNS {
			continue
		}
		if p.PodSelector == nil {
			return true
		}
		if ok, _ := selects(p.PodSelector, src.Labels); ok {
			return true
		}
	}
	return false
}

// TestNetworkPolicy checks who can reach what: only routers reach the
// engines' API, every mesh member gossips with every other, Raft stays
// among routers, clients reach the API, Prometheus reaches /metrics.
func TestNetworkPolicy(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		ns := f.Namespace
		if ns == "" {
			ns = defaultNamespace
		}
		var router, engine *workload
		for _, w := range f.workloads() {
			switch {
			case findContainer(w.Template, func(c *corev1.Container) bool { return isRolter(c) && c.Args[0] == "router" }) != nil:
				router = &w
			case findContainer(w.Template, isVLLM) != nil:
				engine = &w
			}
		}
		if router == nil || engine == nil {
			t.Fatal("need a router and an engine workload")
		}
		nsLabels := func(name string) map[string]string { return map[string]string{"kubernetes.io/metadata.name": name} }
		in := func(w *workload) peer { return peer{ns, nsLabels(ns), w.Template.Labels} }
		client := peer{ns, nsLabels(ns), map[string]string{"app": "some-client"}}
		elsewhere := peer{"apps", nsLabels("apps"), map[string]string{"app": "some-client"}}
		prometheus := peer{"monitoring", nsLabels("monitoring"), map[string]string{"app.kubernetes.io/name": "prometheus"}}
		port := func(w *workload, name string) int32 {
			p := podPort(&w.Template.Spec, name, corev1.ProtocolTCP)
			if p == nil {
				p = podPort(&w.Template.Spec, name, corev1.ProtocolUDP)
			}
			if p == nil {
				t.Fatalf("%s has no port %s", w.Name, name)
			}
			return p.ContainerPort
		}
		tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
		cases := []struct {
			name  string
			from  peer
			to    *workload
			port  int32
			proto corev1.Protocol
			want  bool
		}{
			{"router to engine API", in(router), engine, port(engine, "http"), tcp, true},
			{"client pod to engine API", client, engine, port(engine, "http"), tcp, false},
			{"other namespace to engine API", elsewhere, engine, port(engine, "http"), tcp, false},
			{"engine to engine API", in(engine), engine, port(engine, "http"), tcp, false},
			{"router to sidecar gossip tcp", in(router), engine, port(engine, "gossip-tcp"), tcp, true},
			{"router to sidecar gossip udp", in(router), engine, port(engine, "gossip-udp"), udp, true},
			{"sidecar to sidecar gossip udp", in(engine), engine, port(engine, "gossip-udp"), udp, true},
			{"sidecar to router gossip tcp", in(engine), router, port(router, "gossip-tcp"), tcp, true},
			{"sidecar to router gossip udp", in(engine), router, port(router, "gossip-udp"), udp, true},
			{"client to sidecar gossip", client, engine, port(engine, "gossip-tcp"), tcp, false},
			{"router to router raft", in(router), router, port(router, "raft"), tcp, true},
			{"sidecar to router raft", in(engine), router, port(router, "raft"), tcp, false},
			{"client to router API", client, router, port(router, "http"), tcp, true},
			{"other namespace to router API", elsewhere, router, port(router, "http"), tcp, true},
			{"prometheus to router metrics", prometheus, router, port(router, "admin"), tcp, true},
			{"prometheus to sidecar metrics", prometheus, engine, port(engine, "metrics"), tcp, true},
			{"other namespace to router admin", elsewhere, router, port(router, "admin"), tcp, false},
			{"client to engine KV events", client, engine, 5557, tcp, false},
		}
		for _, c := range cases {
			t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
				if got := ingressAllowed(f, c.from, *c.to, c.port, c.proto); got != c.want {
					t.Errorf("%s → %s:%s/%s allowed = %v, want %v", c.from.Labels, c.to.Name, strconv.Itoa(int(c.port)), c.proto, got, c.want)
				}
			})
		}
	})
}
