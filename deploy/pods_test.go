package deploy

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Example values a pod's downward-API fields take when the test expands
// $(VAR) references.
const (
	examplePodIP     = "10.42.0.17"
	defaultNamespace = "default"
)

// flagArgs is a parsed command line: positional arguments and --flags in
// either --name=value or --name value form (a --name followed by another
// flag, or last, is a boolean).
type flagArgs struct {
	Positional []string
	Flags      map[string]string
}

func parseArgs(args []string) flagArgs {
	fa := flagArgs{Flags: map[string]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			fa.Positional = append(fa.Positional, a)
			continue
		}
		name := strings.TrimLeft(a, "-")
		if k, v, ok := strings.Cut(name, "="); ok {
			fa.Flags[k] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			fa.Flags[name] = args[i+1]
			i++
			continue
		}
		fa.Flags[name] = "true"
	}
	return fa
}

// isRolter reports whether c runs the rolter binary (the image's entrypoint
// with a subcommand as the first argument).
func isRolter(c *corev1.Container) bool {
	return strings.Contains(c.Image, "rolter/rolter") && len(c.Command) == 0 && len(c.Args) > 0
}

func findContainer(pod *corev1.PodTemplateSpec, pred func(*corev1.Container) bool) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pred(&pod.Spec.Containers[i]) {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand applies Kubernetes' $(VAR) substitution with env; it returns the
// names that env does not define (Kubernetes would leave them verbatim).
func expand(s string, env map[string]string) (string, []string) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		name := varRef.FindStringSubmatch(m)[1]
		v, ok := env[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	return out, missing
}

// podEnv resolves a container's environment the way the kubelet would for
// one example pod of w: downward-API fields get example values, Secret and
// ConfigMap references their values in f, later entries may use earlier
// ones. Problems (unknown field paths, undefined references) are returned.
func podEnv(f *fleet, w workload, c *corev1.Container) (map[string]string, []string) {
	env := map[string]string{}
	var problems []string
	podName := w.Name + "-0"
	if w.Kind == "Deployment" {
		podName = w.Name + "-5d8f7c9b6-x2x4q"
	}
	ns := f.Namespace
	if ns == "" {
		ns = defaultNamespace
	}
	for _, from := range c.EnvFrom {
		switch {
		case from.SecretRef != nil:
			if s := f.secret(from.SecretRef.Name); s != nil {
				for _, k := range secretKeys(s) {
					env[from.Prefix+k], _ = secretValue(s, k)
				}
			}
		case from.ConfigMapRef != nil:
			if cm := f.configMap(from.ConfigMapRef.Name); cm != nil {
				for k, v := range cm.Data {
					env[from.Prefix+k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			v, missing := expand(e.Value, env)
			for _, m := range missing {
				problems = append(problems, fmt.Sprintf("env %s uses $(%s), which is not defined before it", e.Name, m))
			}
			env[e.Name] = v
			continue
		}
		vf := e.ValueFrom
		switch {
		case vf.FieldRef != nil:
			switch vf.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			case "metadata.namespace":
				env[e.Name] = ns
			case "status.podIP":
				env[e.Name] = examplePodIP
			default:
				problems = append(problems, fmt.Sprintf("env %s: field %s has no example value in this test", e.Name, vf.FieldRef.FieldPath))
			}
		case vf.SecretKeyRef != nil:
			if s := f.secret(vf.SecretKeyRef.Name); s != nil {
				env[e.Name], _ = secretValue(s, vf.SecretKeyRef.Key)
			}
		case vf.ConfigMapKeyRef != nil:
			if cm := f.configMap(vf.ConfigMapKeyRef.Name); cm != nil {
				env[e.Name] = cm.Data[vf.ConfigMapKeyRef.Key]
			}
		case vf.ResourceFieldRef != nil:
			env[e.Name] = "1"
		}
	}
	return env, problems
}

// expandedArgs returns c's args after $(VAR) substitution, and the
// references that no env entry defines.
func expandedArgs(f *fleet, w workload, c *corev1.Container) ([]string, []string) {
	env, problems := podEnv(f, w, c)
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		v, missing := expand(a, env)
		for _, m := range missing {
			problems = append(problems, fmt.Sprintf("argument %q uses $(%s), which the container's env does not define", a, m))
		}
		out[i] = v
	}
	return out, problems
}

// selects reports whether sel matches the labels ls.
func selects(sel *metav1.LabelSelector, ls map[string]string) (bool, error) {
	if sel == nil {
		return false, nil
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set(ls)), nil
}

// mapSelects is a Service-style selector (a plain map; empty selects
// nothing here, since rolter never means "every pod").
func mapSelects(sel map[string]string, ls map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	return labels.SelectorFromSet(sel).Matches(labels.Set(ls))
}

// listenPort parses a listening address flag ("0.0.0.0:4000").
func listenPort(v string) (int32, error) {
	_, p, err := net.SplitHostPort(v)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("bad port in %q", v)
	}
	return int32(n), nil
}

// containerPort finds a port of c by number (and protocol) or by name.
func containerPort(c *corev1.Container, port string, proto corev1.Protocol) *corev1.ContainerPort {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for i := range c.Ports {
		p := &c.Ports[i]
		pp := p.Protocol
		if pp == "" {
			pp = corev1.ProtocolTCP
		}
		if pp != proto {
			continue
		}
		if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
			return p
		}
	}
	return nil
}

