package fleet

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim/workload"
)

// Options are the settings of `rolter bench fleet`, as its flags give
// them: a Config, less what Run derives (the requests, the binary), plus
// the trace to read and where to write the rows.
type Options struct {
	Config
	Trace, Strategies, Routers, JSON string
	Limit                            int
	SpreadBatches                    bool
}

// RegisterFlags adds the command's flags, with their defaults, to fs.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", "", "Mooncake-format trace (JSON lines) to replay (default: the Mooncake conversation trace embedded in the binary)")
	fs.IntVar(&o.Limit, "limit", 300, "replay the first N requests of the trace")
	fs.IntVar(&o.Engines, "engines", 4, "rolter sim engines, each with its rolter sidecar")
	fs.StringVar(&o.Routers, "routers", "1,3", "comma-separated rolter router counts (a Raft cluster and gossip mesh each)")
	fs.StringVar(&o.Strategies, "strategies", "round_robin,precise_cache_aware", "comma-separated strategies")
	fs.Float64Var(&o.Load, "load", 0.7, "arrival rate as a fraction of fleet capacity, as rolter bench routing --load")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the prediction (its strategies' randomness, as rolter bench routing --seed); the real routers draw their own")
	fs.Float64Var(&o.Speed, "speed", 2, "the sims run N times faster than a GPU; client times are multiplied by N")
	fs.IntVar(&o.KVBlocks, "kv-blocks", 0, "per-engine GPU KV cache in 16-token blocks (0: engine default)")
	fs.DurationVar(&o.GossipDelay, "gossip-delay", 0, "engine-state age the prediction assumes, in engine time, as rolter bench routing --gossip-delay "+
		"(0: the mesh's mean age at this speed, --speed × 225ms)")
	fs.DurationVar(&o.ResidencyDelay, "kv-delay", 0, "prefix-residency age the prediction assumes, in engine time, as rolter bench routing --kv-delay "+
		"(0: the KV events' mean age at this speed, --speed × 50ms)")
	fs.DurationVar(&o.PeerDelay, "peer-delay", 0, "router-to-router delay beyond the publish cadence the prediction assumes, in engine time, as rolter bench routing --peer-delay "+
		"(0: what the mesh's wall-clock publish gap and hop amount to at this speed, 6ms at --speed 2)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 90*time.Second, "give up on a fleet that is not ready by then")
	fs.BoolVar(&o.SpreadBatches, "spread-batches", true, "spread trace requests that share a timestamp over the interval to the next one, in order (rolter bench routing --spread-batches, same seed)")
	fs.BoolVar(&o.ClientClock, "client-clock", true, "the sims take each request's arrival from the client's send time (rolter sim --client-clock) "+
		"and TTFT is read from their generation logs; false: requests arrive when their HTTP path delivers them and TTFT is the client's, times --speed")
	fs.StringVar(&o.JSON, "json", "", "write one row per (strategy, routers) with measured and predicted figures to this file")
	fs.StringVar(&o.Dir, "dir", "", "keep each run's config, Raft data and logs here (default: a temp dir, removed)")
}

// Run is `rolter bench fleet`: it reads the trace, runs the fleets of
// rolter binaries (this executable) with progress on stderr, and prints
// each row with its prediction and the agreement to stdout. Unusable
// options are cli.ErrUsage errors.
func (o Options) Run(ctx context.Context, stdout, stderr io.Writer) error {
	if o.Limit <= 0 {
		return cli.Usagef("--limit must be positive")
	}
	if !localfleet.CgoBuild() {
		return cli.Usagef("bench fleet needs a cgo build (the sims' KV events use ZMQ)")
	}
	cfg := o.Config
	var err error
	if cfg.Strategies, err = cli.Strategies(o.Strategies); err != nil {
		return err
	}
	if cfg.Routers, err = cli.Counts(o.Routers); err != nil {
		return cli.Usagef("--routers: %v", err)
	}
	var in io.Reader = mooncake.Open()
	name := mooncake.Name
	if o.Trace != "" {
		f, err := os.Open(o.Trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		defer f.Close()
		in, name = f, o.Trace
	}
	recs, err := workload.ReadTrace(in, o.Limit)
	if err != nil {
		return err
	}
	cfg.Requests = workload.FromTrace(recs, false)
	if o.SpreadBatches {
		benchrouting.SpreadBatches(cfg.Requests, cfg.Seed)
	}
	if cfg.Bin, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the rolter binary: %w", err)
	}
	cfg.Progress = stderr
	fmt.Fprintf(stdout, "bench fleet: trace %s, first %d requests (batches spread %v), %d engines (speed %g), load %.2f, seed %d\n",
		name, len(cfg.Requests), o.SpreadBatches, cfg.Engines, cfg.Speed, cfg.Load, cfg.Seed)
	start := time.Now()
	rows, err := Run(ctx, cfg)
	if len(rows) > 0 {
		traceFlag := ""
		if o.Trace != "" {
			traceFlag = "--trace " + o.Trace + " "
		}
		fmt.Fprintf(stdout, "predicted = rolter bench routing %s--limit %d --engines %d --routers %s --strategies %s "+
			"--load %g --seed %d --gossip-delay %v --kv-delay %v --peer-delay %v --arrival rr --spread-batches=%v --kv-blocks %d\n\n",
			traceFlag, o.Limit, cfg.Engines, o.Routers, o.Strategies, cfg.Load, cfg.Seed, rows[0].GossipDelay, rows[0].ResidencyDelay, rows[0].PeerDelay,
			o.SpreadBatches, cfg.KVBlocks)
		Print(stdout, rows)
		agree := 0
		for _, r := range rows {
			if r.Agrees() {
				agree++
			}
		}
		fmt.Fprintf(stdout, "\nagreement: hit rate within %.0f%%, TTFT p50 and p90 within %.0f%% of the prediction; %d of %d rows agree; %v\n",
			100*HitTolerance, 100*TTFTTolerance, agree, len(rows), time.Since(start).Round(time.Second))
	}
	if err != nil {
		return err
	}
	if o.JSON != "" {
		return cli.WriteJSON(o.JSON, rows)
	}
	return nil
}
