package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rolter/rolter/config"
	corev1 "k8s.io/api/core/v1"
)

// TestRolterFilesAreMounted: every path a rolter flag reads is a file that
// a ConfigMap or Secret volume puts there, and --data-dir is a writable
// volume (the root filesystem is read-only).
func TestRolterFilesAreMounted(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
			files, missing := mountedFiles(f, &w.Template.Spec, c)
			for _, m := range missing {
				t.Errorf("%s/%s: %s", w.Name, c.Name, m)
			}
			for flag, v := range fa.Flags {
				if flag != "config" && !strings.HasSuffix(flag, "-file") && !strings.Contains(flag, "tls-") && !strings.HasSuffix(flag, "-ca") {
					continue
				}
				if _, ok := files[v]; !ok {
					t.Errorf("%s/%s: --%s=%s is not a file any ConfigMap or Secret volume provides (have %v)", w.Name, c.Name, flag, v, keysOf(files))
				}
			}
			if dir, ok := fa.Flags["data-dir"]; ok {
				writable := false
				for _, m := range c.VolumeMounts {
					writable = writable || (m.MountPath == dir && !m.ReadOnly)
				}
				if !writable {
					t.Errorf("%s/%s: --data-dir=%s is not a writable volume mount: Raft state would be lost or unwritable", w.Name, c.Name, dir)
				}
			}
		})
	})
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestRaftQuorum: the voter count is odd, matches --bootstrap-expect (a
// larger value never bootstraps, a smaller one can split-brain on first
// start), every voter advertises its stable per-pod DNS name, and the
// disruption budget keeps a quorum while still letting a node drain.
func TestRaftQuorum(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		routers := 0
		rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
			if sub != "router" {
				return
			}
			routers++
			if w.Kind != "StatefulSet" {
				t.Errorf("%s: routers keep Raft state: run them as a StatefulSet, not a %s", w.Name, w.Kind)
			}
			if w.Replicas%2 == 0 {
				t.Errorf("%s: %d Raft voters: use an odd number", w.Name, w.Replicas)
			}
			if be := fa.Flags["bootstrap-expect"]; be != strconv.Itoa(int(w.Replicas)) {
				t.Errorf("%s: --bootstrap-expect=%s but replicas is %d", w.Name, be, w.Replicas)
			}
			host, _, err := net.SplitHostPort(fa.Flags["raft-advertise"])
			if err != nil {
				t.Errorf("%s: --raft-advertise: %v", w.Name, err)
			} else if want := w.Name + "-0." + w.ServiceName + "."; !strings.HasPrefix(host, want) {
				t.Errorf("%s: --raft-advertise host %q is not the pod's stable name %s…", w.Name, host, want)
			}
			quorum := w.Replicas/2 + 1
			covered := false
			for _, pdb := range f.PDBs {
				if ok, _ := selects(pdb.Spec.Selector, w.Template.Labels); !ok {
					continue
				}
				covered = true
				if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < int(quorum) || pdb.Spec.MinAvailable.IntValue() >= int(w.Replicas) {
					t.Errorf("PodDisruptionBudget %s: minAvailable %v must be in [%d, %d] for %d voters", pdb.Name, pdb.Spec.MinAvailable, quorum, w.Replicas-1, w.Replicas)
				}
			}
			if !covered {
				t.Errorf("%s: no PodDisruptionBudget protects the Raft quorum", w.Name)
			}
		})
		if routers != 1 {
			t.Fatalf("found %d router containers, want 1", routers)
		}
	})
}

// TestConfigMapTOMLParses runs the rolter.toml the routers mount through
// the real config package, with the environment the router container gets
// (so a secret_env a key names must be set by the pod), and checks that
// every model a discover route serves is one an engine serves.
func TestConfigMapTOMLParses(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		served := servedModels(t, f)
		rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
			if sub != "router" {
				return
			}
			files, _ := mountedFiles(f, &w.Template.Spec, c)
			src, ok := files[fa.Flags["config"]]
			if !ok {
				t.Fatalf("%s: --config=%s is not mounted", w.Name, fa.Flags["config"])
			}
			cmName, key, _ := strings.Cut(strings.TrimPrefix(src, "ConfigMap "), " key ")
			cm := f.configMap(cmName)
			if cm == nil {
				t.Fatalf("%s: --config comes from %q, not a ConfigMap", w.Name, src)
			}
			env, _ := podEnv(f, w, c)
			cfg, err := config.Parse(key, []byte(cm.Data[key]), func(k string) string { return env[k] })
			if err != nil {
				t.Fatalf("ConfigMap %s key %s: %v", cm.Name, key, err)
			}
			discovered := 0
			for _, r := range cfg.Routes {
				if !r.Discover {
					continue
				}
				discovered++
				if !served[r.Model] {
					t.Errorf("route %q discovers its engines, but no engine serves that model (served: %v)", r.Model, keysOf(served))
				}
			}
			if discovered == 0 {
				t.Error("no discover = true route: engines would have to be listed by address")
			}
		})
	})
}

