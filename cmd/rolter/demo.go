package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/sim"
	"github.com/rolter/rolter/sim/workload"
)

// The demo's fleet: three Raft routers and four simulated engines, each
// with its sidecar.
const (
	demoRouters = 3
	demoEngines = 4
	// demoStopGrace is how long the children get to exit after SIGTERM
	// before their process groups are killed.
	demoStopGrace = 5 * time.Second
)

// errPortBusy: a port the demo needs is taken (another demo, say).
var errPortBusy = errors.New("port busy")

// errNotReady: the fleet did not come up within --ready-timeout.
var errNotReady = errors.New("demo not ready")

// demoRouter and demoEngine are the ports of one router and one engine
// (with its sidecar), all on 127.0.0.1.
type demoRouter struct {
	id                       string
	api, admin, raft, gossip int
}

type demoEngine struct {
	id                                    string
	http, kv, replay, gossip, sideMetrics int
}

// demoLayout derives every port from base: router i uses base+10i+{0..3}
// (API, admin, Raft, gossip), engine j uses base+100+10j+{0..4} (sim API,
// KV events, KV replay, sidecar gossip, sidecar metrics).
type demoLayout struct {
	routers []demoRouter
	engines []demoEngine
}

func newDemoLayout(base int) demoLayout {
	var l demoLayout
	for i := range demoRouters {
		p := base + 10*i
		l.routers = append(l.routers, demoRouter{id: fmt.Sprintf("r%d", i+1), api: p, admin: p + 1, raft: p + 2, gossip: p + 3})
	}
	for j := range demoEngines {
		p := base + 100 + 10*j
		l.engines = append(l.engines, demoEngine{id: fmt.Sprintf("engine-%d", j+1), http: p, kv: p + 1, replay: p + 2,
			gossip: p + 3, sideMetrics: p + 4})
	}
	return l
}

// demoPort is one port to pre-check; udp marks gossip ports (memberlist
// listens on UDP and TCP).
type demoPort struct {
	what string
	port int
	udp  bool
}

func (l demoLayout) ports() []demoPort {
	var out []demoPort
	for _, r := range l.routers {
		out = append(out, demoPort{r.id + " API (--http)", r.api, false}, demoPort{r.id + " admin (--admin)", r.admin, false},
			demoPort{r.id + " Raft (--raft)", r.raft, false}, demoPort{r.id + " gossip (--gossip)", r.gossip, true})
	}
	for _, e := range l.engines {
		out = append(out, demoPort{e.id + " sim API", e.http, false}, demoPort{e.id + " KV events", e.kv, false},
			demoPort{e.id + " KV replay", e.replay, false}, demoPort{e.id + " sidecar gossip", e.gossip, true},
			demoPort{e.id + " sidecar metrics", e.sideMetrics, false})
	}
	return out
}

func addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// checkPorts listens on every port once, before anything starts, so a
// busy port fails the demo at once with its name instead of a child
// failing later.
func checkPorts(ports []demoPort) error {
	busy := func(network string, p demoPort, err error) error {
		why := "is already in use"
		if !errors.Is(err, syscall.EADDRINUSE) {
			why = fmt.Sprintf("cannot be opened (%v)", err)
		}
		return fmt.Errorf("%w: %s 127.0.0.1:%d (%s) %s; is another rolter demo running? "+
			"Stop it, or pick another range with --base-port (this one spans %d-%d)",
			errPortBusy, network, p.port, p.what, why, ports[0].port, ports[len(ports)-1].port)
	}
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for _, p := range ports {
		if p.port <= 0 || p.port > 65535 {
			return fmt.Errorf("%w: port %d (%s) is out of range; pick another --base-port", errUsage, p.port, p.what)
		}
		ln, err := net.Listen("tcp", addr(p.port))
		if err != nil {
			return busy("tcp", p, err)
		}
		closers = append(closers, ln)
		if p.udp {
			pc, err := net.ListenPacket("udp", addr(p.port))
			if err != nil {
				return busy("udp", p, err)
			}
			closers = append(closers, pc)
		}
	}
	return nil
}

