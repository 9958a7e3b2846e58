package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/strategies"
)

// routingFlags are the options of `rolter bench routing`.
type routingFlags struct {
	trace, workload, strategies, routers, arrival, jsonPath, plots, plotLoads string
	engines, limit, parallel, cpuTier, kvBlocks                               int
	load                                                                      float64
	seed                                                                      uint64
	gossipDelay, peerDelay                                                    time.Duration
	mesh, spreadBatches                                                       bool
}

// routingRow is one line of the routing report (and of --json).
type routingRow struct {
	Strategy      string             `json:"strategy"`
	Routers       int                `json:"routers"`
	Load          float64            `json:"load"`
	HitRate       float64            `json:"hit_rate"`
	TTFTP50       float64            `json:"ttft_p50_ms"`
	TTFTP90       float64            `json:"ttft_p90_ms"`
	TTFTP99       float64            `json:"ttft_p99_ms"`
	E2EP50        float64            `json:"e2e_p50_ms"`
	E2EP99        float64            `json:"e2e_p99_ms"`
	Throughput    float64            `json:"throughput_tok_s"`
	Imbalance     float64            `json:"imbalance"`
	Failed        int                `json:"failed,omitempty"`
	VsRoundRobin  map[string]float64 `json:"vs_round_robin,omitempty"`
	VsOracle      map[string]float64 `json:"vs_oracle,omitempty"`
	PerEngineReqs []int              `json:"per_engine_requests"`
}

func (r routingRow) metrics() []float64 {
	return []float64{r.HitRate, r.TTFTP50, r.TTFTP90, r.TTFTP99, r.E2EP50, r.E2EP99, r.Throughput, r.Imbalance}
}

var metricNames = []string{"hit_rate", "ttft_p50", "ttft_p90", "ttft_p99", "e2e_p50", "e2e_p99", "throughput", "imbalance"}

