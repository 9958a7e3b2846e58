package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// dockerfile is a Dockerfile as (instruction, arguments) pairs per stage,
// continuation lines joined.
type dockerStage struct {
	From  string
	Instr [][2]string
}

func readDockerfile(t *testing.T, path string) (args map[string]string, stages []dockerStage) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	args = map[string]string{}
	var logical strings.Builder
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if logical.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			logical.WriteString(cont + " ")
			continue
		}
		logical.WriteString(line)
		instr, rest, _ := strings.Cut(logical.String(), " ")
		logical.Reset()
		instr = strings.ToUpper(instr)
		rest = strings.Join(strings.Fields(rest), " ")
		switch {
		case instr == "FROM":
			stages = append(stages, dockerStage{From: rest})
		case instr == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case len(stages) > 0:
			s := &stages[len(stages)-1]
			s.Instr = append(s.Instr, [2]string{instr, rest})
		}
	}
	return args, stages
}

func (s dockerStage) all(instr string) []string {
	var out []string
	for _, i := range s.Instr {
		if i[0] == instr {
			out = append(out, i[1])
		}
	}
	return out
}

// TestDockerfile: the builder's Go matches go.mod and builds with cgo
// against libzmq; the runtime stage carries only libzmq5 and CA
// certificates, runs as the numeric non-root user the manifests expect,
// exposes every port the manifests declare, and its default command
// parses with the real binary.
func TestDockerfile(t *testing.T) {
	args, stages := readDockerfile(t, "docker/Dockerfile")
	if len(stages) != 2 {
		t.Fatalf("want a builder and a runtime stage, got %d stages", len(stages))
	}
	build, run := stages[0], stages[1]
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("no go directive in ../go.mod")
	}
	from := strings.ReplaceAll(build.From, "${GO_VERSION}", args["GO_VERSION"])
	if !strings.HasPrefix(from, "golang:"+string(m[1])+"-bookworm ") {
		t.Errorf("builder FROM %q, want golang:%s-bookworm (go.mod says go %s)", from, m[1], m[1])
	}
	buildRuns := strings.Join(build.all("RUN"), "\n")
	for _, want := range []string{"libzmq3-dev", "CGO_ENABLED=1", "./cmd/rolter"} {
		if !strings.Contains(buildRuns, want) {
			t.Errorf("builder RUN lacks %q", want)
		}
	}
	if run.From != "debian:bookworm-slim" {
		t.Errorf("runtime FROM %q, want debian:bookworm-slim (libzmq5 comes from bookworm)", run.From)
	}
	install := regexp.MustCompile(`apt-get install -y --no-install-recommends ([^&]+)`)
	for _, r := range run.all("RUN") {
		for _, im := range install.FindAllStringSubmatch(r, -1) {
			pkgs := strings.Fields(im[1])
			if strings.Join(pkgs, " ") != "libzmq5 ca-certificates" {
				t.Errorf("runtime installs %v, want only libzmq5 and ca-certificates", pkgs)
			}
		}
	}
	users := run.all("USER")
	if len(users) == 0 {
		t.Fatal("runtime stage has no USER: the image runs as root")
	}
	uid, err := strconv.Atoi(strings.Split(users[len(users)-1], ":")[0])
	if err != nil || uid == 0 {
		t.Fatalf("USER %q: want a numeric non-root uid (Kubernetes runAsNonRoot can only verify a number)", users[len(users)-1])
	}
	exposed := map[string]bool{}
	for _, e := range run.all("EXPOSE") {
		for p := range strings.FieldsSeq(e) {
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			exposed[strings.ToLower(p)] = true
		}
	}
	var entry, cmd []string
	if e := run.all("ENTRYPOINT"); len(e) > 0 {
		_ = json.Unmarshal([]byte(e[len(e)-1]), &entry)
	}
	if c := run.all("CMD"); len(c) > 0 {
		_ = json.Unmarshal([]byte(c[len(c)-1]), &cmd)
	}
	if len(entry) != 1 || entry[0] != "/usr/local/bin/rolter" {
		t.Errorf("ENTRYPOINT %v, want [\"/usr/local/bin/rolter\"]: the manifests pass only args", entry)
	}
	f, ok := renders[baseDir]
	if !ok {
		f = render(t, baseDir)
		renders[baseDir] = f
	}
	rolterContainers(f, func(w workload, c *corev1.Container, sub string, fa flagArgs) {
		for _, p := range c.Ports {
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			if key := strconv.Itoa(int(p.ContainerPort)) + "/" + proto; !exposed[key] {
				t.Errorf("%s/%s port %s is not EXPOSEd by the image", w.Name, c.Name, key)
			}
		}
		if sc := c.SecurityContext; sc != nil && sc.RunAsUser != nil && *sc.RunAsUser != int64(uid) {
			t.Errorf("%s/%s runAsUser %d, the image's USER is %d", w.Name, c.Name, *sc.RunAsUser, uid)
		}
		if psc := w.Template.Spec.SecurityContext; psc != nil && psc.RunAsUser != nil && *psc.RunAsUser != int64(uid) {
			t.Errorf("%s pod runAsUser %d, the image's USER is %d", w.Name, *psc.RunAsUser, uid)
		}
	})
	if len(cmd) == 0 {
		t.Fatal("no CMD")
	}
	unknown, err := flagCheck(rolterBinary(t), cmd[0], cmd[1:])
	if err != nil || len(unknown) > 0 {
		t.Errorf("CMD %v: unknown flags %v, %v", cmd, unknown, err)
	}
}
