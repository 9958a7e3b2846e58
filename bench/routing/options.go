package routing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/sim/engine"
	"github.com/rolter/rolter/sim/fleet"
)

// Options are the settings of `rolter bench routing`, as its flags give
// them.
type Options struct {
	Trace, Workload, Strategies, Routers, Arrival, JSON, Plots, PlotLoads string
	Engines, Limit, Parallel, CPUTierBlocks, KVBlocks                     int
	Load                                                                  float64
	Seed                                                                  uint64
	GossipDelay, PeerDelay, ResidencyDelay                                time.Duration
	Mesh, SpreadBatches                                                   bool
	// Burst (--burst, --workload burst) runs the admission benchmark
	// (RunBurst) with the replicas' [admission] thresholds
	// AdmitMaxLoad and AdmitMaxPrefill and the bands' fills AdmitFills
	// (critical,standard,sheddable).
	Burst                         bool
	AdmitMaxLoad, AdmitMaxPrefill uint64
	AdmitFills                    string
}

// RegisterFlags adds the command's flags, with their defaults, to fs.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", "", "Mooncake-format trace (JSON lines) for --workload trace "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.StringVar(&o.Workload, "workload", "trace", "trace, or a synthetic workload: chat, rag, lora or mixed; burst: chat with --burst")
	fs.StringVar(&o.Strategies, "strategies", "", "comma-separated strategies (default: every registered one)")
	fs.StringVar(&o.Routers, "routers", "1,3,8", "comma-separated router replica counts")
	fs.StringVar(&o.Arrival, "arrival", "random", "how requests reach replicas: random (as behind an L4 balancer) or rr (round-robin)")
	fs.StringVar(&o.JSON, "json", "", "write the rows as JSON to this file")
	fs.StringVar(&o.Plots, "plots", "", "write PNG plots to this directory (adds a load sweep)")
	fs.StringVar(&o.PlotLoads, "plot-loads", "0.3,0.5,0.7,0.85", "loads of the TTFT-vs-load sweep (with --plots)")
	fs.IntVar(&o.Engines, "engines", 8, "simulated engines")
	fs.IntVar(&o.Limit, "limit", 2000, "use the first N requests (0: all)")
	fs.IntVar(&o.Parallel, "parallel", runtime.GOMAXPROCS(0), "simulations run at once (results do not depend on it)")
	fs.IntVar(&o.CPUTierBlocks, "lmcache-cpu-blocks", 0, "per-engine LMCache CPU tier in blocks (0: none; lmcache_aware is then neutral)")
	fs.IntVar(&o.KVBlocks, "kv-blocks", 0, "per-engine GPU KV cache in 16-token blocks (0: engine default 28000)")
	fs.Float64Var(&o.Load, "load", 0.7, "arrival rate as a fraction of fleet capacity (see BENCHMARKS.md)")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the strategies' randomness, arrivals and synthetic workloads")
	fs.DurationVar(&o.GossipDelay, "gossip-delay", 250*time.Millisecond, "age of the engine state routers see")
	fs.DurationVar(&o.ResidencyDelay, "kv-delay", 0, "age of the prefix residency routers see (the engines' KV events through the sidecars; 0: --gossip-delay)")
	fs.DurationVar(&o.PeerDelay, "peer-delay", fleet.DefaultPeerDelay, "how late what one router shares or publishes reaches the others (beyond the publish cadence)")
	fs.BoolVar(&o.Mesh, "mesh", true, "replicas share learned prefixes, session pins and in-flight counts as rolter's mesh does (false: engine state only)")
	fs.BoolVar(&o.SpreadBatches, "spread-batches", false, "spread trace requests that share a timestamp uniformly (seeded) up to the next timestamp, instead of arriving at one instant")
	fs.BoolVar(&o.Burst, "burst", false, "admission benchmark: load 0.5 → 1.5 → 0.5 of capacity, a third of the requests per priority band, admission off and on (synthetic workloads; --workload burst is chat)")
	fs.Uint64Var(&o.AdmitMaxLoad, "admit-max-load", 144, "with --burst: [admission] max_engine_load the replicas run with "+
		"(0: off; 144 is 9/16 of the simulated engines' max_num_seqs 256, as docs/admission.md advises)")
	fs.Uint64Var(&o.AdmitMaxPrefill, "admit-max-prefill", admission.DefaultMaxQueuedPrefill,
		"with --burst: [admission] max_queued_prefill_tokens the replicas run with (0: off)")
	fs.StringVar(&o.AdmitFills, "admit-fills", fmt.Sprintf("%g,%g,%g", admission.DefaultCriticalFill, admission.DefaultStandardFill,
		admission.DefaultSheddableFill), "with --burst: the bands' fill (critical,standard,sheddable) the replicas run with")
}