// runBenchRouting is `rolter bench routing`.
func runBenchRouting(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f routingFlags
	fs := newFlagSet("bench routing", stderr)
	fs.StringVar(&f.trace, "trace", "", "Mooncake-format trace (JSON lines) for --workload trace "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.StringVar(&f.workload, "workload", "trace", "trace, or a synthetic workload: chat, rag, lora or mixed")
	fs.StringVar(&f.strategies, "strategies", "", "comma-separated strategies (default: every registered one)")
	fs.StringVar(&f.routers, "routers", "1,3,8", "comma-separated router replica counts")
	fs.StringVar(&f.arrival, "arrival", "random", "how requests reach replicas: random (as behind an L4 balancer) or rr (round-robin)")
	fs.StringVar(&f.jsonPath, "json", "", "write the rows as JSON to this file")
	fs.StringVar(&f.plots, "plots", "", "write PNG plots to this directory (adds a load sweep)")
	fs.StringVar(&f.plotLoads, "plot-loads", "0.3,0.5,0.7,0.85", "loads of the TTFT-vs-load sweep (with --plots)")
	fs.IntVar(&f.engines, "engines", 8, "simulated engines")
	fs.IntVar(&f.limit, "limit", 2000, "use the first N requests (0: all)")
	fs.IntVar(&f.parallel, "parallel", runtime.GOMAXPROCS(0), "simulations run at once (results do not depend on it)")
	fs.IntVar(&f.cpuTier, "lmcache-cpu-blocks", 0, "per-engine LMCache CPU tier in blocks (0: none; lmcache_aware is then neutral)")
	fs.IntVar(&f.kvBlocks, "kv-blocks", 0, "per-engine GPU KV cache in 16-token blocks (0: engine default 28000)")
	fs.Float64Var(&f.load, "load", 0.7, "arrival rate as a fraction of fleet capacity (see BENCHMARKS.md)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the strategies' randomness, arrivals and synthetic workloads")
	fs.DurationVar(&f.gossipDelay, "gossip-delay", 250*time.Millisecond, "age of the engine state routers see")
	fs.DurationVar(&f.peerDelay, "peer-delay", fleet.DefaultPeerDelay, "how late what one router shares or publishes reaches the others (beyond the publish cadence)")
	fs.BoolVar(&f.mesh, "mesh", true, "replicas share learned prefixes, session pins and in-flight counts as rolter's mesh does (false: engine state only)")
	fs.BoolVar(&f.spreadBatches, "spread-batches", false, "spread trace requests that share a timestamp uniformly (seeded) up to the next timestamp, instead of arriving at one instant")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	names, err := strategyList(f.strategies)
	if err != nil {
		return err
	}
	routers, err := intList(f.routers)
	if err != nil {
		return fmt.Errorf("%w: --routers: %v", errUsage, err)
	}
	arrival := fleet.RoundRobinArrival
	switch f.arrival {
	case "rr":
	case "random":
		arrival = fleet.RandomArrival
	default:
		return fmt.Errorf("%w: --arrival must be rr or random", errUsage)
	}
	if f.engines <= 0 || f.load <= 0 {
		return fmt.Errorf("%w: --engines and --load must be positive", errUsage)
	}
	ecfg := engine.Config{CPUTierBlocks: f.cpuTier, KVBlocks: f.kvBlocks}
	src, err := loadFleetWorkload(f)
	if err != nil {
		return err
	}
	capacity := fleet.Capacity(src.unit, f.engines, ecfg)
	base := fleet.Config{Engines: f.engines, Engine: ecfg, GossipDelay: f.gossipDelay, PeerDelay: f.peerDelay, Arrival: arrival, Seed: f.seed,
		Isolated: !f.mesh}
	fmt.Fprintf(stdout, "workload: %s, %d requests; fleet: %d engines, capacity %.2f req/s (no-cache service demand); load %.2f → %.2f req/s; gossip delay %v; peer delay %v; mesh %v\n\n",
		src.desc, src.unit.Len(), f.engines, capacity, f.load, f.load*capacity, f.gossipDelay, f.peerDelay, f.mesh)

	start := time.Now()
	rows, err := routingGrid(ctx, src, base, names, routers, f.load, capacity, f.parallel)
	if err != nil {
		return err
	}
	printRouting(stdout, rows, routers)
	fmt.Fprintf(stdout, "\n%d simulations in %v\n", len(names)*len(routers)+1, time.Since(start).Round(time.Millisecond))
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if f.plots != "" {
		loads, err := floatList(f.plotLoads)
		if err != nil {
			return fmt.Errorf("%w: --plot-loads: %v", errUsage, err)
		}
		if err := routingPlots(ctx, stdout, f.plots, src, base, names, routers, rows, loads, capacity, f.parallel); err != nil {
			return err
		}
	}
	return nil
}

// fleetSource gives the workload to simulate at a target arrival rate. A
// trace is rescaled in time by the simulator (Config.Rate), keeping its
// burst pattern. A synthetic workload is generated at that rate instead,
// so its think times between a session's turns stay as designed.
type fleetSource struct {
	desc string
	// unit is the workload as recorded (trace) or at 1 request/s
	// (synthetic); capacity is computed on it.
	unit *fleet.Workload
	gen  func(rate float64) ([]workload.Request, error) // nil for a trace
}

// at returns the workload for rate and the Config.Rate to run it with.
func (s fleetSource) at(rate float64) (*fleet.Workload, float64, error) {
	if s.gen == nil {
		return s.unit, rate, nil
	}
	reqs, err := s.gen(rate)
	if err != nil {
		return nil, 0, err
	}
	w, err := fleet.Prepare(fleet.FromWorkload(reqs), engine.DefaultConfig.BlockSize)
	return w, 0, err
}

// loadFleetWorkload reads the trace or sets up the synthetic generator.
func loadFleetWorkload(f routingFlags) (fleetSource, error) {
	n := f.limit
	if n <= 0 {
		n = 2000
	}
	var src fleetSource
	switch f.workload {
	case "trace":
		var in io.Reader = mooncake.Open()
		src.desc = "trace " + mooncake.Name
		if f.trace != "" {
			file, err := os.Open(f.trace)
			if err != nil {
				return src, fmt.Errorf("--trace: %w", err)
			}
			defer file.Close()
			in, src.desc = file, "trace "+f.trace
		}
		recs, err := workload.ReadTrace(in, f.limit)
		if err != nil {
			return src, err
		}
		reqs := workload.FromTrace(recs, false)
		if f.spreadBatches {
			spreadBatches(reqs, f.seed)
			src.desc += " (batches spread)"
		}
		src.unit, err = fleet.Prepare(fleet.FromWorkload(reqs), engine.DefaultConfig.BlockSize)
		return src, err
	case "chat", "rag", "lora":
		src.desc = "synthetic " + f.workload
		src.gen = func(rate float64) ([]workload.Request, error) { return workload.Synthetic(f.workload, f.seed, n, rate) }
	case "mixed":
		src.desc = "synthetic mixed (chat + rag + lora)"
		src.gen = func(rate float64) ([]workload.Request, error) {
			var reqs []workload.Request
			for i, name := range []string{"chat", "rag", "lora"} {
				part, err := workload.Synthetic(name, f.seed+uint64(i), (n+2)/3, rate/3)
				if err != nil {
					return nil, err
				}
				reqs = append(reqs, part...)
			}
			slices.SortStableFunc(reqs, func(a, b workload.Request) int { return cmp.Compare(a.At, b.At) })
			return reqs, nil
		}
	default:
		return src, fmt.Errorf("%w: --workload must be trace, chat, rag, lora or mixed", errUsage)
	}
	var err error
	src.unit, _, err = src.at(1)
	return src, err
}

// spreadBatches moves the requests of each run sharing one send time to
// uniformly drawn times between it and the next distinct send time (the
// Mooncake trace records arrivals in 3 s batches), keeping their order.
func spreadBatches(reqs []workload.Request, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := 0; i < len(reqs); {
		j := i
		for j < len(reqs) && reqs[j].At == reqs[i].At {
			j++
		}
		if j < len(reqs) {
			gap := reqs[j].At - reqs[i].At
			offs := make([]time.Duration, j-i)
			for k := range offs {
				offs[k] = time.Duration(rng.Int64N(int64(gap)))
			}
			slices.Sort(offs)
			for k := range offs {
				reqs[i+k].At += offs[k]
			}
		}
		i = j
	}
}

// routingGrid runs every strategy at every replica count, and the oracle
// once (it has no replicas to disagree), in parallel; the rows come back
// in a fixed order with ratios filled in.
func routingGrid(ctx context.Context, src fleetSource, base fleet.Config, names []string, routers []int,
	load, capacity float64, parallel int) ([]routingRow, error) {
	w, rate, err := src.at(load * capacity)
	if err != nil {
		return nil, err
	}
	var jobs []simJob
	o := base
	o.Strategy, o.Routers, o.Rate = fleet.Oracle, 1, rate
	jobs = append(jobs, simJob{o, w})
	for _, r := range routers {
		for _, n := range names {
			c := base
			c.Strategy, c.Routers, c.Rate = n, r, rate
			jobs = append(jobs, simJob{c, w})
		}
	}
	results, err := runAll(ctx, jobs, parallel)
	if err != nil {
		return nil, err
	}
	var rows []routingRow
	oracle := toRow(results[0], load)
	for _, r := range routers {
		row := oracle
		row.Routers = r
		rows = append(rows, row)
		for _, res := range results[1:] {
			if res.Routers == r {
				rows = append(rows, toRow(res, load))
			}
		}
	}
	addRatios(rows)
	return rows, nil
}

// simJob is one simulation: a config and the (shared, read-only) workload.
type simJob struct {
	cfg fleet.Config
	w   *fleet.Workload
}

// runAll runs the jobs on `parallel` goroutines; result i is job i's.
func runAll(ctx context.Context, jobs []simJob, parallel int) ([]fleet.Result, error) {
	results := make([]fleet.Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i], errs[i] = fleet.Run(ctx, jobs[i].cfg, jobs[i].w)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	return results, errors.Join(errs...)
}

func toRow(r fleet.Result, load float64) routingRow {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return routingRow{Strategy: r.Strategy, Routers: r.Routers, Load: load, HitRate: r.HitRate,
		TTFTP50: ms(r.TTFT.P50), TTFTP90: ms(r.TTFT.P90), TTFTP99: ms(r.TTFT.P99),
		E2EP50: ms(r.E2E.P50), E2EP99: ms(r.E2E.P99), Throughput: r.Throughput, Imbalance: r.Imbalance,
		Failed: r.Failed, PerEngineReqs: r.PerEngine}
}

// addRatios divides every metric by round_robin's and the oracle's at the
// same replica count.
func addRatios(rows []routingRow) {
	ref := func(name string, routers int) (routingRow, bool) {
		for _, r := range rows {
			if r.Strategy == name && r.Routers == routers {
				return r, true
			}
		}
		return routingRow{}, false
	}
	ratio := func(r, b routingRow) map[string]float64 {
		m := map[string]float64{}
		bm := b.metrics()
		for i, v := range r.metrics() {
			if bm[i] != 0 {
				m[metricNames[i]] = v / bm[i]
			}
		}
		return m
	}
	for i := range rows {
		if b, ok := ref("round_robin", rows[i].Routers); ok {
			rows[i].VsRoundRobin = ratio(rows[i], b)
		}
		if b, ok := ref(fleet.Oracle, rows[i].Routers); ok {
			rows[i].VsOracle = ratio(rows[i], b)
		}
	}
}

func printRouting(w io.Writer, rows []routingRow, routers []int) {
	for _, r := range routers {
		fmt.Fprintf(w, "routers=%d\n", r)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "strategy\thit%\tttft p50\tp90\tp99 ms\te2e p50\tp99 ms\ttok/s\timbal\t│ hit/rr\tp90/rr\t│ hit/or\tp90/or\tp99/or\t")
		for _, row := range rows {
			if row.Routers != r {
				continue
			}
			fmt.Fprintf(tw, "%s\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t│ %.2f\t%.2f\t│ %.2f\t%.2f\t%.2f\t\n",
				row.Strategy, 100*row.HitRate, row.TTFTP50, row.TTFTP90, row.TTFTP99, row.E2EP50, row.E2EP99,
				row.Throughput, row.Imbalance, row.VsRoundRobin["hit_rate"], row.VsRoundRobin["ttft_p90"],
				row.VsOracle["hit_rate"], row.VsOracle["ttft_p90"], row.VsOracle["ttft_p99"])
		}
		tw.Flush()
		fmt.Fprintln(w)
	}
}

