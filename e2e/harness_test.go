package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rolter/rolter/internal/testwait"
	"github.com/rolter/rolter/supervise"
)

// Binary is how to run `rolter`: the executable and the arguments and
// environment put before a subcommand's (a test binary re-executing itself
// as rolter needs both).
type Binary struct {
	Path string
	Args []string
	Env  []string
}

// BuildRolter builds ./cmd/rolter of the enclosing module into a temporary
// directory, once per call, without cgo (so without the sidecar's ZMQ
// subscriber).
func BuildRolter(t testing.TB) Binary {
	t.Helper()
	return buildRolter(t, false)
}

// BuildRolterCgo is BuildRolter with cgo, for tests that run sidecars
// following real KV-event streams.
func BuildRolterCgo(t testing.TB) Binary {
	t.Helper()
	return buildRolter(t, true)
}

// SimModel is the model `rolter sim` serves by default.
const SimModel = "meta-llama/Llama-3.1-8B-Instruct"

// SharedRolter is BuildRolter (cgo: BuildRolterCgo) built once per test
// binary: the untagged multi-process tests share it. TestMain removes it.
func SharedRolter(t testing.TB, cgo bool) Binary {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if p, ok := shared.bins[cgo]; ok {
		return Binary{Path: p}
	}
	if shared.dir == "" {
		dir, err := os.MkdirTemp("", "rolter-e2e-")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir = dir
	}
	name := "rolter"
	if cgo {
		name = "rolter-cgo"
	}
	p := filepath.Join(shared.dir, name)
	if err := goBuild(p, cgo); err != nil {
		t.Fatal(err)
	}
	shared.bins[cgo] = p
	return Binary{Path: p}
}

var shared = struct {
	sync.Mutex
	dir  string
	bins map[bool]string
}{bins: map[bool]string{}}

func buildRolter(t testing.TB, cgo bool) Binary {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rolter")
	if err := goBuild(bin, cgo); err != nil {
		t.Fatal(err)
	}
	return Binary{Path: bin}
}

// goBuild builds ./cmd/rolter of the enclosing module into bin.
func goBuild(bin string, cgo bool) error {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rolter")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/rolter: %v\n%s", err, b)
	}
	return nil
}

// FreeAddrs returns n distinct loopback host:port addresses that were free
// on TCP and on UDP (gossip listens on both) a moment ago. They are drawn
// below Linux's ephemeral range (32768 up): a port released there can be
// taken at once as the source port of any outgoing connection on the
// machine, or by a client connecting to it before its server listens (a
// TCP self-connect), and the process it was picked for then fails to bind.
// They stay below the demo test's ranges too (freeDemoBase, 12000 up) and
// above `rolter demo`'s default ports (4000 up).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var held []io.Closer
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	out := make([]string, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries == 10000 {
			t.Fatalf("no free loopback port in [%d, %d)", freePortMin, freePortMax)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", nextFreePort())
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			ln.Close()
			continue
		}
		held = append(held, ln, pc) // held until all are chosen: distinct
		out = append(out, addr)
	}
	return out
}

// FreeAddrs draws from [freePortMin, freePortMax).
const freePortMin, freePortMax = 5000, 12000

// freePorts is FreeAddrs' cursor: it walks the range from a start derived
// from the pid (so concurrent test processes start apart), never handing
// out a port twice before it has gone round, for a port picked a moment
// ago is free again until its process binds it.
var freePorts struct {
	sync.Mutex
	next int
}

func nextFreePort() int {
	freePorts.Lock()
	defer freePorts.Unlock()
	if freePorts.next == 0 {
		freePorts.next = freePortMin + os.Getpid()*499%(freePortMax-freePortMin)
	}
	p := freePorts.next
	if freePorts.next++; freePorts.next == freePortMax {
		freePorts.next = freePortMin
	}
	return p
}

// Proc is a child process whose output goes to a log file (package
// supervise's: Kill, Signal, Exited, Done, Tail).
type Proc = supervise.Proc

// Start runs bin with args, in the test's process group (an interrupted
// test run takes it along); t.Cleanup kills it (SIGKILL) and waits.
func Start(t testing.TB, bin Binary, name, logDir string, args ...string) *Proc {
	t.Helper()
	p, err := supervise.Start(supervise.Cmd{Name: name, Path: bin.Path, Args: append(append([]string{}, bin.Args...), args...),
		Env: bin.Env, LogDir: logDir, SameGroup: true})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(p.Kill)
	return p
}

