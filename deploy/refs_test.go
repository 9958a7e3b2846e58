package deploy

import (
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestSelectorsMatchPodLabels: every selector in the manifests selects the
// pods it is written for, and every port it names exists on those pods.
func TestSelectorsMatchPodLabels(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		wls := f.workloads()
		if len(wls) == 0 {
			t.Fatal("no workloads")
		}
		selected := func(match func(map[string]string) bool) []workload {
			var out []workload
			for _, w := range wls {
				if match(w.Template.Labels) {
					out = append(out, w)
				}
			}
			return out
		}
		for _, w := range wls {
			ok, err := selects(w.Selector, w.Template.Labels)
			if err != nil || !ok {
				t.Errorf("%s %s: selector %v does not match its template labels %v (%v)", w.Kind, w.Name, w.Selector, w.Template.Labels, err)
			}
			if a := w.Template.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				for _, term := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
					if ok, _ := selects(term.PodAffinityTerm.LabelSelector, w.Template.Labels); !ok {
						t.Errorf("%s %s: anti-affinity selector does not match its own pods, so replicas may share a node", w.Kind, w.Name)
					}
				}
				for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					if ok, _ := selects(term.LabelSelector, w.Template.Labels); !ok {
						t.Errorf("%s %s: anti-affinity selector does not match its own pods", w.Kind, w.Name)
					}
				}
			}
		}
		services := map[string]*corev1.Service{}
		for i := range f.Services {
			svc := &f.Services[i]
			services[svc.Name] = svc
			pods := selected(func(ls map[string]string) bool { return mapSelects(svc.Spec.Selector, ls) })
			if len(pods) == 0 {
				t.Errorf("Service %s: selector %v matches no pod template", svc.Name, svc.Spec.Selector)
			}
			for _, p := range svc.Spec.Ports {
				target := p.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(p.Port)
				}
				for _, w := range pods {
					if podPort(&w.Template.Spec, target.String(), p.Protocol) == nil {
						t.Errorf("Service %s port %s: targetPort %s/%s is not a container port of %s %s", svc.Name, p.Name, target.String(), p.Protocol, w.Kind, w.Name)
					}
				}
			}
		}
		for _, w := range wls {
			if w.Kind != "StatefulSet" {
				continue
			}
			svc := services[w.ServiceName]
			switch {
			case svc == nil:
				t.Errorf("StatefulSet %s: serviceName %q names no Service: pods get no DNS names", w.Name, w.ServiceName)
			case svc.Spec.ClusterIP != corev1.ClusterIPNone:
				t.Errorf("StatefulSet %s: Service %s must be headless to give each pod a DNS name", w.Name, svc.Name)
			case !svc.Spec.PublishNotReadyAddresses:
				t.Errorf("Service %s: publishNotReadyAddresses must be true: routers are not ready before Raft has a quorum, which needs the peers' DNS names", svc.Name)
			case !mapSelects(svc.Spec.Selector, w.Template.Labels):
				t.Errorf("StatefulSet %s: its Service %s does not select its pods", w.Name, svc.Name)
			}
		}
		for _, pdb := range f.PDBs {
			n := 0
			for _, w := range wls {
				if ok, _ := selects(pdb.Spec.Selector, w.Template.Labels); ok {
					n++
				}
			}
			if n == 0 {
				t.Errorf("PodDisruptionBudget %s selects no pods", pdb.Name)
			}
		}
		for _, np := range f.NetworkPolicies {
			pods := selected(func(ls map[string]string) bool { ok, _ := selects(&np.Spec.PodSelector, ls); return ok })
			if len(pods) == 0 {
				t.Errorf("NetworkPolicy %s: podSelector matches no pod template", np.Name)
			}
			for i, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port == nil {
						continue
					}
					proto := corev1.ProtocolTCP
					if p.Protocol != nil {
						proto = *p.Protocol
					}
					for _, w := range pods {
						if podPort(&w.Template.Spec, p.Port.String(), proto) == nil {
							t.Errorf("NetworkPolicy %s ingress[%d]: port %s/%s is not a container port of %s %s", np.Name, i, p.Port.String(), proto, w.Kind, w.Name)
						}
					}
				}
				for _, peer := range rule.From {
					if peer.PodSelector == nil || len(peer.PodSelector.MatchLabels)+len(peer.PodSelector.MatchExpressions) == 0 || peer.NamespaceSelector != nil {
						continue
					}
					if len(selected(func(ls map[string]string) bool { ok, _ := selects(peer.PodSelector, ls); return ok })) == 0 {
						t.Errorf("NetworkPolicy %s ingress[%d]: from podSelector %v matches no pod template", np.Name, i, peer.PodSelector.MatchLabels)
					}
				}
			}
		}
		if len(f.ServiceMonitors) == 0 {
			t.Error("no ServiceMonitor")
		}
		for _, sm := range f.ServiceMonitors {
			n := 0
			for _, svc := range f.Services {
				ok, err := selects(&sm.Spec.Selector, svc.Labels)
				if err != nil {
					t.Errorf("ServiceMonitor %s: %v", sm.Name, err)
				}
				if !ok {
					continue
				}
				n++
				for _, ep := range sm.Spec.Endpoints {
					found := false
					for _, p := range svc.Spec.Ports {
						found = found || p.Name == ep.Port
					}
					if !found {
						t.Errorf("ServiceMonitor %s: Service %s has no port named %q", sm.Name, svc.Name, ep.Port)
					}
				}
			}
			if n == 0 {
				t.Errorf("ServiceMonitor %s: selector %v matches no Service", sm.Name, sm.Spec.Selector.MatchLabels)
			}
		}
	})
}