// demoProc is one child process; done closes once it has been reaped.
type demoProc struct {
	name string
	log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // valid after done
}

func (p *demoProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail returns the last n bytes of the process's log.
func (p *demoProc) tail(n int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return ""
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > n {
		_, _ = f.Seek(st.Size()-n, io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// demoFleet starts children from bin, each in its own process group with
// its output in logDir/<name>.log, and stops them all.
type demoFleet struct {
	bin    string
	logDir string
	procs  []*demoProc
}

func (f *demoFleet) start(name string, args ...string) error {
	path := filepath.Join(f.logDir, name+".log")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(f.bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: the terminal's Ctrl-C reaches the demo only,
	// which then stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &demoProc{name: name, log: path, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	f.procs = append(f.procs, p)
	return nil
}

// lastErrors returns the last ERROR line of every child's log that has
// one (the logs go with the temp dir, so a failure quotes them).
func (f *demoFleet) lastErrors() string {
	var b strings.Builder
	for _, p := range f.procs {
		lines := strings.Split(strings.TrimSpace(p.tail(64<<10)), "\n")
		for i := len(lines) - 1; i >= 0; i-- {
			if strings.Contains(lines[i], "level=ERROR") {
				fmt.Fprintf(&b, "\n  %s: %s", p.name, lines[i])
				break
			}
		}
	}
	if b.Len() == 0 {
		return " (no errors in the children's logs)"
	}
	return "; last errors in the logs:" + b.String()
}

// firstExited returns a child that has exited, or nil.
func (f *demoFleet) firstExited() *demoProc {
	for _, p := range f.procs {
		if p.exited() {
			return p
		}
	}
	return nil
}

// stop sends SIGTERM to every child's process group, waits up to grace
// for all of them, then SIGKILLs the groups still there and reaps them.
// It returns how many had to be killed.
func (f *demoFleet) stop(grace time.Duration) int {
	for _, p := range f.procs {
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(grace)
	killed := 0
	for _, p := range f.procs {
		select {
		case <-p.done:
			continue
		case <-time.After(time.Until(deadline)):
		}
		if p.exited() {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		killed++
		select {
		case <-p.done:
		case <-time.After(2 * time.Second):
		}
	}
	return killed
}

// demoOptions are `rolter demo`'s flags.
type demoOptions struct {
	basePort     int
	simSpeed     float64
	trace        string
	replaySpeed  float64
	load         bool
	sidecars     bool
	readyTimeout time.Duration
}

// runDemo is `rolter demo`: the whole mesh on loopback, ready to try, until
// SIGINT/SIGTERM (ctx); then every child is stopped and the state dir is
// removed.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o demoOptions
	fs := newFlagSet("demo", stderr)
	fs.IntVar(&o.basePort, "base-port", 4000, "first port: routers use base..base+23 (r1's API on base, admin on base+1), "+
		"engines base+100..base+134")
	fs.Float64Var(&o.simSpeed, "speed", 10, "simulated engines run N times faster than a real GPU")
	fs.StringVar(&o.trace, "trace", "", "Mooncake trace replayed in the background "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.Float64Var(&o.replaySpeed, "replay-speed", 0.2, "background trace speed (1 = the trace's own rate, about 3.4 req/s)")
	fs.BoolVar(&o.load, "load", true, "send gentle background traffic so the dashboard's numbers move")
	fs.BoolVar(&o.sidecars, "sidecars", true, "run a sidecar beside every engine (KV events, LMCache and load over gossip)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 60*time.Second, "give up when the fleet is not ready by then")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.simSpeed <= 0 || o.replaySpeed <= 0 {
		return fmt.Errorf("%w: --speed and --replay-speed must be positive", errUsage)
	}
	start := time.Now()
	layout := newDemoLayout(o.basePort)
	if err := checkPorts(layout.ports()); err != nil {
		return err
	}
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the rolter binary: %w", err)
	}
	dir, err := os.MkdirTemp("", "rolter-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := &demo{opts: o, layout: layout, dir: dir, kvEvents: cgoBuild(), token: randomToken(),
		client: &http.Client{Timeout: 5 * time.Second}}
	d.fleet = demoFleet{bin: bin, logDir: filepath.Join(dir, "logs")}
	if err := d.prepare(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rolter demo: starting %d routers and %d engines in %s\n", demoRouters, demoEngines, dir)
	runErr := d.run(ctx, start, stdout)
	fmt.Fprintln(stdout, "rolter demo: stopping every process")
	stopStart := time.Now()
	killed := d.fleet.stop(demoStopGrace)
	if killed > 0 {
		fmt.Fprintf(stdout, "rolter demo: %d processes did not stop within %v and were killed\n", killed, demoStopGrace)
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(stderr, "rolter demo: removing %s: %v\n", dir, err)
	} else {
		fmt.Fprintf(stdout, "rolter demo: stopped %d processes in %.1fs, removed %s\n",
			len(d.fleet.procs), time.Since(stopStart).Seconds(), dir)
	}
	return runErr
}

// demo is one running demo.
type demo struct {
	opts     demoOptions
	layout   demoLayout
	dir      string
	token    string // the admin token, printed for the user
	kvEvents bool   // this binary has ZMQ (cgo): KV events on
	fleet    demoFleet
	client   *http.Client
}

// cgoBuild reports whether this binary was built with cgo, which the ZMQ
// KV-event sockets need.
func cgoBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" {
			return s.Value == "1"
		}
	}
	return false
}

func randomToken() string {
	var b [24]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// prepare writes the config and the token files.
func (d *demo) prepare() error {
	if err := os.MkdirAll(d.fleet.logDir, 0o700); err != nil {
		return err
	}
	files := map[string]string{
		"rolter.toml":    d.configTOML(),
		"admin-token":    d.token,
		"internal-token": randomToken(),
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(d.dir, name), []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// configTOML is the seed config: one route per strategy worth seeing,
// the "lora" provider group, a discover route when sidecars run, the
// adaptive policy on and broken streams resumed.
func (d *demo) configTOML() string {
	var b strings.Builder
	b.WriteString("# rolter demo: every router syncs the entries below into the replicated state (raise generation to change them).\ngeneration = 1\n\n")
	for j, e := range d.layout.engines {
		// Different prices so the adaptive route's cost term has something to weigh.
		fmt.Fprintf(&b, "[[providers]]\nname = %q\napi_base = %q\nprice_in_per_mtok = %.2f\nprice_out_per_mtok = %.2f\n\n",
			e.id, "http://"+addr(e.http), 0.10*float64(j+1), 0.30*float64(j+1))
	}
	var targets, members []string
	for _, e := range d.layout.engines {
		targets = append(targets, fmt.Sprintf("  { provider = %q, model = %q },", e.id, sim.DefaultModelName))
		members = append(members, fmt.Sprintf("  { provider = %q },", e.id))
	}
	for _, r := range demoRoutes {
		fmt.Fprintf(&b, "[[routes]]\nmodel = %q\nstrategy = %q\ntargets = [\n%s\n]\n\n", r.model, r.strategy, strings.Join(targets, "\n"))
	}
	if d.opts.sidecars {
		fmt.Fprintf(&b, "# Targets found over gossip: every engine whose sidecar announces the model.\n"+
			"[[routes]]\nmodel = %q\nstrategy = \"power_of_two\"\ndiscover = true\n\n", sim.DefaultModelName)
	}
	fmt.Fprintf(&b, "# \"lora/<adapter>\": passthrough members, so the adapter name reaches the engine.\n"+
		"[[provider_groups]]\nname = \"LoRA fleet\"\nslug = \"lora\"\nstrategy = \"lora_aware\"\nmax_loras = 2\nmembers = [\n%s\n]\n\n",
		strings.Join(members, "\n"))
	b.WriteString("[adaptive_routing]\nenabled = true\nlatency_weight = 1.0\ncost_weight = 0.5\nload_weight = 0.25\n" +
		"exploration_ratio = 0.05\nmin_samples = 20\n\n")
	b.WriteString("# A stream whose engine dies after the first byte goes on from another engine.\n" +
		"[retry]\nresume_streams = true\n\n")
	b.WriteString("[health]\ninterval = \"2s\"\n\n[timeouts]\ndrain = \"1s\"\n")
	return b.String()
}

// demoRoutes are the routes over all four engines, one per strategy.
var demoRoutes = []struct{ model, strategy, what string }{
	{"chat", "round_robin", "turns through the engines"},
	{"cache", "cache_aware", "prefers the engine that saw the prompt's prefix (router-side estimate)"},
	{"precise", "precise_cache_aware", "the engine where the prompt waits least: its uncached part (sidecar KV events) + prefill queued there"},
	{"adaptive", "adaptive", "learns latency, cost and load per engine ([adaptive_routing] enabled)"},
}

// startAll starts every router, engine and sidecar.
func (d *demo) startAll() error {
	var raftPeers, seeds []string
	for _, r := range d.layout.routers {
		raftPeers = append(raftPeers, r.id+"="+addr(r.raft))
		seeds = append(seeds, addr(r.gossip))
	}
	for i, r := range d.layout.routers {
		join := append(append([]string{}, raftPeers...), append(seeds[:i:i], seeds[i+1:]...)...)
		err := d.fleet.start(r.id, "router", "--config", filepath.Join(d.dir, "rolter.toml"), "--node-id", r.id,
			"--http", addr(r.api), "--admin", addr(r.admin), "--raft", addr(r.raft), "--gossip", addr(r.gossip),
			"--join", strings.Join(join, ","), "--bootstrap-expect", strconv.Itoa(demoRouters),
			"--data-dir", filepath.Join(d.dir, "data", r.id), "--insecure-dev",
			// Above the 500ms default: a loaded 2-core laptop must not see
			// the leader step down every time a compile starts.
			"--raft-timeout", "1s",
			"--admin-token-file", filepath.Join(d.dir, "admin-token"),
			"--internal-token-file", filepath.Join(d.dir, "internal-token"))
		if err != nil {
			return err
		}
	}
	for j, e := range d.layout.engines {
		args := []string{"sim", "--http", addr(e.http), "--speed", strconv.FormatFloat(d.opts.simSpeed, 'g', -1, 64),
			"--max-loras", "2", "--lora-any", "--lmcache", "--seed", strconv.Itoa(j + 1)}
		if d.kvEvents {
			args = append(args, "--kv-events", "tcp://"+addr(e.kv), "--kv-events-dial", "bind",
				"--kv-events-replay", "tcp://"+addr(e.replay))
		}
		if err := d.fleet.start(e.id, args...); err != nil {
			return err
		}
		if !d.opts.sidecars {
			continue
		}
		args = []string{"sidecar", "--engine", "http://" + addr(e.http), "--node-id", e.id, "--models", sim.DefaultModelName,
			"--gossip", addr(e.gossip), "--join", strings.Join(seeds, ","), "--insecure-dev",
			"--metrics-addr", addr(e.sideMetrics), "--lmcache", "http://" + addr(e.http) + "/lmcache"}
		if d.kvEvents {
			args = append(args, "--kv-events", "tcp://"+addr(e.kv), "--kv-events-replay", "tcp://"+addr(e.replay))
		}
		if err := d.fleet.start(e.id+"-sidecar", args...); err != nil {
			return err
		}
	}
	return nil
}

// run starts the fleet, waits for it, prints what to do next and keeps
// the background load going until ctx ends.
func (d *demo) run(ctx context.Context, start time.Time, stdout io.Writer) error {
	if err := d.startAll(); err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, d.opts.readyTimeout)
	defer cancel()
	if err := d.waitReady(readyCtx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting
		}
		return err
	}
	d.printNextSteps(stdout, time.Since(start))
	var wg sync.WaitGroup
	if d.opts.load {
		fmt.Fprintln(stdout, "Background traffic (so the dashboard's numbers move)")
		for _, l := range d.loads(stdout) {
			fmt.Fprintf(stdout, "  load: %s\n", l.what)
			wg.Add(1)
			go func() { defer wg.Done(); l.loop(ctx) }()
		}
	}
	fmt.Fprintln(stdout, "\nCtrl-C stops every process and removes the temp dir.")
	d.watch(ctx, stdout)
	wg.Wait()
	return nil
}

// watch reports children that exit before ctx ends.
func (d *demo) watch(ctx context.Context, stdout io.Writer) {
	reported := map[*demoProc]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range d.fleet.procs {
			if p.exited() && !reported[p] {
				reported[p] = true
				fmt.Fprintf(stdout, "rolter demo: %s exited (%v); its log: %s\n", p.name, p.err, p.log)
			}
		}
	}
}

// waitReady polls until every sim answers /health, every router /readyz,
// the cluster has a leader and sees every router (and every engine, with
// sidecars), and a streamed chat completion goes through. A child that
// exits fails it at once.
func (d *demo) waitReady(ctx context.Context) error {
	checks := []struct {
		what  string
		check func(context.Context) error
	}{
		{"every engine answers /health", d.enginesHealthy},
		{"every router answers /readyz (Raft leader elected, config applied)", d.routersReady},
		{"every router sees the whole mesh in /api/v1/cluster", d.meshComplete},
		{"a streamed chat completion through the API", d.firstRequest},
	}
	for _, c := range checks {
		var last error
		for {
			if p := d.fleet.firstExited(); p != nil {
				return fmt.Errorf("%w: %s exited while starting (%v); last lines of %s:\n%s", errNotReady, p.name, p.err, p.log, p.tail(2000))
			}
			if last = c.check(ctx); last == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: waiting until %s: %v%s", errNotReady, c.what, last, d.fleet.lastErrors())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

func (d *demo) get(ctx context.Context, url, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return body, nil
}

func (d *demo) enginesHealthy(ctx context.Context) error {
	for _, e := range d.layout.engines {
		if _, err := d.get(ctx, "http://"+addr(e.http)+"/health", ""); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) routersReady(ctx context.Context) error {
	for _, r := range d.layout.routers {
		if _, err := d.get(ctx, "http://"+addr(r.admin)+"/readyz", ""); err != nil {
			return err
		}
	}
	return nil
}

// demoCluster is the part of GET /api/v1/cluster the demo reads.
type demoCluster struct {
	Leader  string `json:"leader"`
	Routers []struct {
		NodeID   string `json:"node_id"`
		RaftRole string `json:"raft_role"`
	} `json:"routers"`
	Engines []struct {
		NodeID string `json:"node_id"`
		State  string `json:"state"`
	} `json:"engines"`
}

func (d *demo) cluster(ctx context.Context, r demoRouter) (demoCluster, error) {
	var c demoCluster
	body, err := d.get(ctx, "http://"+addr(r.admin)+"/api/v1/cluster", d.token)
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(body, &c)
}

func (d *demo) meshComplete(ctx context.Context) error {
	wantEngines := 0
	if d.opts.sidecars {
		wantEngines = demoEngines
	}
	for _, r := range d.layout.routers {
		c, err := d.cluster(ctx, r)
		if err != nil {
			return err
		}
		if c.Leader == "" || len(c.Routers) < demoRouters || len(c.Engines) < wantEngines {
			return fmt.Errorf("%s sees leader %q, %d routers, %d engines", r.id, c.Leader, len(c.Routers), len(c.Engines))
		}
	}
	return nil
}

// firstRequest streams one chat completion through r1's API.
func (d *demo) firstRequest(ctx context.Context) error {
	body := `{"model":"chat","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello from rolter demo"}]}`
	url := "http://" + addr(d.layout.routers[0].api) + "/v1/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "data: [DONE]" {
			return nil
		}
	}
	return fmt.Errorf("POST %s: stream ended without [DONE] (%v)", url, sc.Err())
}

// printNextSteps tells the user where everything is and what to try.
func (d *demo) printNextSteps(w io.Writer, elapsed time.Duration) {
	r1 := d.layout.routers[0]
	api := "http://" + addr(r1.api) + "/v1"
	admin := "http://" + addr(r1.admin)
	leader := "?"
	if c, err := d.cluster(context.Background(), r1); err == nil {
		leader = c.Leader
	}
	sidecars := fmt.Sprintf("%d sidecars gossiping engine state", demoEngines)
	if !d.opts.sidecars {
		sidecars = "NO sidecars (--sidecars=false): routers see no KV residency, LMCache or engine load, and discovery is off"
	}
	fmt.Fprintf(w, "\nrolter demo ready in %.1fs: %d routers (Raft leader %s), %d simulated engines (speed %gx), %s\n",
		elapsed.Seconds(), demoRouters, leader, demoEngines, d.opts.simSpeed, sidecars)
	if !d.kvEvents {
		fmt.Fprintln(w, "NOTE: this rolter was built without cgo, so the engines publish no KV events and "+
			"precise_cache_aware has no exact KV residency to use (build with CGO_ENABLED=1 and libzmq for KV events)")
	}
	var apis, admins []string
	for _, r := range d.layout.routers {
		apis = append(apis, "http://"+addr(r.api)+"/v1")
		admins = append(admins, "http://"+addr(r.admin))
	}
	fmt.Fprintf(w, "\nAPI (OpenAI-compatible)\n  API     %s\n  (every router serves every route: also %s)\n", api, strings.Join(apis[1:], ", "))
	fmt.Fprintln(w, "\nModels")
	for _, r := range demoRoutes {
		fmt.Fprintf(w, "  %-34s %-20s %s\n", r.model, r.strategy, r.what)
	}
	fmt.Fprintf(w, "  %-34s %-20s %s\n", "lora/<adapter>", "lora_aware",
		"provider group of passthrough members, e.g. lora/adapter-001; keeps each adapter on few engines (2 fit per engine)")
	if d.opts.sidecars {
		fmt.Fprintf(w, "  %-34s %-20s %s\n", sim.DefaultModelName, "power_of_two", "targets discovered over gossip (no list in the config)")
	}
	fmt.Fprintf(w, "  %-34s %-20s %s\n", "engine-1/<model>", "(pinned)", "one engine (engine-1..engine-4), no balancing")

	fmt.Fprintf(w, "\nTry it\n  curl -N %s/chat/completions -H 'Content-Type: application/json' \\\n"+
		"    -d '{\"model\":\"chat\",\"stream\":true,\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n", api)
	fmt.Fprintf(w, "\n  # openai-python (pip install openai)\n"+
		"  from openai import OpenAI\n"+
		"  client = OpenAI(base_url=%q, api_key=\"unused\")\n"+
		"  stream = client.chat.completions.create(model=\"precise\", stream=True,\n"+
		"      messages=[{\"role\": \"user\", \"content\": \"Hello!\"}])\n"+
		"  for chunk in stream:\n"+
		"      if chunk.choices:\n"+
		"          print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)\n", api)
	fmt.Fprintf(w, "\n  // openai-go (go get github.com/openai/openai-go)\n"+
		"  client := openai.NewClient(option.WithBaseURL(%q), option.WithAPIKey(\"unused\"))\n"+
		"  stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{\n"+
		"      Model:    \"adaptive\",\n"+
		"      Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(\"Hello!\")},\n"+
		"  })\n"+
		"  for stream.Next() {\n"+
		"      if c := stream.Current(); len(c.Choices) > 0 {\n"+
		"          fmt.Print(c.Choices[0].Delta.Content)\n"+
		"      }\n"+
		"  }\n", api+"/")

	fmt.Fprintf(w, "\n  # streams survive an engine's death (resume_streams): make engine-1 kill half its streams\n"+
		"  # after 5 tokens, stream again, and watch rolter_stream_resumes_total on /metrics\n"+
		"  curl -s http://%s/sim/faults -d '{\"die_rate\":0.5,\"die_after_tokens\":5}'\n", addr(d.layout.engines[0].http))

	fmt.Fprintf(w, "\nAdmin\n  admin   %s/api/v1/   (also %s)\n  ui      %s/ui/   (paste the admin token)\n  token   %s\n",
		admin, strings.Join(admins[1:], ", "), admin, d.token)
	fmt.Fprintf(w, "  curl -s -H 'Authorization: Bearer %s' %s/api/v1/cluster\n", d.token, admin)
	fmt.Fprintf(w, "  metrics %s/metrics\n", admin)

	fmt.Fprintf(w, "\nFiles (all removed on exit)\n  logs    %s/<name>.log (r1..r3, engine-1..4, engine-N-sidecar)\n"+
		"  data    %s (Raft log and snapshots)\n  config  %s\n\n",
		d.fleet.logDir, filepath.Join(d.dir, "data"), filepath.Join(d.dir, "rolter.toml"))
}

// demoLoad is one background stream of requests, replayed in rounds.
type demoLoad struct {
	what string
	cfg  workload.ReplayConfig
	reqs []workload.Request
}

// loop replays the requests round after round until ctx ends.
func (l demoLoad) loop(ctx context.Context) {
	for ctx.Err() == nil && len(l.reqs) > 0 {
		workload.Replay(ctx, l.cfg, l.reqs)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// demoTraceRequests is how much of the trace a round replays.
const demoTraceRequests = 1200

// loads builds the background traffic: the Mooncake trace (token-id
// prompts sharing prefixes) on "precise" spread over the routers, a LoRA
// mix on the "lora" group, synthetic chats on "cache" and "adaptive".
func (d *demo) loads(stdout io.Writer) []demoLoad {
	target := func(i int) string { return "http://" + addr(d.layout.routers[i%demoRouters].api) }
	client := newReplayClient(5 * time.Minute)
	var out []demoLoad
	path := d.opts.trace
	var recs []workload.TraceRecord
	var err error
	if path == "" {
		path = mooncake.Name
		recs, err = workload.ReadTrace(mooncake.Open(), demoTraceRequests)
	} else {
		var f *os.File
		if f, err = os.Open(path); err == nil {
			recs, err = workload.ReadTrace(f, demoTraceRequests)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "  load: cannot read the trace %s (%v); using synthetic chat instead\n", path, err)
		recs = nil
	}
	if len(recs) > 0 {
		reqs := workload.FromTrace(recs, false)
		parts := make([][]workload.Request, demoRouters)
		for i, r := range reqs {
			parts[i%demoRouters] = append(parts[i%demoRouters], r)
		}
		for i, p := range parts {
			out = append(out, demoLoad{
				what: fmt.Sprintf("Mooncake trace %s (%d requests per round, speed %g) -> model precise via %s",
					path, len(p), d.opts.replaySpeed, target(i)),
				cfg:  workload.ReplayConfig{Target: target(i), Mode: workload.ModeCompletions, Model: "precise", Speed: d.opts.replaySpeed, ConcurrencyCap: 4, Client: client},
				reqs: p,
			})
		}
	} else {
		reqs, _ := workload.Synthetic("chat", 11, 300, 0.5) // a known generator and a positive count: no error
		out = append(out, demoLoad{
			what: "no readable trace: synthetic chat, 0.5 req/s -> model precise via " + target(0),
			cfg:  workload.ReplayConfig{Target: target(0), Mode: workload.ModeChat, Model: "precise", Speed: 1, ConcurrencyCap: 4, Client: client},
			reqs: reqs,
		})
	}
	lora := workload.LoraMix{Seed: 7, Requests: 300, Adapters: 6, ZipfS: 1.1, PrefixTokens: 256, PromptTokens: 64,
		OutputTokens: 48, Rate: 0.25}.Generate()
	for i := range lora {
		lora[i].Model = "lora/" + lora[i].Model
	}
	out = append(out, demoLoad{
		what: "LoRA mix, 0.25 req/s -> models lora/adapter-000..lora/adapter-005 via " + target(1),
		cfg:  workload.ReplayConfig{Target: target(1), Mode: workload.ModeChat, Speed: 1, ConcurrencyCap: 4, Client: client},
		reqs: lora,
	})
	for i, model := range []string{"cache", "adaptive"} {
		reqs, _ := workload.Synthetic("chat", uint64(21+i), 300, 0.25)
		out = append(out, demoLoad{
			what: fmt.Sprintf("synthetic multi-turn chat, 0.25 req/s -> model %s via %s", model, target(i+2)),
			cfg:  workload.ReplayConfig{Target: target(i + 2), Mode: workload.ModeChat, Model: model, Speed: 1, ConcurrencyCap: 4, Client: client},
			reqs: reqs,
		})
	}
	return out
}