// Client talks HTTP to the processes with a bounded timeout.
var Client = &http.Client{Timeout: 5 * time.Second}

// Do makes one request and returns the status and body. hdr is a list of
// header name, value pairs.
func Do(ctx context.Context, method, url, token, body string, hdr ...string) (int, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := Client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// StartSim starts `rolter sim --instant` and waits until it answers; it
// returns the engine's base URL.
func StartSim(t testing.TB, bin Binary, name, logDir string) string {
	t.Helper()
	addr := FreeAddrs(t, 1)[0]
	p := Start(t, bin, name, logDir, "sim", "--http", addr, "--instant")
	base := "http://" + addr
	err := testwait.Poll(30*time.Second, 50*time.Millisecond, func() error {
		if p.Exited() {
			return errors.New("exited")
		}
		code, _, err := Do(context.Background(), http.MethodGet, base+"/v1/models", "", "")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		return err
	})
	if err != nil {
		t.Fatalf("sim %s: %v\n%s", name, err, p.Tail(2000))
	}
	return base
}

// Router is one `rolter router` process.
type Router struct {
	ID    string
	API   string // http://host:port
	Admin string // http://host:port
	Raft  string // host:port
	Proc  *Proc
	// args are the flags it was started with (Restart reuses them).
	args     []string
	restarts int
}

// Cluster is a set of routers sharing a Raft store.
type Cluster struct {
	Routers []*Router
	// Token is the bootstrap superadmin token.
	Token string
	bin   Binary
	dir   string
}

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	Bin Binary
	N   int
	// Config is the rolter.toml every router starts with.
	Config string
	Dir    string
	// Wire, when set, may rebind router i's Raft (r.Raft) and gives the
	// address the others dial (--raft-advertise; "" keeps --raft) and extra flags;
	// seeds (gossip HOST:PORT) join --join after the Raft peers.
	Wire func(i int, r *Router) (raftAdvertise string, seeds []string, extra []string)
	// Started, when set, is told each router process once it runs.
	Started func(i int, r *Router)
}

// StartCluster starts N routers with static --join, --bootstrap-expect N
// and --insecure-dev, and waits until every one is ready (leader known,
// replicated config applied).
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	c := &Cluster{Token: "e2e-superadmin-token", bin: o.Bin, dir: o.Dir}
	files := map[string]string{"rolter.toml": o.Config, "admin-token": c.Token, "internal-token": "e2e-internal-token"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addrs := FreeAddrs(t, 3*o.N)
	var join []string
	advertise := make([]string, o.N)
	seeds := make([][]string, o.N)
	extra := make([][]string, o.N)
	for i := range o.N {
		r := &Router{ID: fmt.Sprintf("r%d", i+1), API: "http://" + addrs[3*i], Admin: "http://" + addrs[3*i+1], Raft: addrs[3*i+2]}
		c.Routers = append(c.Routers, r)
		dial := r.Raft
		if o.Wire != nil {
			advertise[i], seeds[i], extra[i] = o.Wire(i, r)
			if advertise[i] != "" {
				dial = advertise[i]
			}
		}
		join = append(join, r.ID+"="+dial)
	}
	for i, r := range c.Routers {
		var peers []string
		for _, o := range c.Routers {
			if o != r {
				peers = append(peers, o.Admin)
			}
		}
		r.args = []string{"router",
			"--config", filepath.Join(o.Dir, "rolter.toml"),
			"--http", strings.TrimPrefix(r.API, "http://"), "--admin", strings.TrimPrefix(r.Admin, "http://"),
			"--node-id", r.ID, "--raft", r.Raft, "--join", strings.Join(append(slices.Clone(join), seeds[i]...), ","),
			"--peer-admin", strings.Join(peers, ","),
			"--bootstrap-expect", fmt.Sprint(o.N), "--data-dir", filepath.Join(o.Dir, "data-"+r.ID),
			"--insecure-dev", "--admin-token-file", filepath.Join(o.Dir, "admin-token"),
			"--internal-token-file", filepath.Join(o.Dir, "internal-token")}
		if advertise[i] != "" {
			r.args = append(r.args, "--raft-advertise", advertise[i])
		}
		r.args = append(r.args, extra[i]...)
		r.Proc = Start(t, o.Bin, r.ID, o.Dir, r.args...)
		if o.Started != nil {
			o.Started(i, r)
		}
	}
	for _, r := range c.Routers {
		c.WaitReady(t, r)
	}
	return c
}