// TestProbesHitDeclaredPorts: a probe on a port the container does not
// declare never succeeds (named ports) or probes the wrong process.
func TestProbesHitDeclaredPorts(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		for _, w := range f.workloads() {
			for _, c := range w.Template.Spec.Containers {
				probes := map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe}
				for kind, p := range probes {
					if p == nil {
						continue
					}
					if p.HTTPGet == nil {
						t.Errorf("%s/%s: %s probe is not an HTTP GET", w.Name, c.Name, kind)
						continue
					}
					if containerPort(&c, p.HTTPGet.Port.String(), corev1.ProtocolTCP) == nil {
						t.Errorf("%s/%s: %s probe port %s is not a TCP port of the container", w.Name, c.Name, kind, p.HTTPGet.Port.String())
					}
				}
				if c.LivenessProbe == nil {
					t.Errorf("%s/%s: no liveness probe", w.Name, c.Name)
				}
				if isRolter(&c) && c.Args[0] == "router" {
					if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
						t.Errorf("%s/%s: the router's readiness probe must be GET /readyz", w.Name, c.Name)
					}
					if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/healthz" {
						t.Errorf("%s/%s: the router's liveness probe must be GET /healthz", w.Name, c.Name)
					}
				}
			}
		}
	})
}

// TestReferencedObjectsAndKeysExist: every ConfigMap, Secret and key a pod
// references exists (a missing one leaves the pod in
// CreateContainerConfigError), and so does the ServiceAccount.
func TestReferencedObjectsAndKeysExist(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		for _, w := range f.workloads() {
			spec := &w.Template.Spec
			if sa := spec.ServiceAccountName; sa != "" {
				found := false
				for _, s := range f.ServiceAccounts {
					found = found || s.Name == sa
				}
				if !found {
					t.Errorf("%s %s: ServiceAccount %q does not exist", w.Kind, w.Name, sa)
				}
			}
			for _, v := range spec.Volumes {
				switch {
				case v.ConfigMap != nil:
					cm := f.configMap(v.ConfigMap.Name)
					if cm == nil {
						t.Errorf("%s %s volume %s: no ConfigMap %q", w.Kind, w.Name, v.Name, v.ConfigMap.Name)
						continue
					}
					for _, it := range v.ConfigMap.Items {
						if _, ok := cm.Data[it.Key]; !ok {
							t.Errorf("%s %s volume %s: ConfigMap %s has no key %q", w.Kind, w.Name, v.Name, cm.Name, it.Key)
						}
					}
				case v.Secret != nil:
					s := f.secret(v.Secret.SecretName)
					if s == nil {
						t.Errorf("%s %s volume %s: no Secret %q", w.Kind, w.Name, v.Name, v.Secret.SecretName)
						continue
					}
					for _, it := range v.Secret.Items {
						if _, ok := secretValue(s, it.Key); !ok {
							t.Errorf("%s %s volume %s: Secret %s has no key %q", w.Kind, w.Name, v.Name, s.Name, it.Key)
						}
					}
				}
			}
			for _, c := range spec.Containers {
				for _, e := range c.Env {
					vf := e.ValueFrom
					switch {
					case vf == nil:
					case vf.SecretKeyRef != nil && !isOptional(vf.SecretKeyRef.Optional):
						s := f.secret(vf.SecretKeyRef.Name)
						if s == nil {
							t.Errorf("%s/%s env %s: no Secret %q", w.Name, c.Name, e.Name, vf.SecretKeyRef.Name)
						} else if _, ok := secretValue(s, vf.SecretKeyRef.Key); !ok {
							t.Errorf("%s/%s env %s: Secret %s has no key %q", w.Name, c.Name, e.Name, s.Name, vf.SecretKeyRef.Key)
						}
					case vf.ConfigMapKeyRef != nil && !isOptional(vf.ConfigMapKeyRef.Optional):
						cm := f.configMap(vf.ConfigMapKeyRef.Name)
						if cm == nil {
							t.Errorf("%s/%s env %s: no ConfigMap %q", w.Name, c.Name, e.Name, vf.ConfigMapKeyRef.Name)
						} else if _, ok := cm.Data[vf.ConfigMapKeyRef.Key]; !ok {
							t.Errorf("%s/%s env %s: ConfigMap %s has no key %q", w.Name, c.Name, e.Name, cm.Name, vf.ConfigMapKeyRef.Key)
						}
					}
				}
				for _, from := range c.EnvFrom {
					if from.SecretRef != nil && !isOptional(from.SecretRef.Optional) && f.secret(from.SecretRef.Name) == nil {
						t.Errorf("%s/%s envFrom: no Secret %q", w.Name, c.Name, from.SecretRef.Name)
					}
					if from.ConfigMapRef != nil && !isOptional(from.ConfigMapRef.Optional) && f.configMap(from.ConfigMapRef.Name) == nil {
						t.Errorf("%s/%s envFrom: no ConfigMap %q", w.Name, c.Name, from.ConfigMapRef.Name)
					}
				}
				mounts := map[string]bool{}
				for _, m := range c.VolumeMounts {
					mounts[m.Name] = true
					found := false
					for _, v := range spec.Volumes {
						found = found || v.Name == m.Name
					}
					if sts := w.Kind == "StatefulSet"; !found && sts {
						for _, s := range f.StatefulSets {
							for _, vct := range s.Spec.VolumeClaimTemplates {
								found = found || (s.Name == w.Name && vct.Name == m.Name)
							}
						}
					}
					if !found {
						t.Errorf("%s/%s mounts volume %q, which the pod does not define", w.Name, c.Name, m.Name)
					}
				}
				_, problems := expandedArgs(f, w, &c)
				for _, p := range problems {
					t.Errorf("%s/%s: %s", w.Name, c.Name, p)
				}
			}
		}
	})
}

