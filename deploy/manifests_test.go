package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	baseDir           = "kubernetes/base"
	overlayDir        = "kubernetes/overlays/example"
	tlsOverlayDir     = "kubernetes/overlays/tls"
	secretsExample    = "kubernetes/base/secrets.example.yaml"
	configMapFileName = "rolter.toml"
)

// ServiceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor the
// manifests use. Decoding is strict, so a field outside this subset (or a
// typo) is an error.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			TLSConfig     *struct {
				ServerName string `json:"serverName,omitempty"`
				CA         struct {
					Secret *corev1.SecretKeySelector `json:"secret,omitempty"`
				} `json:"ca"`
			} `json:"tlsConfig,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// Issuer is the part of cert-manager.io/v1 Issuer the TLS overlay uses: a
// CA issuer over a Secret.
type Issuer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		CA struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

// Certificate is the part of cert-manager.io/v1 Certificate the TLS
// overlay uses. cert-manager writes spec.secretName with the keys tls.crt,
// tls.key and ca.crt.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		SecretName string `json:"secretName"`
		IssuerRef  struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		} `json:"issuerRef"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages   []string `json:"usages,omitempty"`
		DNSNames []string `json:"dnsNames,omitempty"`
	} `json:"spec"`
}

// issuedKeys are the keys of a Secret cert-manager writes for a
// Certificate (a CA issuer).
var issuedKeys = []string{"tls.crt", "tls.key", "ca.crt"}

// workload is a pod template with its owner, the unit most checks run on.
type workload struct {
	Kind, Name string
	Replicas   int32
	Selector   *metav1.LabelSelector
	Template   *corev1.PodTemplateSpec
	// ServiceName is a StatefulSet's governing Service.
	ServiceName string
}

// fleet is one rendered kustomization, every object decoded strictly.
type fleet struct {
	Namespace       string
	Namespaces      []corev1.Namespace
	StatefulSets    []appsv1.StatefulSet
	Deployments     []appsv1.Deployment
	Services        []corev1.Service
	ConfigMaps      []corev1.ConfigMap
	Secrets         []corev1.Secret
	ServiceAccounts []corev1.ServiceAccount
	PDBs            []policyv1.PodDisruptionBudget
	NetworkPolicies []networkingv1.NetworkPolicy
	ServiceMonitors []ServiceMonitor
	Issuers         []Issuer
	Certificates    []Certificate
}

func (f *fleet) workloads() []workload {
	var out []workload
	for i := range f.StatefulSets {
		s := &f.StatefulSets[i]
		out = append(out, workload{"StatefulSet", s.Name, replicas(s.Spec.Replicas), s.Spec.Selector, &s.Spec.Template, s.Spec.ServiceName})
	}
	for i := range f.Deployments {
		d := &f.Deployments[i]
		out = append(out, workload{Kind: "Deployment", Name: d.Name, Replicas: replicas(d.Spec.Replicas), Selector: d.Spec.Selector, Template: &d.Spec.Template})
	}
	return out
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

func (f *fleet) secret(name string) *corev1.Secret {
	for i := range f.Secrets {
		if f.Secrets[i].Name == name {
			return &f.Secrets[i]
		}
	}
	return nil
}

func (f *fleet) configMap(name string) *corev1.ConfigMap {
	for i := range f.ConfigMaps {
		if f.ConfigMaps[i].Name == name {
			return &f.ConfigMaps[i]
		}
	}
	return nil
}

// secretKeys lists a Secret's keys from data and stringData.
func secretKeys(s *corev1.Secret) []string {
	var keys []string
	for k := range s.Data {
		keys = append(keys, k)
	}
	for k := range s.StringData {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func secretValue(s *corev1.Secret, key string) (string, bool) {
	if v, ok := s.StringData[key]; ok {
		return v, true
	}
	v, ok := s.Data[key]
	return string(v), ok
}

var errUnknownKind = errors.New("unknown apiVersion/kind")

// decodeInto decodes one YAML document strictly into the API type its
// apiVersion and kind name and appends it to f.
func (f *fleet) decodeInto(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(v any) error { return yaml.UnmarshalStrict(doc, v) }
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		return add(&f.Namespaces, strict)
	case "apps/v1 StatefulSet":
		return add(&f.StatefulSets, strict)
	case "apps/v1 Deployment":
		return add(&f.Deployments, strict)
	case "v1 Service":
		return add(&f.Services, strict)
	case "v1 ConfigMap":
		return add(&f.ConfigMaps, strict)
	case "v1 Secret":
		return add(&f.Secrets, strict)
	case "v1 ServiceAccount":
		return add(&f.ServiceAccounts, strict)
	case "policy/v1 PodDisruptionBudget":
		return add(&f.PDBs, strict)
	case "networking.k8s.io/v1 NetworkPolicy":
		return add(&f.NetworkPolicies, strict)
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return add(&f.ServiceMonitors, strict)
	case "cert-manager.io/v1 Issuer":
		return add(&f.Issuers, strict)
	case "cert-manager.io/v1 Certificate":
		return add(&f.Certificates, strict)
	}
	return fmt.Errorf("%w: %q %q", errUnknownKind, tm.APIVersion, tm.Kind)
}

func add[T any](list *[]T, decode func(any) error) error {
	var v T
	if err := decode(&v); err != nil {
		return err
	}
	*list = append(*list, v)
	return nil
}

// splitDocs splits a multi-document YAML stream, dropping empty documents.
func splitDocs(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			b.Write(line)
		}
	}
	return b.Bytes()
}