// Run is `rolter bench routing`: it loads the workload, runs the grid of
// strategies × router counts (and the oracle), prints the report to w and
// writes the --json rows and --plots charts; with Burst it runs RunBurst
// instead (its strategies default to power_of_two). Unusable options are
// cli.ErrUsage errors.
func (o Options) Run(ctx context.Context, w io.Writer) error {
	if o.Workload == "burst" {
		o.Workload, o.Burst = "chat", true
	}
	if o.Burst && o.Strategies == "" {
		o.Strategies = "power_of_two"
	}
	names, err := cli.Strategies(o.Strategies)
	if err != nil {
		return err
	}
	routers, err := cli.Counts(o.Routers)
	if err != nil {
		return cli.Usagef("--routers: %v", err)
	}
	if o.Burst {
		return o.runBurst(ctx, names, routers, w)
	}
	arrival := fleet.RoundRobinArrival
	switch o.Arrival {
	case "rr":
	case "random":
		arrival = fleet.RandomArrival
	default:
		return cli.Usagef("--arrival must be rr or random")
	}
	if o.Engines <= 0 || o.Load <= 0 {
		return cli.Usagef("--engines and --load must be positive")
	}
	ecfg := engine.Config{CPUTierBlocks: o.CPUTierBlocks, KVBlocks: o.KVBlocks}
	src, err := LoadSource(SourceOptions{Trace: o.Trace, Workload: o.Workload, Limit: o.Limit,
		Seed: o.Seed, SpreadBatches: o.SpreadBatches})
	if errors.Is(err, ErrWorkload) {
		return cli.Usagef("--workload: %w", err)
	} else if err != nil {
		return err
	}
	capacity := fleet.Capacity(src.Unit, o.Engines, ecfg)
	base := fleet.Config{Engines: o.Engines, Engine: ecfg, GossipDelay: o.GossipDelay, ResidencyDelay: o.ResidencyDelay,
		PeerDelay: o.PeerDelay, Arrival: arrival, Seed: o.Seed, Isolated: !o.Mesh}
	kvDelay := "as gossip"
	if o.ResidencyDelay > 0 {
		kvDelay = o.ResidencyDelay.String()
	}
	fmt.Fprintf(w, "workload: %s, %d requests; fleet: %d engines, capacity %.2f req/s (no-cache service demand); load %.2f → %.2f req/s; gossip delay %v; kv delay %s; peer delay %v; mesh %v\n\n",
		src.Desc, src.Unit.Len(), o.Engines, capacity, o.Load, o.Load*capacity, o.GossipDelay, kvDelay, o.PeerDelay, o.Mesh)

	start := time.Now()
	rows, err := Grid(ctx, src, base, names, routers, o.Load, capacity, o.Parallel)
	if err != nil {
		return err
	}
	Print(w, rows, routers)
	fmt.Fprintf(w, "\n%d simulations in %v\n", len(names)*len(routers)+1, time.Since(start).Round(time.Millisecond))
	if o.JSON != "" {
		if err := cli.WriteJSON(o.JSON, rows); err != nil {
			return err
		}
	}
	if o.Plots != "" {
		loads, err := cli.Values(o.PlotLoads)
		if err != nil {
			return cli.Usagef("--plot-loads: %v", err)
		}
		paths, err := Plots(ctx, o.Plots, src, base, names, routers, rows, loads, capacity, o.Parallel)
		if err != nil {
			return fmt.Errorf("--plots: %w", err)
		}
		fmt.Fprintf(w, "plots: %s\n", strings.Join(paths, ", "))
	}
	return nil
}

// runBurst is Run with Burst: RunBurst on the options, the rows written
// to --json.
func (o Options) runBurst(ctx context.Context, names []string, routers []int, w io.Writer) error {
	fills, err := parseFills(o.AdmitFills)
	if err != nil {
		return cli.Usage(err)
	}
	rows, err := RunBurst(ctx, BurstOptions{Workload: o.Workload, Strategies: names, Routers: routers,
		Engines: o.Engines, Engine: engine.Config{CPUTierBlocks: o.CPUTierBlocks, KVBlocks: o.KVBlocks}, GossipDelay: o.GossipDelay,
		PeerDelay: o.PeerDelay, Seed: o.Seed, Isolated: !o.Mesh, Parallel: o.Parallel,
		Thresholds: admission.Thresholds{MaxLoad: o.AdmitMaxLoad, MaxQueuedPrefill: o.AdmitMaxPrefill}, Fills: fills}, w)
	if errors.Is(err, ErrBurstWorkload) {
		return cli.Usage(err)
	} else if err != nil {
		return err
	}
	if o.JSON != "" {
		return cli.WriteJSON(o.JSON, rows)
	}
	return nil
}

// parseFills reads --admit-fills: three fractions in (0, 1], critical
// first.
func parseFills(s string) (f [admission.NumBands]float64, err error) {
	parts := strings.Split(s, ",")
	if len(parts) != admission.NumBands {
		return f, fmt.Errorf("--admit-fills %q: want critical,standard,sheddable", s)
	}
	for i, p := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v <= 0 || v > 1 {
			return f, fmt.Errorf("--admit-fills %q: %q is not a fraction in (0, 1]", s, p)
		}
		f[admission.Critical-admission.Band(i)] = v
	}
	return f, nil
}