func isOptional(p *bool) bool { return p != nil && *p }

// rolterContainers yields every container that runs rolter, with its
// expanded args parsed.
func rolterContainers(f *fleet, yield func(w workload, c *corev1.Container, sub string, fa flagArgs)) {
	for _, w := range f.workloads() {
		for i := range w.Template.Spec.Containers {
			c := &w.Template.Spec.Containers[i]
			if !isRolter(c) {
				continue
			}
			args, _ := expandedArgs(f, w, c)
			fa := parseArgs(args[1:])
			yield(w, c, args[0], fa)
		}
	}
}

// listenFlags are the rolter flags that open a listening socket, with the
// protocols each one serves on its port.
var listenFlags = map[string][]corev1.Protocol{
	"http":         {corev1.ProtocolTCP},
	"admin":        {corev1.ProtocolTCP},
	"raft":         {corev1.ProtocolTCP},
	"metrics-addr": {corev1.ProtocolTCP},
	"gossip":       {corev1.ProtocolTCP, corev1.ProtocolUDP},
}

// TestContainerPortsMatchFlags: the ports a container declares are the
// ones its command line listens on, both ways (a Service or a
// NetworkPolicy built on a stale containerPort silently sends traffic
// nowhere).
func TestContainerPortsMatchFlags(t *testing.T) {
	forEachRender(t, func(t *testing.T, f *fleet) {
		n := 0
		rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
			n++
			declared := map[string]bool{}
			for flag, protos := range listenFlags {
				v, ok := fa.Flags[flag]
				if !ok {
					continue
				}
				port, err := listenPort(v)
				if err != nil {
					t.Errorf("%s/%s --%s=%s: %v", w.Name, c.Name, flag, v, err)
					continue
				}
				for _, proto := range protos {
					declared[string(proto)+"/"+strconv.Itoa(int(port))] = true
					if containerPort(c, strconv.Itoa(int(port)), proto) == nil {
						t.Errorf("%s/%s: --%s=%s listens on %d/%s but the container declares no such port", w.Name, c.Name, flag, v, port, proto)
					}
				}
			}
			for _, p := range c.Ports {
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				if !declared[string(proto)+"/"+strconv.Itoa(int(p.ContainerPort))] {
					t.Errorf("%s/%s: containerPort %s %d/%s matches no listening flag of `rolter %s`", w.Name, c.Name, p.Name, p.ContainerPort, proto, sub)
				}
			}
		})
		if n < 2 {
			t.Fatalf("found %d rolter containers, want a router and a sidecar", n)
		}
		for _, w := range f.workloads() {
			c := findContainer(w.Template, func(c *corev1.Container) bool { return strings.Contains(c.Image, "vllm") })
			if c == nil {
				continue
			}
			args, _ := expandedArgs(f, w, c)
			port := parseArgs(args).Flags["port"]
			if port == "" {
				port = "8000"
			}
			if containerPort(c, port, corev1.ProtocolTCP) == nil {
				t.Errorf("%s/%s: vLLM listens on --port %s but the container declares no such port", w.Name, c.Name, port)
			}
		}
	})
}

