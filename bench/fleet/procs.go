package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rolter/rolter/config"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim"
	simfleet "github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/supervise"
)

// model is the route the replay asks for; every target serves the sim's
// default model behind it.
const model = "bench"

// seedConfig is the routers' seed config: one provider per engine and
// the bench route over all of them with strategy.
func seedConfig(p localfleet.Plan, strategy string) *config.Config {
	c := config.Default()
	r := config.Route{Model: model, Strategy: strategy}
	for _, e := range p.Engines {
		c.Providers = append(c.Providers, config.Provider{Name: e.ID, APIBase: e.URL()})
		r.Targets = append(r.Targets, config.Target{Provider: e.ID, Model: sim.DefaultModelName})
	}
	c.Routes = []config.Route{r}
	return &c
}

// fleetRun is one started fleet.
type fleetRun struct {
	cfg    Config
	l      localfleet.Plan
	dir    string
	admin  string // admin token
	group  *supervise.Group
	client *http.Client
}

// start writes the config and tokens into dir and starts every engine,
// sidecar and router.
func (f *fleetRun) start(strategy string) error {
	files, err := localfleet.WriteFiles(f.dir, seedConfig(f.l, strategy), "", f.admin)
	if err != nil {
		return err
	}
	for j, e := range f.l.Engines {
		extra := []string{"--generation-log", genLogPath(f.dir, e.ID)}
		if f.cfg.ClientClock {
			extra = append(extra, "--client-clock")
		}
		if f.cfg.KVBlocks > 0 {
			extra = append(extra, "--kv-blocks", strconv.Itoa(f.cfg.KVBlocks))
		}
		if _, err := f.group.Start(e.ID, f.l.SimArgs(j, f.cfg.Speed, true, extra...)...); err != nil {
			return err
		}
		if _, err := f.group.Start(e.ID+"-sidecar", f.l.SidecarArgs(j, true)...); err != nil {
			return err
		}
	}
	for i, r := range f.l.Routers {
		if _, err := f.group.Start(r.ID, f.l.RouterArgs(i, files)...); err != nil {
			return err
		}
	}
	return nil
}

// clusterView is the part of GET /api/v1/cluster readiness reads.
type clusterView struct {
	Leader  string            `json:"leader"`
	Routers []json.RawMessage `json:"routers"`
	Engines []struct {
		NodeID string `json:"node_id"`
		State  string `json:"state"`
	} `json:"engines"`
}

