package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rolter/rolter"

// confined names what only the packages under some roots may import
// (test files included): a library the architecture keeps behind one
// package, so the rest of the module sees rolter's own types.
var confined = []struct {
	imported string   // import path prefix
	under    []string // module-relative roots allowed to import it
	why      string
	// except names packages outside under that may import it anyway,
	// each with its reason (docs/architecture.md lists them).
	except map[string]string
}{
	{"github.com/hashicorp/raft", []string{"cluster"}, "Raft (and raft-boltdb) appear only under cluster: callers set typed options on cluster.StoreConfig", nil},
	{"github.com/hashicorp/memberlist", []string{"cluster"}, "memberlist appears only under cluster: callers set cluster/mesh's typed options",
		map[string]string{"e2e": "the hostile member of scenario 8 joins the pool as a bare memberlist node and writes the wire format by hand, so it can send what package mesh never would"}},
	{"github.com/pebbe/zmq4", []string{"internal/zmqsock"}, "ZMQ (cgo) appears only in internal/zmqsock, so everything else builds without cgo", nil},
	{module + "/cluster/raftstore", []string{"cluster"}, "the Raft wire format stays inside cluster: others use the Store's domain methods", nil},
}

// A limit is what one package's non-test files may import besides the
// standard library. With strict, every import counts (third-party
// libraries too); without, only the module's own packages are limited.
type limit struct {
	pkg    string // module-relative import path
	strict bool
	tests  bool     // the limit covers the package's test files too
	allow  []string // module-relative paths, or full third-party import path prefixes
}

var limits = []limit{
	{pkg: "adaptive", strict: true},
	{pkg: "kvblock", strict: true},
	{pkg: "strategies", strict: true, allow: []string{"kvblock", "adaptive"}},
	{pkg: "config", strict: true, allow: []string{"github.com/BurntSushi/toml", "adaptive"}},
	{pkg: "dashboard", strict: true},
	{pkg: "cluster", allow: []string{"config", "cluster/raftstore", "adaptive"}},
	{pkg: "cluster/mesh", allow: []string{"kvblock"}},
	{pkg: "adminapi", allow: []string{"cluster", "cluster/mesh", "config", "adaptive", "routestats"}},
	{pkg: "router", allow: []string{"strategies", "config", "kvblock", "adaptive", "routestats", "certs", "router/admission", "router/hangup"}},
	{pkg: "router/admission", strict: true},
	{pkg: "router/hangup", strict: true, allow: []string{"golang.org/x/sys/"}},
	{pkg: "router/meshstate", allow: []string{"strategies", "kvblock"}},
	{pkg: "sidecar", allow: []string{"cluster", "cluster/mesh", "kvblock", "scrape", "sidecar/kvevents", "internal/zmqsock", "certs", "internal/cli"}},
	{pkg: "sidecar/kvevents", allow: []string{"kvblock"}},
	{pkg: "sim", allow: []string{"sim/engine", "sim/kvevents", "sim/tokenizer", "strategies"}},
	{pkg: "sim/engine", allow: []string{"kvblock", "sim/kvevents"}},
	{pkg: "sim/kvevents", allow: []string{"kvblock", "internal/zmqsock"}},
	{pkg: "sim/fleet", allow: []string{"adaptive", "kvblock", "strategies", "sim/engine", "sim/kvevents", "sim/tokenizer", "sim/workload"}},
	// e2e is test files only: they drive built binaries over HTTP, may
	// write their rolter.toml (config's one writer), supervise them, wait,
	// issue test certificates and read the demo's port plan.
	{pkg: "e2e", tests: true, allow: []string{"config", "supervise", "internal/testwait", "certs/certstest", "demo", "localfleet"}},
}

// deviations are the imports the package table does not list but the
// architecture accepts, each with its reason (docs/architecture.md).
var deviations = []struct {
	pkg, imports, why string
}{
	{"cluster/mesh", "strategies", "the cluster view asserts it implements the strategies' external-state interfaces; strategies imports only the standard library, so there is no cycle"},
	{"config", "strategies", "validation checks a route's strategy name against the strategies registry (one list of names); strategies imports only leaf packages, so there is no cycle"},
	{"sim/fleet", "router/meshstate", "the fleet simulator runs the routers' own mesh-state code, so bench routing measures what rolter router does"},
	{"e2e", "sim/tokenizer", "a client that sends token ids tokenizes its prompt with the model's tokenizer; the simulated model's is sim/tokenizer"},
	{"e2e", "cluster/mesh", "scenario 6 measures a lossy pool in process (mesh.NewHarness: memberlist's real timings, dropped packets), and the hostile member of scenario 8 takes the wire format's constants from it; neither is reachable through the binary's flags"},
	{"sim/fleet", "router/admission", "the fleet simulator runs the routers' own admission queue and thresholds, so bench routing --burst measures what rolter router does"},
}