// servedModels is the set of model names the vLLM containers serve.
func servedModels(t *testing.T, f *fleet) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, w := range f.workloads() {
		c := findContainer(w.Template, isVLLM)
		if c == nil {
			continue
		}
		fa := parseArgs(c.Args)
		name := fa.Flags["served-model-name"]
		if name == "" && len(fa.Positional) > 0 {
			name = fa.Positional[0]
		}
		if name == "" {
			name = fa.Flags["model"]
		}
		out[name] = true
	}
	if len(out) == 0 {
		t.Fatal("no vLLM engine in the manifests")
	}
	return out
}

func isVLLM(c *corev1.Container) bool { return strings.Contains(c.Image, "vllm") }

// kvEventsConfig is vLLM's --kv-events-config: the keys engine-protocols.md
// lists plus max_queue_size (vLLM's KVEventsConfig has it too); an unknown
// key fails the decode, as vLLM would refuse it.
type kvEventsConfig struct {
	EnableKVCacheEvents bool    `json:"enable_kv_cache_events"`
	Publisher           string  `json:"publisher"`
	Endpoint            string  `json:"endpoint"`
	ReplayEndpoint      *string `json:"replay_endpoint"`
	BufferSteps         *int    `json:"buffer_steps"`
	HWM                 *int    `json:"hwm"`
	MaxQueueSize        *int    `json:"max_queue_size"`
	Topic               string  `json:"topic"`
}

// zmqEndpoint splits tcp://host:port.
func zmqEndpoint(ep string) (host, port string, err error) {
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "tcp" {
		return "", "", fmt.Errorf("not a tcp:// endpoint: %q", ep)
	}
	return u.Hostname(), u.Port(), nil
}