// podPort finds a port by number or name in any container of the pod.
func podPort(pod *corev1.PodSpec, port string, proto corev1.Protocol) *corev1.ContainerPort {
	for i := range pod.Containers {
		if p := containerPort(&pod.Containers[i], port, proto); p != nil {
			return p
		}
	}
	return nil
}

// certManagerCSI is the CSI driver of cert-manager's per-pod certificates.
const certManagerCSI = "csi.cert-manager.io"

// mountedFiles maps every file path a container sees from ConfigMap,
// Secret and cert-manager csi volumes to a description of where it comes from; missing lists
// references to keys or objects that do not exist.
func mountedFiles(f *fleet, pod *corev1.PodSpec, c *corev1.Container) (files map[string]string, missing []string) {
	files = map[string]string{}
	vols := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		vols[pod.Volumes[i].Name] = &pod.Volumes[i]
	}
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		if v == nil {
			continue
		}
		var keys []string
		var items []corev1.KeyToPath
		var what string
		switch {
		case v.ConfigMap != nil:
			what = "ConfigMap " + v.ConfigMap.Name
			if cm := f.configMap(v.ConfigMap.Name); cm != nil {
				for k := range cm.Data {
					keys = append(keys, k)
				}
			}
			items = v.ConfigMap.Items
		case v.Secret != nil:
			what = "Secret " + v.Secret.SecretName
			if s := f.secret(v.Secret.SecretName); s != nil {
				keys = secretKeys(s)
			}
			items = v.Secret.Items
		case v.CSI != nil && v.CSI.Driver == certManagerCSI:
			// cert-manager's csi-driver writes the pod's own certificate,
			// key and CA under these names unless told otherwise.
			what = "cert-manager csi volume " + v.Name
			for attr, def := range map[string]string{"certificate-file": "tls.crt", "privatekey-file": "tls.key", "ca-file": "ca.crt"} {
				if name := v.CSI.VolumeAttributes["csi.cert-manager.io/"+attr]; name != "" {
					def = name
				}
				keys = append(keys, def)
			}
		default:
			continue
		}
		paths := map[string]string{}
		if len(items) == 0 {
			for _, k := range keys {
				paths[k] = k
			}
		}
		for _, it := range items {
			if !slices.Contains(keys, it.Key) {
				missing = append(missing, fmt.Sprintf("volume %s: %s has no key %q", v.Name, what, it.Key))
				continue
			}
			paths[it.Path] = it.Key
		}
		for p, k := range paths {
			switch {
			case m.SubPath == "":
				files[strings.TrimSuffix(m.MountPath, "/")+"/"+p] = what + " key " + k
			case m.SubPath == p:
				files[m.MountPath] = what + " key " + k
			}
		}
	}
	return files, missing
}
