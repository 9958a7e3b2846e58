package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	benchfleet "github.com/rolter/rolter/bench/fleet"
	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim/workload"
)

// runBenchFleet is `rolter bench fleet`: the fleet simulator's
// predictions checked against real routers, sims and sidecars.
func runBenchFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		trace, strats, routers, jsonPath, dir string
		limit                                 int
		spread                                bool
		cfg                                   benchfleet.Config
	)
	fs := newFlagSet("bench fleet", stderr)
	fs.StringVar(&trace, "trace", "", "Mooncake-format trace (JSON lines) to replay (default: the Mooncake conversation trace embedded in the binary)")
	fs.IntVar(&limit, "limit", 300, "replay the first N requests of the trace")
	fs.IntVar(&cfg.Engines, "engines", 4, "rolter sim engines, each with its rolter sidecar")
	fs.StringVar(&routers, "routers", "1,3", "comma-separated rolter router counts (a Raft cluster and gossip mesh each)")
	fs.StringVar(&strats, "strategies", "round_robin,precise_cache_aware", "comma-separated strategies")
	fs.Float64Var(&cfg.Load, "load", 0.7, "arrival rate as a fraction of fleet capacity, as rolter bench routing --load")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the prediction (its strategies' randomness, as rolter bench routing --seed); the real routers draw their own")
	fs.Float64Var(&cfg.Speed, "speed", 2, "the sims run N times faster than a GPU; client times are multiplied by N")
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", 0, "per-engine GPU KV cache in 16-token blocks (0: engine default)")
	fs.DurationVar(&cfg.GossipDelay, "gossip-delay", 0, "engine-state age the prediction assumes, in engine time, as rolter bench routing --gossip-delay "+
		"(0: the mesh's mean age at this speed, --speed × 225ms)")
	fs.DurationVar(&cfg.PeerDelay, "peer-delay", 0, "router-to-router delay beyond the publish cadence the prediction assumes, in engine time, as rolter bench routing --peer-delay "+
		"(0: what the mesh's wall-clock cadence and delay amount to at this speed, 75ms at --speed 2)")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", 90*time.Second, "give up on a fleet that is not ready by then")
	fs.BoolVar(&spread, "spread-batches", true, "spread trace requests that share a timestamp over the interval to the next one, in order (rolter bench routing --spread-batches, same seed)")
	fs.StringVar(&jsonPath, "json", "", "write one row per (strategy, routers) with measured and predicted figures to this file")
	fs.StringVar(&dir, "dir", "", "keep each run's config, Raft data and logs here (default: a temp dir, removed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("%w: --limit must be positive", errUsage)
	}
	if !localfleet.CgoBuild() {
		return fmt.Errorf("%w: bench fleet needs a cgo build (the sims' KV events use ZMQ)", errUsage)
	}
	var err error
	if cfg.Strategies, err = strategyList(strats); err != nil {
		return err
	}
	if cfg.Routers, err = intList(routers); err != nil {
		return fmt.Errorf("%w: --routers: %v", errUsage, err)
	}
	var in io.Reader = mooncake.Open()
	name := mooncake.Name
	if trace != "" {
		f, err := os.Open(trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer f.Close()
		in, name = f, trace
	}
	recs, err := workload.ReadTrace(in, limit)
	if err != nil {
		return err
	}
	cfg.Requests = workload.FromTrace(recs, false)
	if spread {
		benchrouting.SpreadBatches(cfg.Requests, cfg.Seed)
	}
	if cfg.Bin, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the rolter binary: %w", err)
	}
	cfg.Dir, cfg.Progress = dir, stderr
	fmt.Fprintf(stdout, "bench fleet: trace %s, first %d requests (batches spread %v), %d engines (speed %g), load %.2f, seed %d\n",
		name, len(cfg.Requests), spread, cfg.Engines, cfg.Speed, cfg.Load, cfg.Seed)
	start := time.Now()
	rows, err := benchfleet.Run(ctx, cfg)
	if len(rows) > 0 {
		traceFlag := ""
		if trace != "" {
			traceFlag = "--trace " + trace + " "
		}
		fmt.Fprintf(stdout, "predicted = rolter bench routing %s--limit %d --engines %d --routers %s --strategies %s "+
			"--load %g --seed %d --gossip-delay %v --peer-delay %v --arrival rr --spread-batches=%v --kv-blocks %d\n\n",
			traceFlag, limit, cfg.Engines, routers, strats, cfg.Load, cfg.Seed, rows[0].GossipDelay, rows[0].PeerDelay, spread, cfg.KVBlocks)
		benchfleet.Print(stdout, rows)
		fmt.Fprintf(stdout, "\nagreement: hit rate within %.0f%%, TTFT p50 and p90 within %.0f%% of the prediction; %d of %d rows agree; %v\n",
			100*benchfleet.HitTolerance, 100*benchfleet.TTFTTolerance, agreeing(rows), len(rows), time.Since(start).Round(time.Second))
	}
	if err != nil {
		return err
	}
	if jsonPath != "" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	return nil
}

func agreeing(rows []benchfleet.Row) int {
	n := 0
	for _, r := range rows {
		if r.Agrees() {
			n++
		}
	}
	return n
}