// TestKVEventsReachTheSidecar follows an engine's KV events to its
// sidecar: vLLM publishes them (prefix caching on, zmq publisher), its PUB
// socket binds or connects by vLLM's rule and the sidecar does the
// opposite on the same port, the replay endpoint and topic agree, and the
// engine URL the sidecar announces to the routers is reachable from other
// pods and is vLLM's port.
func TestKVEventsReachTheSidecar(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		engines := 0
		for _, w := range f.workloads() {
			vc := findContainer(w.Template, isVLLM)
			if vc == nil {
				continue
			}
			engines++
			sc := findContainer(w.Template, func(c *corev1.Container) bool { return isRolter(c) && c.Args[0] == "sidecar" })
			if sc == nil {
				t.Errorf("%s: vLLM runs without a rolter sidecar in its pod", w.Name)
				continue
			}
			vargs, _ := expandedArgs(f, w, vc)
			sargs, _ := expandedArgs(f, w, sc)
			v, s := parseArgs(vargs), parseArgs(sargs[1:])
			if v.Flags["enable-prefix-caching"] != "true" {
				t.Errorf("%s: vLLM needs --enable-prefix-caching for its cache to be worth routing to", w.Name)
			}
			var kv kvEventsConfig
			dec := json.NewDecoder(bytes.NewReader([]byte(v.Flags["kv-events-config"])))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&kv); err != nil {
				t.Errorf("%s: --kv-events-config: %v", w.Name, err)
				continue
			}
			if !kv.EnableKVCacheEvents || kv.Publisher != "zmq" {
				t.Errorf("%s: --kv-events-config must set enable_kv_cache_events true and publisher zmq: %+v", w.Name, kv)
			}
			endpoint := kv.Endpoint
			if endpoint == "" {
				endpoint = "tcp://*:5557"
			}
			vhost, vport, err := zmqEndpoint(endpoint)
			if err != nil {
				t.Errorf("%s: endpoint: %v", w.Name, err)
				continue
			}
			shost, sport, err := zmqEndpoint(s.Flags["kv-events"])
			if err != nil {
				t.Errorf("%s: sidecar --kv-events: %v", w.Name, err)
				continue
			}
			vllmBinds := vhost == "*" || vhost == "::"
			sidecarBinds := s.Flags["kv-events-bind"] == "true"
			switch {
			case vllmBinds == sidecarBinds:
				t.Errorf("%s: vLLM endpoint %s %s and the sidecar %s: exactly one side must bind", w.Name, endpoint, bindWord(vllmBinds), bindWord(sidecarBinds))
			case vport != sport:
				t.Errorf("%s: vLLM publishes KV events on port %s, the sidecar listens on %s", w.Name, vport, sport)
			case !isLoopback(shost) || (!vllmBinds && !isLoopback(vhost)):
				t.Errorf("%s: KV events must stay inside the pod (loopback): vLLM %s, sidecar %s", w.Name, endpoint, s.Flags["kv-events"])
			}
			if kv.ReplayEndpoint == nil || s.Flags["kv-events-replay"] == "" {
				t.Errorf("%s: without a replay endpoint on both sides a missed event leaves the residency view degraded", w.Name)
			} else {
				_, rp, err1 := zmqEndpoint(*kv.ReplayEndpoint)
				_, sp, err2 := zmqEndpoint(s.Flags["kv-events-replay"])
				if err1 != nil || err2 != nil || rp != sp {
					t.Errorf("%s: replay endpoints disagree: vLLM %s, sidecar %s", w.Name, *kv.ReplayEndpoint, s.Flags["kv-events-replay"])
				}
			}
			if !strings.HasPrefix(kv.Topic, s.Flags["topic"]) {
				t.Errorf("%s: the sidecar subscribes to topic prefix %q, vLLM publishes %q", w.Name, s.Flags["topic"], kv.Topic)
			}
			if vb, sb := v.Flags["block-size"], s.Flags["block-size"]; vb != "" && sb != "" && vb != sb {
				t.Errorf("%s: vLLM block size %s, sidecar %s: block keys would never match", w.Name, vb, sb)
			}
			eng, err := url.Parse(s.Flags["engine"])
			vport2 := v.Flags["port"]
			if vport2 == "" {
				vport2 = "8000"
			}
			switch {
			case err != nil:
				t.Errorf("%s: sidecar --engine: %v", w.Name, err)
			case eng.Port() != vport2:
				t.Errorf("%s: sidecar --engine %s but vLLM listens on %s", w.Name, eng, vport2)
			case isLoopback(eng.Hostname()):
				t.Errorf("%s: sidecar --engine %s is announced to the routers by gossip; loopback is unreachable from them (use $(POD_IP))", w.Name, eng)
			}
		}
		if engines == 0 {
			t.Fatal("no vLLM engine")
		}
	})
}

func bindWord(b bool) string {
	if b {
		return "binds"
	}
	return "connects"
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// TestPodsAreHardened: rolter never runs as root, cannot gain privileges,
// writes nothing outside its volumes, and every container states the
// resources the scheduler needs (vLLM its GPU).
func TestPodsAreHardened(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		for _, w := range f.workloads() {
			pod := &w.Template.Spec
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("%s: rolter needs no Kubernetes API token: set automountServiceAccountToken false", w.Name)
			}
			for i := range pod.Containers {
				c := &pod.Containers[i]
				if len(c.Resources.Requests) == 0 {
					t.Errorf("%s/%s: no resource requests", w.Name, c.Name)
				}
				if isVLLM(c) {
					if _, ok := c.Resources.Limits["nvidia.com/gpu"]; !ok {
						t.Errorf("%s/%s: vLLM without a GPU limit", w.Name, c.Name)
					}
					continue
				}
				if !isRolter(c) {
					continue
				}
				sc, psc := c.SecurityContext, pod.SecurityContext
				nonRoot := (sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
				if !nonRoot {
					t.Errorf("%s/%s: runAsNonRoot is not set", w.Name, c.Name)
				}
				switch {
				case sc == nil:
					t.Errorf("%s/%s: no securityContext", w.Name, c.Name)
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Errorf("%s/%s: allowPrivilegeEscalation must be false", w.Name, c.Name)
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Errorf("%s/%s: readOnlyRootFilesystem must be true", w.Name, c.Name)
				case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
					t.Errorf("%s/%s: capabilities must drop ALL", w.Name, c.Name)
				}
			}
		}
	})
}