// pkgInfo is the part of `go list -json` the rules read.
type pkgInfo struct {
	ImportPath   string
	Dir          string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Standard     bool
}

func (p pkgInfo) rel() string { return rel(p.ImportPath) }

func rel(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

func under(path, root string) bool { return path == root || strings.HasPrefix(path, root+"/") }

// standard reports whether an import path is the standard library's
// (its first element has no dot).
func standard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// violations applies the rules to pkgs and returns one line per broken
// rule, sorted. e2eFiles maps each e2e non-test file to its imports.
func violations(pkgs []pkgInfo, e2eFiles map[string][]string, cmdTestImports []string) []string {
	var out []string
	for _, p := range pkgs {
		all := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		for _, c := range confined {
			if slices.ContainsFunc(c.under, func(root string) bool { return under(p.rel(), root) }) {
				continue
			}
			if _, ok := c.except[p.rel()]; ok {
				continue
			}
			for _, imp := range all {
				if strings.HasPrefix(imp, c.imported) {
					out = append(out, fmt.Sprintf("%s imports %s: %s", p.rel(), imp, c.why))
				}
			}
		}
	}
	byPkg := map[string]pkgInfo{}
	for _, p := range pkgs {
		byPkg[p.rel()] = p
	}
	for _, l := range limits {
		p, ok := byPkg[l.pkg]
		if !ok {
			out = append(out, fmt.Sprintf("%s: no such package; the import rules name it (renamed? update the rule)", l.pkg))
			continue
		}
		imps := p.Imports
		if l.tests {
			imps = slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		}
		for _, imp := range imps {
			if imp == p.ImportPath || standard(imp) || !l.strict && !ours(imp) || allowed(l, imp) {
				continue
			}
			out = append(out, fmt.Sprintf("%s imports %s: it may import only %s", l.pkg, rel(imp), mayList(l)))
		}
	}
	for file, imps := range e2eFiles {
		if slices.Contains(imps, "testing") {
			out = append(out, fmt.Sprintf("e2e/%s imports testing: the harness is a library of the processes it runs; testing belongs in _test.go files", file))
		}
	}
	if slices.Contains(cmdTestImports, module+"/e2e") {
		out = append(out, "cmd/rolter tests import e2e: the e2e harness tests the built binary from outside; cmd/rolter's tests drive its own code")
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func allowed(l limit, imp string) bool {
	for _, d := range deviations {
		if d.pkg == l.pkg && imp == module+"/"+d.imports {
			return true
		}
	}
	for _, a := range l.allow {
		if standard(a) { // module-relative: that package exactly
			if imp == module+"/"+a {
				return true
			}
		} else if strings.HasPrefix(imp, a) { // a third-party prefix
			return true
		}
	}
	return false
}

// mayList says what l allows, for a violation's message.
func mayList(l limit) string {
	what := "the standard library"
	if !l.strict {
		what += ", third-party libraries"
	}
	if len(l.allow) > 0 {
		what += " and " + strings.Join(l.allow, ", ")
	}
	return what
}

// goList runs `go list -json` over the module, with tags.
func goList(t *testing.T, root string, tags string) []pkgInfo {
	t.Helper()
	args := []string{"list", "-e", "-json=ImportPath,Dir,Imports,TestImports,XTestImports,Standard"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var out []pkgInfo
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// fileImports parses the imports of every non-test .go file in dir,
// whatever its build tags.
func fileImports(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		var imps []string
		for _, s := range ast.Imports {
			p, _ := strconv.Unquote(s.Path.Value)
			imps = append(imps, p)
		}
		out[filepath.Base(f)] = imps
	}
	return out
}

// TestImportRules fails on every import docs/architecture.md's rules
// forbid, in the default build and with the e2e and soak tags.
func TestImportRules(t *testing.T) {
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	merged := map[string]*pkgInfo{}
	var order []string
	for _, tags := range []string{"", "e2e,soak"} {
		for _, p := range goList(t, dir, tags) {
			m, ok := merged[p.ImportPath]
			if !ok {
				m = &pkgInfo{ImportPath: p.ImportPath, Dir: p.Dir}
				merged[p.ImportPath] = m
				order = append(order, p.ImportPath)
			}
			m.Imports = union(m.Imports, p.Imports)
			m.TestImports = union(m.TestImports, p.TestImports)
			m.XTestImports = union(m.XTestImports, p.XTestImports)
		}
	}
	pkgs := make([]pkgInfo, 0, len(order))
	var cmdTests []string
	for _, path := range order {
		p := *merged[path]
		pkgs = append(pkgs, p)
		if path == module+"/cmd/rolter" {
			cmdTests = slices.Concat(p.TestImports, p.XTestImports)
		}
	}
	for _, v := range violations(pkgs, fileImports(t, filepath.Join(dir, "e2e")), cmdTests) {
		t.Error(v)
	}
}

func union(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

// The rules themselves: a forbidden import is reported, an allowed one or
// a deviation is not, and a rule naming a missing package fails.
func TestViolationsReportsWhatTheRulesForbid(t *testing.T) {
	base := []pkgInfo{}
	for _, l := range limits {
		base = append(base, pkgInfo{ImportPath: module + "/" + l.pkg})
	}
	with := func(pkg string, edit func(*pkgInfo)) []pkgInfo {
		out := slices.Clone(base)
		for i := range out {
			if out[i].rel() == pkg {
				edit(&out[i])
				return out
			}
		}
		p := pkgInfo{ImportPath: module + "/" + pkg}
		edit(&p)
		return append(out, p)
	}
	for _, tc := range []struct {
		name     string
		pkgs     []pkgInfo
		e2e      map[string][]string
		cmdTests []string
		want     string // substring of the one violation; "" for none
	}{
		{name: "clean", pkgs: base},
		{name: "raft outside cluster", want: "cmd/rolter imports github.com/hashicorp/raft",
			pkgs: with("cmd/rolter", func(p *pkgInfo) { p.Imports = []string{"github.com/hashicorp/raft"} })},
		{name: "raft-boltdb in a test outside cluster", want: "e2e imports github.com/hashicorp/raft-boltdb/v2",
			pkgs: with("e2e", func(p *pkgInfo) { p.TestImports = []string{"github.com/hashicorp/raft-boltdb/v2"} })},
		{name: "raft inside cluster", pkgs: with("cluster", func(p *pkgInfo) { p.Imports = []string{"github.com/hashicorp/raft"} })},
		{name: "memberlist in cluster/mesh", pkgs: with("cluster/mesh", func(p *pkgInfo) { p.Imports = []string{"github.com/hashicorp/memberlist"} })},
		{name: "zmq in the sidecar", want: "sidecar imports github.com/pebbe/zmq4",
			pkgs: with("sidecar", func(p *pkgInfo) { p.Imports = []string{"github.com/pebbe/zmq4"} })},
		{name: "strategies importing a library", want: "strategies imports github.com/prometheus/client_golang/prometheus",
			pkgs: with("strategies", func(p *pkgInfo) { p.Imports = []string{"sort", "github.com/prometheus/client_golang/prometheus"} })},
		{name: "adminapi importing strategies", want: "adminapi imports strategies",
			pkgs: with("adminapi", func(p *pkgInfo) { p.Imports = []string{module + "/strategies", "github.com/gorilla/mux"} })},
		{name: "config's deviation", pkgs: with("config", func(p *pkgInfo) { p.Imports = []string{module + "/strategies", "github.com/BurntSushi/toml"} })},
		{name: "e2e reaching into router", want: "e2e imports router",
			pkgs: with("e2e", func(p *pkgInfo) { p.Imports = []string{module + "/router", module + "/config"} })},
		{name: "e2e file importing testing", pkgs: base, e2e: map[string][]string{"harness.go": {"testing"}}, want: "e2e/harness.go imports testing"},
		{name: "cmd/rolter tests importing e2e", pkgs: base, cmdTests: []string{module + "/e2e"}, want: "cmd/rolter tests import e2e"},
		{name: "a rule's package is gone", pkgs: base[1:], want: limits[0].pkg + ": no such package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(tc.pkgs, tc.e2e, tc.cmdTests)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Fatalf("violations %q, want one containing %q", got, tc.want)
			}
		})
	}
}