// render builds the kustomization at dir with kustomize's own library
// (what `kubectl apply -k` runs), decodes the result strictly, and adds the
// example Secrets, which the base deliberately leaves out.
func render(t *testing.T, dir string) *fleet {
	t.Helper()
	return renderFS(t, filesys.MakeFsOnDisk(), dir)
}

// renderFS is render over fs (an in-memory copy lets a test edit a file
// first).
func renderFS(t *testing.T, fs filesys.FileSystem, dir string) *fleet {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	f := &fleet{}
	docs, err := splitDocs(out)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	for _, doc := range docs {
		if err := f.decodeInto(doc); err != nil {
			t.Fatalf("kustomize build %s: strict decode: %v\n%s", dir, err, doc)
		}
	}
	if len(f.Namespaces) == 1 {
		f.Namespace = f.Namespaces[0].Name
	}
	examples := &fleet{}
	data, err := os.ReadFile(secretsExample)
	if err != nil {
		t.Fatal(err)
	}
	docs, err = splitDocs(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range docs {
		if err := examples.decodeInto(doc); err != nil {
			t.Fatalf("%s: %v", secretsExample, err)
		}
	}
	if len(examples.Secrets) == 0 || len(examples.Secrets) != len(docs) {
		t.Fatalf("%s: want only Secrets, got %d Secrets in %d documents", secretsExample, len(examples.Secrets), len(docs))
	}
	for _, s := range examples.Secrets {
		if f.secret(s.Name) != nil {
			t.Fatalf("%s renders Secret %s: real credentials would be overwritten by `kubectl apply -k`", dir, s.Name)
		}
		f.Secrets = append(f.Secrets, s)
	}
	// The Secrets cert-manager will write, as it writes them.
	for _, c := range f.Certificates {
		if f.secret(c.Spec.SecretName) != nil {
			t.Fatalf("%s: Certificate %s writes Secret %s, which also exists otherwise", dir, c.Name, c.Spec.SecretName)
		}
		s := corev1.Secret{Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
		s.Name, s.Namespace = c.Spec.SecretName, c.Namespace
		for _, k := range issuedKeys {
			s.Data[k] = []byte("issued by cert-manager")
		}
		f.Secrets = append(f.Secrets, s)
	}
	return f
}

// renders returns the base and the example overlay, rendered once per
// test binary.
var renders = map[string]*fleet{}

func forEachRender(t *testing.T, check func(t *testing.T, f *fleet)) {
	t.Helper()
	for _, dir := range []string{baseDir, overlayDir, tlsOverlayDir} {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			f, ok := renders[dir]
			if !ok {
				f = render(t, dir)
				renders[dir] = f
			}
			check(t, f)
		})
	}
}