func strategyList(s string) ([]string, error) {
	if s == "" {
		return strategies.Names(), nil
	}
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if !strategies.Known(n) {
			return nil, fmt.Errorf("%w: unknown strategy %q (known: %s)", errUsage, n, strings.Join(strategies.Names(), ", "))
		}
		out = append(out, n)
	}
	return out, nil
}

func intList(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad count %q", p)
		}
		out = append(out, v)
	}
	return out, nil
}

func floatList(s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("bad value %q", p)
		}
		out = append(out, v)
	}
	return out, nil
}

// routingPlots writes ttft_p90_vs_load.png (a load sweep at the largest
// replica count) and hit_rate_vs_routers.png (from rows) into dir.
func routingPlots(ctx context.Context, stdout io.Writer, dir string, src fleetSource, base fleet.Config, names []string,
	routers []int, rows []routingRow, loads []float64, capacity float64, parallel int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--plots: %w", err)
	}
	rmax := routers[len(routers)-1]
	all := append([]string{fleet.Oracle}, names...)
	var jobs []simJob
	for _, l := range loads {
		w, rate, err := src.at(l * capacity)
		if err != nil {
			return err
		}
		for _, n := range all {
			c := base
			c.Strategy, c.Routers, c.Rate = n, rmax, rate
			jobs = append(jobs, simJob{c, w})
		}
	}
	results, err := runAll(ctx, jobs, parallel)
	if err != nil {
		return err
	}
	var ttft []series
	for i, n := range all {
		s := series{name: n}
		for j, l := range loads {
			s.x = append(s.x, l)
			s.y = append(s.y, float64(results[j*len(all)+i].TTFT.P90.Milliseconds()))
		}
		ttft = append(ttft, s)
	}
	p1 := filepath.Join(dir, "ttft_p90_vs_load.png")
	if err := lineChart(p1, fmt.Sprintf("TTFT p90 vs load (%d engines, %d routers)", base.Engines, rmax),
		"load (fraction of no-cache capacity)", "TTFT p90 ms (log)", ttft, true); err != nil {
		return err
	}
	var hits []series
	for _, n := range all {
		s := series{name: n}
		for _, r := range rows {
			if r.Strategy == n {
				s.x = append(s.x, float64(r.Routers))
				s.y = append(s.y, 100*r.HitRate)
			}
		}
		hits = append(hits, s)
	}
	p2 := filepath.Join(dir, "hit_rate_vs_routers.png")
	if err := lineChart(p2, fmt.Sprintf("prefix-cache hit rate vs router replicas (load %.2f)", rows[0].Load),
		"router replicas", "hit rate % (tokens)", hits, false); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "plots: %s, %s\n", p1, p2)
	return nil
}