// ready waits until every engine, sidecar and router answers and every
// router sees a leader, every router and every engine live in its mesh.
func (f *fleetRun) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ReadyTimeout)
	defer cancel()
	for _, e := range f.l.Engines {
		if err := f.group.WaitReady(ctx, e.ID+" answers /health", supervise.HTTPOK(f.client, e.URL()+"/health")); err != nil {
			return err
		}
		if err := f.group.WaitReady(ctx, e.ID+"'s sidecar answers /healthz",
			supervise.HTTPOK(f.client, "http://"+localfleet.Addr(e.SideMetrics)+"/healthz")); err != nil {
			return err
		}
	}
	for _, r := range f.l.Routers {
		if err := f.group.WaitReady(ctx, r.ID+" answers /readyz", supervise.HTTPOK(f.client, r.AdminURL()+"/readyz")); err != nil {
			return err
		}
		err := f.group.WaitReady(ctx, r.ID+" sees the whole mesh", func(ctx context.Context) error {
			var c clusterView
			if err := f.getJSON(ctx, r.AdminURL()+"/api/v1/cluster", &c); err != nil {
				return err
			}
			live := 0
			for _, e := range c.Engines {
				if e.State != "STALE" {
					live++
				}
			}
			if c.Leader == "" || len(c.Routers) < len(f.l.Routers) || live < len(f.l.Engines) {
				return fmt.Errorf("leader %q, %d routers, %d live engines", c.Leader, len(c.Routers), live)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (f *fleetRun) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+f.admin)
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// engineCounters are the counters bench fleet reads from one engine's
// own /metrics.
type engineCounters struct {
	queries, hits      float64 // vllm:prefix_cache_queries / _hits (tokens)
	requests           float64 // vllm:request_success_total
	ttftSum, ttftCount float64 // vllm:time_to_first_token_seconds (engine time)
}

func (c engineCounters) minus(o engineCounters) engineCounters {
	return engineCounters{c.queries - o.queries, c.hits - o.hits, c.requests - o.requests,
		c.ttftSum - o.ttftSum, c.ttftCount - o.ttftCount}
}

// counters scrapes every engine's counters.
func (f *fleetRun) counters(ctx context.Context) ([]engineCounters, error) {
	out := make([]engineCounters, len(f.l.Engines))
	for i, e := range f.l.Engines {
		m, err := scrape(ctx, f.client, e.URL()+"/metrics")
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.ID, err)
		}
		q, okQ := m["vllm:prefix_cache_queries_total"]
		h, okH := m["vllm:prefix_cache_hits_total"]
		if !okQ || !okH {
			return nil, fmt.Errorf("%s exports no vllm:prefix_cache_queries/hits", e.ID)
		}
		out[i] = engineCounters{queries: q, hits: h, requests: m["vllm:request_success_total"],
			ttftSum: m["vllm:time_to_first_token_seconds_sum"], ttftCount: m["vllm:time_to_first_token_seconds_count"]}
	}
	return out, nil
}

// scrape reads a Prometheus text exposition and sums every sample of each
// metric name over its labels.
func scrape(ctx context.Context, client *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			rest = rest[strings.LastIndexByte(rest, '}')+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out, sc.Err()
}

// measurement is one measured run.
type measurement struct {
	figures Figures
	failed  int
	// client are the figures with TTFT and latency from the client (times
	// Speed), whatever figures holds.
	client Figures
	// engineTTFTMean is the engines' own mean TTFT and clientTTFTMean the
	// client's, in engine ms; pathMean is the mean time from a client's
	// send to its request reaching the engine, in engine ms.
	engineTTFTMean, clientTTFTMean, pathMean float64
	// lateP99 is the 99th percentile of how late the replay sent
	// requests after their scheduled times, in engine ms.
	lateP99 float64
}

// measure starts a fresh fleet in dir, replays the plan through it and
// stops it.
func measure(ctx context.Context, cfg Config, plan Plan, strategy string, routers int, dir string, pred []simfleet.Timing) (measurement, error) {
	var m measurement
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return m, err
	}
	l, err := localfleet.Free(routers, cfg.Engines)
	if err != nil {
		return m, fmt.Errorf("ports: %w", err)
	}
	f := &fleetRun{cfg: cfg, l: l, dir: dir, admin: localfleet.Token(),
		group:  &supervise.Group{Bin: cfg.Bin, LogDir: filepath.Join(dir, "logs")},
		client: &http.Client{Timeout: 5 * time.Second}}
	defer f.group.StopAll(supervise.DefaultGrace)
	if err := f.start(strategy); err != nil {
		return m, err
	}
	if err := f.ready(ctx); err != nil {
		if errs := f.group.LastErrors(); errs != "" {
			err = fmt.Errorf("%w\nlast errors in the logs (%s):\n%s", err, f.group.LogDir, errs)
		}
		return m, err
	}
	before, err := f.counters(ctx)
	if err != nil {
		return m, err
	}
	results := f.replay(ctx, plan)
	if err := ctx.Err(); err != nil {
		return m, err
	}
	after, err := f.counters(ctx)
	if err != nil {
		return m, err
	}
	paths := make([]string, len(l.Engines))
	prompts := make([]int, len(cfg.Requests))
	for j, e := range l.Engines {
		paths[j] = genLogPath(dir, e.ID)
	}
	for i, r := range cfg.Requests {
		prompts[i] = len(r.Tokens)
	}
	ts, err := readGenLogs(paths, results, routers, prompts)
	if err != nil {
		return m, err
	}
	if err := writeTimings(filepath.Join(dir, "requests.csv"), ts, cfg.Speed, pred); err != nil {
		return m, err
	}
	var ttft, e2e, engTTFT, engE2E, path, late []time.Duration
	scale := func(d time.Duration) time.Duration { return time.Duration(float64(d) * cfg.Speed) }
	for _, t := range ts {
		if t.client.Err != "" {
			m.failed++
			continue
		}
		ttft = append(ttft, scale(t.client.TTFT))
		e2e = append(e2e, scale(t.client.Latency))
		if t.engine < 0 {
			return m, fmt.Errorf("request %d was answered but no engine logged it; logs in %s", t.index, dir)
		}
		engTTFT = append(engTTFT, time.Duration(t.eng.FirstToken-t.eng.Arrival))
		engE2E = append(engE2E, time.Duration(t.eng.Finish-t.eng.Arrival))
		path = append(path, scale(time.Unix(0, t.eng.Submitted).Sub(t.sent)))
		late = append(late, scale(t.client.Late))
	}
	if len(ttft) == 0 {
		return m, fmt.Errorf("every request failed (first: %s); logs in %s", results[0].Err, f.group.LogDir)
	}
	var total engineCounters
	for i := range after {
		d := after[i].minus(before[i])
		total = engineCounters{total.queries + d.queries, total.hits + d.hits, total.requests + d.requests,
			total.ttftSum + d.ttftSum, total.ttftCount + d.ttftCount}
		m.figures.PerEngine = append(m.figures.PerEngine, int(d.requests))
	}
	if total.queries > 0 {
		m.figures.HitRate = total.hits / total.queries
	}
	if total.ttftCount > 0 {
		m.engineTTFTMean = 1000 * total.ttftSum / total.ttftCount
	}
	m.clientTTFTMean, m.pathMean, m.lateP99 = mean(ttft), mean(path), percentile(late, 0.99)
	m.client = Figures{HitRate: m.figures.HitRate, TTFTP50: percentile(ttft, 0.5), TTFTP90: percentile(ttft, 0.9),
		E2EP50: percentile(e2e, 0.5), E2EP90: percentile(e2e, 0.9), PerEngine: m.figures.PerEngine}
	m.figures.TTFTP50, m.figures.TTFTP90 = m.client.TTFTP50, m.client.TTFTP90
	m.figures.E2EP50, m.figures.E2EP90 = m.client.E2EP50, m.client.E2EP90
	if cfg.ClientClock {
		m.figures.TTFTP50, m.figures.TTFTP90 = percentile(engTTFT, 0.5), percentile(engTTFT, 0.9)
		m.figures.E2EP50, m.figures.E2EP90 = percentile(engE2E, 0.5), percentile(engE2E, 0.9)
	}
	return m, nil
}

// orderWait bounds how long after sending a request a replayer, with
// Config.ClientClock, holds the next one to the same router for the
// first's response to begin: rolter router sends a stream's headers on
// as soon as the sim's come, and the sim sends them when its engine has
// the request, so the wait is the first request's path (up to about
// 400 ms of wall time on a machine at load average 30, for a 100k-token
// prompt; requests.csv). The stamps keep the schedule.
const orderWait = time.Second

// replay sends request i to router i mod R at its time, stretched to the
// plan's rate in engine time and divided by the engines' speed in wall
// time; the R replayers start together. With Config.ClientClock each
// replayer sends in order (workload.ReplayConfig.InOrder) and stamps each
// request with its scheduled time.
func (f *fleetRun) replay(ctx context.Context, plan Plan) []workload.Result {
	n := len(f.l.Routers)
	parts := make([][]workload.Request, n)
	index := make([][]int, n)
	for i, r := range f.cfg.Requests {
		r.ID = strconv.Itoa(i)
		parts[i%n] = append(parts[i%n], r)
		index[i%n] = append(index[i%n], i)
	}
	client := localfleet.ReplayClient(10 * time.Minute)
	defer client.CloseIdleConnections()
	sentAt := ""
	if f.cfg.ClientClock {
		sentAt = sim.SentAtHeader
	}
	out := make([]workload.Result, len(f.cfg.Requests))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for k, r := range f.l.Routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res := workload.Replay(ctx, workload.ReplayConfig{Target: r.APIURL(), Mode: workload.ModeCompletions,
				Model: model, Speed: f.cfg.Speed / plan.Stretch, Client: client, SentAtHeader: sentAt,
				InOrder: f.cfg.ClientClock, OrderWait: orderWait}, parts[k])
			for j, x := range res {
				out[index[k][j]] = x
			}
		}()
	}
	close(start)
	wg.Wait()
	return out
}
