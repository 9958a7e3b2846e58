package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// binary builds ../cmd/rolter once per test run, from the main module,
// into a directory TestMain removes.
var binary struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rolter-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary.dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func rolterBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		path := filepath.Join(binary.dir, "rolter")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", path, "./cmd/rolter")
		cmd.Dir = ".."
		out, err := cmd.CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build ./cmd/rolter: %v\n%s", err, out)
			return
		}
		binary.path = path
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

var (
	undefinedFlag = regexp.MustCompile(`flag provided but not defined: -+([^\s]+)`)
	errNoCommand  = errors.New("the rolter binary has no such subcommand")
)

// flagCheck runs `rolter sub args... -h`. Go's flag package parses every
// argument before it reaches -h, and rolter exits 0 on -h only when all of
// them are known flags with valid values. An unknown flag is recorded and
// dropped and the line tried again, so one run names every missing flag.
func flagCheck(bin, sub string, args []string) (unknown []string, err error) {
	args = slices.Clone(args)
	for range len(args) + 1 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, bin, append(append([]string{sub}, args...), "-h")...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		runErr := cmd.Run()
		cancel()
		if runErr == nil {
			return unknown, nil
		}
		msg := stderr.String()
		if strings.Contains(msg, "unknown command") {
			return nil, fmt.Errorf("%w %q", errNoCommand, sub)
		}
		m := undefinedFlag.FindStringSubmatch(msg)
		if m == nil {
			return unknown, fmt.Errorf("rolter %s rejects its command line (%v): %s", sub, runErr, lastLines(msg, 3))
		}
		name := m[1]
		unknown = append(unknown, name)
		args = dropFlag(args, name)
	}
	return unknown, errors.New("flag check did not converge")
}

// dropFlag removes --name[=value] (and a separate value) from args.
func dropFlag(args []string, name string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
				i++
			}
			continue
		}
		if strings.HasPrefix(a, name+"=") {
			continue
		}
		out = append(out, args[i])
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

// commandLine is one rolter invocation found in the deploy files.
type commandLine struct {
	where string
	sub   string
	args  []string
}

func kubernetesCommandLines(t *testing.T) []commandLine {
	var out []commandLine
	for _, dir := range []string{baseDir, overlayDir} {
		f, ok := renders[dir]
		if !ok {
			f = render(t, dir)
			renders[dir] = f
		}
		for _, w := range f.workloads() {
			for i := range w.Template.Spec.Containers {
				c := &w.Template.Spec.Containers[i]
				if !isRolter(c) {
					continue
				}
				args, problems := expandedArgs(f, w, c)
				if len(problems) > 0 {
					t.Errorf("%s/%s: %v", w.Name, c.Name, problems)
				}
				out = append(out, commandLine{fmt.Sprintf("%s %s %s/%s", dir, w.Kind, w.Name, c.Name), args[0], args[1:]})
			}
		}
	}
	return out
}

// TestRolterArgsParse runs every rolter command line in the manifests and
// systemd units through the real binary's flag set of its subcommand.
func TestRolterArgsParse(t *testing.T) {
	lines := kubernetesCommandLines(t)
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) == 0 {
		t.Fatalf("no systemd units: %v", err)
	}
	for _, path := range units {
		u := readUnit(t, path)
		args, problems := u.execStart(t)
		for _, p := range problems {
			t.Errorf("%s: %s", path, p)
		}
		if len(args) < 2 || filepath.Base(args[0]) != "rolter" {
			t.Errorf("%s: ExecStart does not run rolter: %v", path, args)
			continue
		}
		lines = append(lines, commandLine{path, args[1], args[2:]})
	}
	subs := map[string]bool{}
	for _, l := range lines {
		subs[l.sub] = true
	}
	if !subs["router"] || !subs["sidecar"] {
		t.Fatalf("want router and sidecar command lines, found %v", keysOf(subs))
	}
	bin := rolterBinary(t)
	missing := map[string]map[string]bool{}
	for _, l := range lines {
		t.Run(strings.NewReplacer("/", "_", " ", "_").Replace(l.where), func(t *testing.T) {
			unknown, err := flagCheck(bin, l.sub, l.args)
			if err != nil {
				t.Fatalf("%s: %v", l.where, err)
			}
			if len(unknown) > 0 {
				if missing[l.sub] == nil {
					missing[l.sub] = map[string]bool{}
				}
				for _, u := range unknown {
					missing[l.sub][u] = true
				}
				t.Errorf("`rolter %s` does not define flag(s) %s, used by %s", l.sub, "--"+strings.Join(unknown, ", --"), l.where)
			}
		})
	}
	for sub, flags := range missing {
		t.Logf("MISSING in `rolter %s`: --%s", sub, strings.Join(keysOf(flags), ", --"))
	}
}