// WaitReady waits until r's /readyz answers 200 and not degraded (a
// Raft leader is known).
func (c *Cluster) WaitReady(t testing.TB, r *Router) {
	t.Helper()
	err := testwait.Poll(60*time.Second, 50*time.Millisecond, func() error {
		if r.Proc.Exited() {
			return errors.New("exited")
		}
		code, body, err := Do(context.Background(), http.MethodGet, r.Admin+"/readyz", "", "")
		if err == nil && (code != http.StatusOK || bytes.Contains(body, []byte("degraded"))) {
			err = fmt.Errorf("%d %s", code, bytes.TrimSpace(body))
		}
		return err
	})
	if err != nil {
		t.Fatalf("router %s not ready: %v\n%s", r.ID, err, r.Proc.Tail(3000))
	}
}

// Restart stops r (SIGTERM, a drain) and starts it again with the same
// flags and data dir, reading config instead of its rolter.toml when
// config is not empty; it waits until r is ready. Its log continues in
// <id>-restart<N>.log.
func (c *Cluster) Restart(t testing.TB, r *Router, config string) {
	t.Helper()
	_ = r.Proc.Signal(syscall.SIGTERM)
	select {
	case <-r.Proc.Done():
	case <-time.After(40 * time.Second):
		r.Proc.Kill()
	}
	if config != "" {
		for i, a := range r.args {
			if a == "--config" && i+1 < len(r.args) {
				r.args[i+1] = config
			}
		}
	}
	r.restarts++
	r.Proc = Start(t, c.bin, fmt.Sprintf("%s-restart%d", r.ID, r.restarts), c.dir, r.args...)
	c.WaitReady(t, r)
}

// Live returns the routers whose process is running.
func (c *Cluster) Live() []*Router {
	var out []*Router
	for _, r := range c.Routers {
		if !r.Proc.Exited() {
			out = append(out, r)
		}
	}
	return out
}

// Router returns the router with id (nil when none).
func (c *Cluster) Router(id string) *Router {
	for _, r := range c.Routers {
		if r.ID == id {
			return r
		}
	}
	return nil
}

// LeaderSeenBy returns the leader id r reports in GET /api/v1/cluster
// ("" when it knows none).
func (c *Cluster) LeaderSeenBy(ctx context.Context, r *Router) (string, error) {
	code, body, err := Do(ctx, http.MethodGet, r.Admin+"/api/v1/cluster", c.Token, "")
	if err != nil {
		return "", err
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("GET /api/v1/cluster on %s: %d %s", r.ID, code, body)
	}
	return jsonString(body, "leader")
}

// Leader returns the leader every live router agrees on.
func (c *Cluster) Leader(ctx context.Context) (string, error) {
	var leader string
	for _, r := range c.Live() {
		l, err := c.LeaderSeenBy(ctx, r)
		if err != nil {
			return "", err
		}
		if l == "" || (leader != "" && l != leader) {
			return "", fmt.Errorf("no agreed leader (%s sees %q, others %q)", r.ID, l, leader)
		}
		leader = l
	}
	return leader, nil
}

// LoadResult counts a load loop's requests.
type LoadResult struct {
	Requests, Failed int
	FirstErrors      []string
}

// ChatLoad sends non-streaming chat requests for model round-robin over
// targets (API base URLs) from workers goroutines until ctx ends, and
// counts the failures (transport errors and non-200 answers).
func ChatLoad(ctx context.Context, targets []string, model string, workers int) LoadResult {
	var mu sync.Mutex
	var res LoadResult
	var wg sync.WaitGroup
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"ping"}],"max_tokens":4}`, model)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ctx.Err() == nil; i++ {
				base := targets[i%len(targets)]
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				code, b, err := Do(rctx, http.MethodPost, base+"/v1/chat/completions", "", body)
				cancel()
				mu.Lock()
				res.Requests++
				if err != nil || code != http.StatusOK {
					res.Failed++
					if len(res.FirstErrors) < 5 {
						res.FirstErrors = append(res.FirstErrors, fmt.Sprintf("%s: %d %.200s %v", base, code, b, err))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return res
}
