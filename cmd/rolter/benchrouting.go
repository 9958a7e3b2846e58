package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/fleet"
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
	// burst (--burst, --workload burst) runs the admission benchmark
	// (benchburst.go); admitMaxLoad is its saturation threshold.
	burst           bool
	admitMaxLoad    uint64
	admitMaxPrefill uint64
}

// runBenchRouting is `rolter bench routing` (package bench/routing).
func runBenchRouting(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f routingFlags
	fs := newFlagSet("bench routing", stderr)
	fs.StringVar(&f.trace, "trace", "", "Mooncake-format trace (JSON lines) for --workload trace "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.StringVar(&f.workload, "workload", "trace", "trace, or a synthetic workload: chat, rag, lora or mixed; burst: chat with --burst")
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
	fs.BoolVar(&f.burst, "burst", false, "admission benchmark: load 0.5 → 1.5 → 0.5 of capacity, a third of the requests per priority band, admission off and on (synthetic workloads; --workload burst is chat)")
	fs.Uint64Var(&f.admitMaxLoad, "admit-max-load", 40, "with --burst: [admission] max_engine_load the replicas run with")
	fs.Uint64Var(&f.admitMaxPrefill, "admit-max-prefill", 0, "with --burst: [admission] max_queued_prefill_tokens the replicas run with")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.workload == "burst" {
		f.workload, f.burst = "chat", true
	}
	if f.burst {
		return runBenchBurst(ctx, f, stdout)
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
	src, err := benchrouting.LoadSource(benchrouting.SourceOptions{Trace: f.trace, Workload: f.workload, Limit: f.limit,
		Seed: f.seed, SpreadBatches: f.spreadBatches})
	if errors.Is(err, benchrouting.ErrWorkload) {
		return fmt.Errorf("%w: --workload: %w", errUsage, err)
	} else if err != nil {
		return err
	}
	capacity := fleet.Capacity(src.Unit, f.engines, ecfg)
	base := fleet.Config{Engines: f.engines, Engine: ecfg, GossipDelay: f.gossipDelay, PeerDelay: f.peerDelay, Arrival: arrival, Seed: f.seed,
		Isolated: !f.mesh}
	fmt.Fprintf(stdout, "workload: %s, %d requests; fleet: %d engines, capacity %.2f req/s (no-cache service demand); load %.2f → %.2f req/s; gossip delay %v; peer delay %v; mesh %v\n\n",
		src.Desc, src.Unit.Len(), f.engines, capacity, f.load, f.load*capacity, f.gossipDelay, f.peerDelay, f.mesh)

	start := time.Now()
	rows, err := benchrouting.Grid(ctx, src, base, names, routers, f.load, capacity, f.parallel)
	if err != nil {
		return err
	}
	benchrouting.Print(stdout, rows, routers)
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
		paths, err := benchrouting.Plots(ctx, f.plots, src, base, names, routers, rows, loads, capacity, f.parallel)
		if err != nil {
			return fmt.Errorf("--plots: %w", err)
		}
		fmt.Fprintf(stdout, "plots: %s\n", strings.Join(paths, ", "))
	}
	return nil
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