// unit is a parsed systemd unit file: each key's values in order.
type unit struct {
	path string
	keys map[string][]string
}

func readUnit(t *testing.T, path string) unit {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{path: path, keys: map[string][]string{}}
	var logical strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if logical.Len() == 0 && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "[")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			logical.WriteString(cont + " ")
			continue
		}
		logical.WriteString(line)
		k, v, ok := strings.Cut(logical.String(), "=")
		if !ok {
			t.Fatalf("%s: not key=value: %q", path, logical.String())
		}
		u.keys[strings.TrimSpace(k)] = append(u.keys[strings.TrimSpace(k)], strings.TrimSpace(v))
		logical.Reset()
	}
	return u
}

func (u unit) one(key string) string {
	if v := u.keys[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

var unitVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// execStart splits ExecStart into words and expands ${VAR} from the
// example EnvironmentFile beside the unit and %d (the credentials
// directory). A variable the example does not define would expand to "",
// which a string flag accepts silently, so it is a problem.
func (u unit) execStart(t *testing.T) ([]string, []string) {
	t.Helper()
	env := map[string]string{}
	var problems []string
	if ef := u.one("EnvironmentFile"); ef != "" {
		example := filepath.Join(filepath.Dir(u.path), strings.TrimSuffix(filepath.Base(ef), ".env")+".env.example")
		data, err := os.ReadFile(example)
		if err != nil {
			problems = append(problems, fmt.Sprintf("EnvironmentFile=%s has no example beside the unit: %v", ef, err))
		}
		for line := range strings.Lines(string(data)) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: not KEY=value: %q", example, line))
				continue
			}
			env[k] = v
		}
	}
	creds := map[string]bool{}
	for _, c := range u.keys["LoadCredential"] {
		name, _, _ := strings.Cut(c, ":")
		creds[name] = true
	}
	var args []string
	for _, word := range strings.Fields(u.one("ExecStart")) {
		word = unitVar.ReplaceAllStringFunc(word, func(m string) string {
			name := unitVar.FindStringSubmatch(m)[1]
			v, ok := env[name]
			if !ok {
				problems = append(problems, fmt.Sprintf("ExecStart uses ${%s}, which the example environment file does not set", name))
			}
			return v
		})
		if strings.Contains(word, "%d/") {
			_, cred, _ := strings.Cut(word, "%d/")
			if !creds[cred] {
				problems = append(problems, fmt.Sprintf("ExecStart reads credential %q, which no LoadCredential= provides", cred))
			}
			word = strings.ReplaceAll(word, "%d", "/run/credentials/"+filepath.Base(u.path))
		}
		args = append(args, word)
	}
	return args, problems
}

// TestSystemdUnitsAreHardened: the units run unprivileged in a read-only
// system, and the router's Raft data lives in its StateDirectory.
func TestSystemdUnitsAreHardened(t *testing.T) {
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) != 2 {
		t.Fatalf("want rolter-router.service and rolter-sidecar.service, found %v", units)
	}
	want := map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "RestrictSUIDSGID": "yes", "CapabilityBoundingSet": "",
	}
	for _, path := range units {
		t.Run(filepath.Base(path), func(t *testing.T) {
			u := readUnit(t, path)
			for k, v := range want {
				if got, ok := u.keys[k]; !ok || u.one(k) != v {
					t.Errorf("%s=%q, want %q", k, got, v)
				}
			}
			if u.one("DynamicUser") != "yes" && u.one("User") == "" {
				t.Error("runs as root: set DynamicUser=yes or User=")
			}
			args, _ := u.execStart(t)
			fa := parseArgs(args)
			if dir, ok := fa.Flags["data-dir"]; ok {
				if sd := u.one("StateDirectory"); sd == "" || dir != "/var/lib/"+sd {
					t.Errorf("--data-dir=%s is not the StateDirectory (/var/lib/%s): ProtectSystem=strict makes it read-only", dir, sd)
				}
			}
		})
	}
}
