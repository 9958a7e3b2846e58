// Package demo owns `rolter demo`: the whole mesh on loopback (three Raft
// routers, four simulated engines, each with its sidecar) started from
// the rolter binary, a seed config showing one route per strategy, a
// readiness wait ending in a streamed chat, the what-to-try text, and
// background traffic (the embedded Mooncake trace, a LoRA mix, synthetic
// chats) so the dashboard's numbers move. The port plan and the
// children's command lines come from package localfleet, the children's
// lifecycle from package supervise.
package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/supervise"
)

// The demo's fleet: three Raft routers and four simulated engines, each
// with its sidecar.
const (
	Routers = 3
	Engines = 4
	// stopGrace is how long the children get to exit after SIGTERM
	// before their process groups are killed.
	stopGrace = supervise.DefaultGrace
)

// ErrNotReady marks a fleet that did not come up within ReadyTimeout.
var ErrNotReady = errors.New("demo not ready")

// ErrOptions marks unusable Options.
var ErrOptions = errors.New("demo: bad options")

// Options are `rolter demo`'s flags.
type Options struct {
	// Bin is the rolter executable the children run.
	Bin string
	// BasePort is the first port of the plan (localfleet.AtBase).
	BasePort int
	// SimSpeed is every engine's --speed.
	SimSpeed float64
	// Trace is the Mooncake trace replayed in the background ("": the
	// embedded one); ReplaySpeed its speed.
	Trace       string
	ReplaySpeed float64
	// Load turns the background traffic on.
	Load bool
	// Sidecars runs a sidecar beside every engine.
	Sidecars bool
	// KVEvents turns the engines' ZMQ KV events on (a cgo build).
	KVEvents     bool
	ReadyTimeout time.Duration
}

// Plan is the demo's port plan for base.
func Plan(base int) localfleet.Plan { return localfleet.AtBase(base, Routers, Engines) }

// Run is `rolter demo`: the whole mesh on loopback, ready to try, until
// ctx ends (SIGINT/SIGTERM); then every child is stopped and the state dir
// removed. A busy port fails it before anything starts (the error wraps
// localfleet.ErrPortBusy).
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if o.SimSpeed <= 0 || o.ReplaySpeed <= 0 {
		return fmt.Errorf("%w: --speed and --replay-speed must be positive", ErrOptions)
	}
	if o.Bin == "" {
		return fmt.Errorf("%w: no rolter binary", ErrOptions)
	}
	start := time.Now()
	plan := Plan(o.BasePort)
	if err := localfleet.Check(plan.Ports()); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "rolter-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := &demo{opts: o, plan: plan, dir: dir, token: localfleet.Token(),
		group:  &supervise.Group{Bin: o.Bin, LogDir: filepath.Join(dir, "logs")},
		client: &http.Client{Timeout: 5 * time.Second}}
	if d.files, err = localfleet.WriteFiles(dir, Config(plan, o.Sidecars), configHeader, d.token); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rolter demo: starting %d routers and %d engines in %s\n", Routers, Engines, dir)
	runErr := d.run(ctx, start, stdout)
	fmt.Fprintln(stdout, "rolter demo: stopping every process")
	stopStart := time.Now()
	n := len(d.group.Procs())
	if killed := d.group.StopAll(stopGrace); killed > 0 {
		fmt.Fprintf(stdout, "rolter demo: %d processes did not stop within %v and were killed\n", killed, stopGrace)
	}
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintf(stderr, "rolter demo: removing %s: %v\n", dir, err)
	} else {
		fmt.Fprintf(stdout, "rolter demo: stopped %d processes in %.1fs, removed %s\n", n, time.Since(stopStart).Seconds(), dir)
	}
	return runErr
}

// demo is one running demo.
type demo struct {
	opts   Options
	plan   localfleet.Plan
	dir    string
	files  localfleet.Files
	token  string // the admin token, printed for the user
	group  *supervise.Group
	client *http.Client
}

// startAll starts every router, engine and sidecar.
func (d *demo) startAll() error {
	for i, r := range d.plan.Routers {
		if _, err := d.group.Start(r.ID, d.plan.RouterArgs(i, d.files)...); err != nil {
			return err
		}
	}
	for j, e := range d.plan.Engines {
		if _, err := d.group.Start(e.ID, d.plan.SimArgs(j, d.opts.SimSpeed, d.opts.KVEvents, "--max-loras", "2", "--lora-any", "--lmcache")...); err != nil {
			return err
		}
		if !d.opts.Sidecars {
			continue
		}
		if _, err := d.group.Start(e.ID+"-sidecar", d.plan.SidecarArgs(j, d.opts.KVEvents, "--lmcache", e.URL()+"/lmcache")...); err != nil {
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
	readyCtx, cancel := context.WithTimeout(ctx, d.opts.ReadyTimeout)
	defer cancel()
	if err := d.waitReady(readyCtx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while starting
		}
		return err
	}
	d.printNextSteps(stdout, time.Since(start))
	var wg sync.WaitGroup
	if d.opts.Load {
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
	reported := map[*supervise.Proc]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range d.group.Procs() {
			if p.Exited() && !reported[p] {
				reported[p] = true
				fmt.Fprintf(stdout, "rolter demo: %s exited (%v); its log: %s\n", p.Name, p.Err(), p.Log)
			}
		}
	}
}

// waitReady waits until every sim answers /health, every router /readyz,
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
		if err := d.group.WaitReady(ctx, c.what, c.check); err != nil {
			if errs := d.group.LastErrors(); errs != "" {
				return fmt.Errorf("%w: %w\nlast errors in the logs:\n%s", ErrNotReady, err, errs)
			}
			return fmt.Errorf("%w: %w (no errors in the children's logs)", ErrNotReady, err)
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
	for _, e := range d.plan.Engines {
		if _, err := d.get(ctx, e.URL()+"/health", ""); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) routersReady(ctx context.Context) error {
	for _, r := range d.plan.Routers {
		if _, err := d.get(ctx, r.AdminURL()+"/readyz", ""); err != nil {
			return err
		}
	}
	return nil
}

// Cluster is the part of GET /api/v1/cluster the demo reads.
type Cluster struct {
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

func (d *demo) cluster(ctx context.Context, r localfleet.Router) (Cluster, error) {
	var c Cluster
	body, err := d.get(ctx, r.AdminURL()+"/api/v1/cluster", d.token)
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(body, &c)
}

func (d *demo) meshComplete(ctx context.Context) error {
	wantEngines := 0
	if d.opts.Sidecars {
		wantEngines = Engines
	}
	for _, r := range d.plan.Routers {
		c, err := d.cluster(ctx, r)
		if err != nil {
			return err
		}
		if c.Leader == "" || len(c.Routers) < Routers || len(c.Engines) < wantEngines {
			return fmt.Errorf("%s sees leader %q, %d routers, %d engines", r.ID, c.Leader, len(c.Routers), len(c.Engines))
		}
	}
	return nil
}

// firstRequest streams one chat completion through r1's API.
func (d *demo) firstRequest(ctx context.Context) error {
	body := `{"model":"chat","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hello from rolter demo"}]}`
	url := d.plan.Routers[0].APIURL() + "/v1/chat/completions"
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