// TestOverlayPinsImagesAndNamespace: the example overlay is what people
// copy to production: every image has a fixed tag and every object lands
// in the overlay's namespace.
func TestOverlayPinsImagesAndNamespace(t *testing.T) {
	f, ok := renders[overlayDir]
	if !ok {
		f = render(t, overlayDir)
		renders[overlayDir] = f
	}
	if f.Namespace == "" {
		t.Fatal("the overlay creates no Namespace")
	}
	for _, w := range f.workloads() {
		for _, c := range w.Template.Spec.Containers {
			_, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":")
			if !ok || tag == "" || tag == "latest" {
				t.Errorf("%s/%s: image %q is not pinned to a version", w.Name, c.Name, c.Image)
			}
		}
	}
	var objs []struct{ kind, name, ns string }
	for _, o := range f.StatefulSets {
		objs = append(objs, struct{ kind, name, ns string }{"StatefulSet", o.Name, o.Namespace})
	}
	for _, o := range f.Deployments {
		objs = append(objs, struct{ kind, name, ns string }{"Deployment", o.Name, o.Namespace})
	}
	for _, o := range f.Services {
		objs = append(objs, struct{ kind, name, ns string }{"Service", o.Name, o.Namespace})
	}
	for _, o := range f.ConfigMaps {
		objs = append(objs, struct{ kind, name, ns string }{"ConfigMap", o.Name, o.Namespace})
	}
	for _, o := range f.NetworkPolicies {
		objs = append(objs, struct{ kind, name, ns string }{"NetworkPolicy", o.Name, o.Namespace})
	}
	for _, o := range f.PDBs {
		objs = append(objs, struct{ kind, name, ns string }{"PodDisruptionBudget", o.Name, o.Namespace})
	}
	for _, o := range f.ServiceMonitors {
		objs = append(objs, struct{ kind, name, ns string }{"ServiceMonitor", o.Name, o.Namespace})
	}
	for _, o := range objs {
		if o.ns != f.Namespace {
			t.Errorf("%s %s is in namespace %q, want %q", o.kind, o.name, o.ns, f.Namespace)
		}
	}
}
