package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/rolter/rolter/config"
)

// memCopy copies the kubernetes/ tree into an in-memory filesystem.
func memCopy(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir("kubernetes", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(path, b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// routerConfig returns the router StatefulSet and the rolter.toml its
// routers read (--config, through the mounted ConfigMap), parsed.
func routerConfig(t *testing.T, f *fleet) (*appsv1.StatefulSet, string, *config.Config) {
	t.Helper()
	var sts *appsv1.StatefulSet
	var cmName string
	var cfg *config.Config
	rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
		if sub != "router" {
			return
		}
		for i := range f.StatefulSets {
			if f.StatefulSets[i].Name == w.Name {
				sts = &f.StatefulSets[i]
			}
		}
		files, _ := mountedFiles(f, &w.Template.Spec, c)
		src := files[fa.Flags["config"]]
		name, key, _ := strings.Cut(strings.TrimPrefix(src, "ConfigMap "), " key ")
		cm := f.configMap(name)
		if cm == nil {
			t.Fatalf("%s: --config=%s does not come from a ConfigMap (%q)", w.Name, fa.Flags["config"], src)
		}
		env, _ := podEnv(f, w, c)
		var err error
		if cfg, err = config.Parse(key, []byte(cm.Data[key]), func(k string) string { return env[k] }); err != nil {
			t.Fatalf("ConfigMap %s: %v", name, err)
		}
		cmName = name
	})
	if sts == nil || cfg == nil {
		t.Fatal("no router StatefulSet reading --config from a ConfigMap")
	}
	return sts, cmName, cfg
}

// TestConfigMapChangeReachesTheRouters renders the example overlay, then
// renders it again after an operator's edit of rolter.toml (a raised
// generation and a new route), and checks the path from the edit to the
// routers: the edit gives the ConfigMap a new name, so the router pod
// template changes and the StatefulSet rolls its pods; every restarted
// router reads the new file, which the file-sync rule applies (its
// generation is newer) and an un-restarted router's older file cannot undo.
func TestConfigMapChangeReachesTheRouters(t *testing.T) {
	mem := memCopy(t)
	before := renderFS(t, mem, overlayDir)
	sts0, cm0, cfg0 := routerConfig(t, before)

	if sts0.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		t.Fatal("the router StatefulSet uses OnDelete: a new ConfigMap would never restart the routers")
	}
	for _, g := range before.ConfigMaps {
		if g.Name == cm0 && !strings.HasPrefix(cm0, "rolter-config-") {
			t.Fatalf("ConfigMap %q has no content-hash suffix: an edit would not roll the routers", cm0)
		}
	}

	path := filepath.Join(baseDir, configMapFileName)
	orig, err := mem.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(orig), "generation = 1\n", "generation = 2\n", 1)
	if next == string(orig) {
		t.Fatalf("%s has no `generation = 1` line", path)
	}
	next += "\n[[routes]]\nmodel = \"Qwen/Qwen2.5-7B-Instruct-canary\"\nstrategy = \"round_robin\"\ndiscover = true\n"
	if err := mem.WriteFile(path, []byte(next)); err != nil {
		t.Fatal(err)
	}
	after := renderFS(t, mem, overlayDir)
	sts1, cm1, cfg1 := routerConfig(t, after)

	if cm1 == cm0 {
		t.Fatalf("the edited rolter.toml keeps ConfigMap name %q: the routers would not restart", cm0)
	}
	if len(cfg1.Routes) != len(cfg0.Routes)+1 {
		t.Fatalf("the routers' --config does not carry the edit: %d routes, was %d", len(cfg1.Routes), len(cfg0.Routes))
	}
	volumeCM := func(s *appsv1.StatefulSet) string {
		for _, v := range s.Spec.Template.Spec.Volumes {
			if v.ConfigMap != nil && strings.HasPrefix(v.ConfigMap.Name, "rolter-config") {
				return v.ConfigMap.Name
			}
		}
		return ""
	}
	if volumeCM(sts0) == volumeCM(sts1) {
		t.Fatal("the router pod template is unchanged: kubectl apply would not roll the StatefulSet")
	}

	// The file-sync rule applies a file only over an older generation:
	// the routers see the raised one (a restarted router applies it; one
	// not yet restarted holds generation 1 and cannot undo it).
	if cfg1.Generation <= cfg0.Generation {
		t.Fatalf("the routers' rolter.toml moved from generation %d to %d: the file sync would refuse it",
			cfg0.Generation, cfg1.Generation)
	}
}