type series struct {
	name string
	x, y []float64
}

var palette = []color.RGBA{
	{0, 0, 0, 255}, {31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255},
	{23, 190, 207, 255}, {0, 0, 128, 255}, {128, 0, 0, 255}, {0, 128, 128, 255}, {128, 128, 0, 255},
}

// lineChart draws the series as lines with point markers, axes with tick
// labels and a legend, and writes a PNG.
func lineChart(path, title, xlabel, ylabel string, ss []series, logY bool) error {
	const wd, ht, left, right, top, bottom = 1000, 600, 70, 210, 40, 50
	img := image.NewRGBA(image.Rect(0, 0, wd, ht))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	ty := func(v float64) float64 {
		if logY {
			return math.Log10(math.Max(v, 1))
		}
		return v
	}
	for _, s := range ss {
		for i := range s.x {
			xmin, xmax = math.Min(xmin, s.x[i]), math.Max(xmax, s.x[i])
			ymin, ymax = math.Min(ymin, ty(s.y[i])), math.Max(ymax, ty(s.y[i]))
		}
	}
	if math.IsInf(xmin, 0) {
		return fmt.Errorf("plot %s: no data", path)
	}
	if !logY {
		ymin = math.Min(ymin, 0)
	}
	if xmax == xmin {
		xmax = xmin + 1
	}
	if ymax == ymin {
		ymax = ymin + 1
	}
	pad := (ymax - ymin) * 0.05
	ymin, ymax = ymin-pad, ymax+pad
	pw, ph := float64(wd-left-right), float64(ht-top-bottom)
	px := func(x float64) int { return left + int((x-xmin)/(xmax-xmin)*pw) }
	py := func(y float64) int { return top + int((1-(y-ymin)/(ymax-ymin))*ph) }
	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ {
		yv := ymin + (ymax-ymin)*float64(i)/5
		y := py(yv)
		line(img, left, y, wd-right, y, grey, 1)
		label := strconv.FormatFloat(yv, 'f', 1, 64)
		if logY {
			label = strconv.FormatFloat(math.Pow(10, yv), 'f', 0, 64)
		}
		text(img, 4, y+4, label, black)
		xv := xmin + (xmax-xmin)*float64(i)/5
		x := px(xv)
		line(img, x, top, x, ht-bottom, grey, 1)
		text(img, x-12, ht-bottom+16, strconv.FormatFloat(xv, 'f', 2, 64), black)
	}
	line(img, left, ht-bottom, wd-right, ht-bottom, black, 1)
	line(img, left, top, left, ht-bottom, black, 1)
	text(img, left, 20, title, black)
	text(img, left+int(pw/2)-len(xlabel)*3, ht-10, xlabel, black)
	text(img, 4, top-8, ylabel, black)
	for i, s := range ss {
		c := palette[i%len(palette)]
		width := 2
		if s.name == fleet.Oracle {
			width = 4
		}
		for j := range s.x {
			x, y := px(s.x[j]), py(ty(s.y[j]))
			fill(img, x-3, y-3, x+3, y+3, c)
			if j > 0 {
				line(img, px(s.x[j-1]), py(ty(s.y[j-1])), x, y, c, width)
			}
		}
		ly := top + 10 + i*18
		fill(img, wd-right+10, ly-6, wd-right+30, ly, c)
		text(img, wd-right+36, ly, s.name, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return f.Close()
}

func fill(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	draw.Draw(img, image.Rect(x0, y0, x1, y1), &image.Uniform{c}, image.Point{}, draw.Src)
}

// line draws a segment of the given width (Bresenham, square pen).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, width int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		fill(img, x0-width/2, y0-width/2, x0-width/2+width, y0-width/2+width, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else {
			e += dx
			y0 += sy
		}
	}
}

func text(img *image.RGBA, x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}