// TestManifestFilesDecodeStrictly decodes every YAML file under kubernetes/
// on its own (patches and the example Secrets included), so that a typo in
// a field name fails here even where kustomize would carry it through.
func TestManifestFilesDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("kubernetes/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob("kubernetes/overlays/*/*.yaml")
	files = append(files, more...)
	if len(files) < 8 {
		t.Fatalf("found only %d manifest files: %v", len(files), files)
	}
	jsonPatches := jsonPatchFiles(t)
	for _, path := range files {
		if filepath.Base(path) == "kustomization.yaml" {
			continue
		}
		if jsonPatches[path] {
			t.Run(path, func(t *testing.T) { checkJSONPatch(t, path) })
			continue
		}
		t.Run(path, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			docs, err := splitDocs(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(docs) == 0 {
				t.Fatal("no objects")
			}
			f := &fleet{}
			for i, doc := range docs {
				if err := f.decodeInto(doc); err != nil {
					t.Errorf("document %d: %v", i, err)
				}
			}
		})
	}
}

// Kustomization is the subset of kustomize.config.k8s.io/v1beta1 the
// deploy files use, decoded strictly.
type Kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors"`
	} `json:"labels,omitempty"`
	Resources          []string `json:"resources,omitempty"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator,omitempty"`
	Images []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images,omitempty"`
	Replicas []struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	} `json:"replicas,omitempty"`
	Patches []struct {
		Path string `json:"path"`
		// Target makes the patch a JSON 6902 patch of the objects it
		// selects (otherwise a strategic merge patch naming its object).
		Target *struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
}

// kustomizationDirs are the directories holding a kustomization.yaml.
var kustomizationDirs = []string{baseDir, overlayDir, tlsOverlayDir}

// jsonPatchFiles lists the files the kustomizations use as JSON 6902
// patches (lists of operations, not objects).
func jsonPatchFiles(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, dir := range kustomizationDirs {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k Kustomization
		if err := yaml.UnmarshalStrict(data, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		for _, p := range k.Patches {
			if p.Target != nil {
				out[filepath.Join(dir, p.Path)] = true
			}
		}
	}
	return out
}

// checkJSONPatch decodes a JSON 6902 patch strictly: operations kustomize
// knows, each with a path.
func checkJSONPatch(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value,omitempty"`
		From  string `json:"from,omitempty"`
	}
	if err := yaml.UnmarshalStrict(data, &ops); err != nil {
		t.Fatalf("not a JSON patch: %v", err)
	}
	if len(ops) == 0 {
		t.Fatal("no operations")
	}
	for i, op := range ops {
		if !slices.Contains([]string{"add", "remove", "replace", "move", "copy", "test"}, op.Op) || !strings.HasPrefix(op.Path, "/") {
			t.Errorf("operation %d: %q on %q", i, op.Op, op.Path)
		}
	}
}

// TestKustomizationsListEveryFile catches a manifest written but never
// applied: every YAML file beside a kustomization.yaml is a resource, a
// patch or a generator input of it (the example Secrets excepted, on
// purpose), and everything listed exists.
func TestKustomizationsListEveryFile(t *testing.T) {
	for _, dir := range kustomizationDirs {
		t.Run(dir, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k Kustomization
			if err := yaml.UnmarshalStrict(data, &k); err != nil {
				t.Fatalf("kustomization.yaml: %v", err)
			}
			listed := map[string]bool{}
			if dir == baseDir {
				listed[filepath.Base(secretsExample)] = true
			}
			for _, r := range k.Resources {
				listed[r] = true
			}
			for _, p := range k.Patches {
				listed[p.Path] = true
			}
			for _, g := range k.ConfigMapGenerator {
				for _, f := range g.Files {
					listed[f] = true
				}
			}
			for name := range listed {
				if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
					t.Errorf("kustomization.yaml lists %s: %v", name, err)
				}
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				n := e.Name()
				if n == "kustomization.yaml" || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".toml")) {
					continue
				}
				if !listed[n] {
					t.Errorf("%s is in %s but not in its kustomization.yaml", n, dir)
				}
			}
		})
	}
}
