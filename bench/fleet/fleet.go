package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/rolter/rolter/router/meshstate"
	"github.com/rolter/rolter/sim/engine"
	simfleet "github.com/rolter/rolter/sim/fleet"
	"github.com/rolter/rolter/sim/workload"
	"github.com/rolter/rolter/strategies"
)

// Config is one `rolter bench fleet`.
type Config struct {
	// Bin is the rolter executable the children run.
	Bin string
	// Requests are replayed in order at their At times, rescaled to Load;
	// their prompts must be token ids (a trace's).
	Requests   []workload.Request
	Engines    int
	Routers    []int
	Strategies []string
	// Load is the arrival rate as a fraction of the fleet's no-cache
	// capacity (sim/fleet.Capacity), as `rolter bench routing --load`.
	Load float64
	Seed uint64
	// Speed is every sim's --speed: engine time runs Speed times faster
	// than the wall clock, and client times are multiplied by it.
	Speed float64
	// KVBlocks is each engine's GPU KV cache in blocks (0: the default).
	KVBlocks int
	// GossipDelay is the engine-state age the prediction assumes, in
	// engine time, as `rolter bench routing --gossip-delay`; 0 derives it
	// from Speed (MeshStaleness × Speed).
	GossipDelay time.Duration
	// ResidencyDelay is the prefix-residency age the prediction assumes,
	// in engine time, as `rolter bench routing --kv-delay`; 0 derives it
	// from Speed (ResidencyStaleness × Speed).
	ResidencyDelay time.Duration
	// PeerDelay is how late, beyond meshstate's publish cadence, what one
	// router publishes reaches the others in the prediction, in engine
	// time, as `rolter bench routing --peer-delay`; 0 derives it from
	// Speed (see PeerDelayAt).
	PeerDelay time.Duration
	// ClientClock runs the sims with --client-clock: a request arrives at
	// its engine, on the engine's clock, at its scheduled send time, each
	// replayer sends its router's requests in order (the next only once
	// the previous one's response has begun), and the measured TTFT and
	// latency are the engines' own per-request figures (generation logs)
	// from that arrival. Without it a request arrives when its HTTP path
	// (client, router, sim server) delivers it, the sends follow the
	// schedule alone, and TTFT is the client's, multiplied by Speed.
	ClientClock bool
	// Dir holds each run's config, Raft data and logs ("": a temp dir,
	// removed at the end).
	Dir string
	// ReadyTimeout bounds each fleet's start.
	ReadyTimeout time.Duration
	// Progress, when set, receives a line per step.
	Progress io.Writer
}

// MeshStaleness is the mean age, in wall time, of the engine queue a
// router folds into its load: the sidecar scrapes the engine every 200 ms
// (rolter sidecar --scrape-interval) and sends its status every 250 ms
// (cluster/mesh's StatusInterval), so on average half of each. The real
// fleet runs Speed times faster than the engines' clock while the mesh
// keeps wall-clock intervals, so in engine time the routers' view is
// Speed × MeshStaleness old; the prediction assumes the same.
const MeshStaleness = 225 * time.Millisecond

// ResidencyStaleness is the mean age, in wall time, of the prefix
// residency a router reads: an engine's KV events reach its sidecar at
// once (ZMQ), the sidecar hands its tracker's changes to the mesh every
// 50 ms (rolter sidecar's FlushInterval), and the mesh publisher batches
// them for another 50 ms (cluster/mesh SidecarConfig.FlushInterval)
// before the datagram goes out, so on average half of each. It is not
// MeshStaleness: residency does not wait for the scrape or the status
// period. In engine time the routers' view is Speed × ResidencyStaleness
// old.
const ResidencyStaleness = 50 * time.Millisecond

// PeerDelayAt is the prediction's PeerDelay for engines at speed: a
// router publishes a change meshstate.PublishGap after it happened and
// the publication takes sim/fleet.DefaultPeerDelay (meshstate.PeerHop) to
// arrive, so a peer sees it PublishGap + DefaultPeerDelay late in wall
// time, speed times that in engine time. The simulated routers wait the
// same PublishGap on the engines' clock, so the rest is PeerDelay:
// speed × (PublishGap + DefaultPeerDelay) − PublishGap (DefaultPeerDelay
// itself at speed 1).
func PeerDelayAt(speed float64) time.Duration {
	gap := meshstate.PublishGap
	return max(time.Duration(speed*float64(gap+simfleet.DefaultPeerDelay))-gap, 0)
}

// ErrConfig marks an unusable Config.
var ErrConfig = errors.New("bench fleet: bad config")

func (c *Config) validate() error {
	switch {
	case c.Bin == "":
		return fmt.Errorf("%w: no rolter binary", ErrConfig)
	case len(c.Requests) == 0:
		return fmt.Errorf("%w: no requests", ErrConfig)
	case c.Engines <= 0 || len(c.Routers) == 0 || len(c.Strategies) == 0:
		return fmt.Errorf("%w: need engines, router counts and strategies", ErrConfig)
	case c.Load <= 0 || c.Speed <= 0:
		return fmt.Errorf("%w: load and speed must be positive", ErrConfig)
	}
	for _, r := range c.Routers {
		if r <= 0 {
			return fmt.Errorf("%w: router count %d", ErrConfig, r)
		}
	}
	for _, s := range c.Strategies {
		if !strategies.Known(s) {
			return fmt.Errorf("%w: %w %q", ErrConfig, strategies.ErrUnknownStrategy, s)
		}
	}
	for i, r := range c.Requests {
		if len(r.Tokens) == 0 {
			return fmt.Errorf("%w: request %d has no token ids", ErrConfig, i)
		}
	}
	if c.GossipDelay <= 0 {
		c.GossipDelay = time.Duration(c.Speed * float64(MeshStaleness))
	}
	if c.ResidencyDelay <= 0 {
		c.ResidencyDelay = time.Duration(c.Speed * float64(ResidencyStaleness))
	}
	if c.PeerDelay <= 0 {
		c.PeerDelay = PeerDelayAt(c.Speed)
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 90 * time.Second
	}
	return nil
}

func (c *Config) engineConfig() engine.Config { return engine.Config{KVBlocks: c.KVBlocks} }

func (c *Config) progress(format string, args ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, format+"\n", args...)
	}
}

// Plan is what the runs share: the prepared workload, the fleet's
// capacity and the arrival rate it implies, in engine time.
type Plan struct {
	Workload *simfleet.Workload
	// Capacity is the fleet's no-cache capacity in requests/s; Rate is
	// Load × Capacity.
	Capacity, Rate float64
	// Stretch multiplies recorded arrival offsets into engine time.
	Stretch float64
}

// NewPlan prepares cfg's requests as `rolter bench routing` does.
func NewPlan(cfg Config) (Plan, error) {
	w, err := simfleet.Prepare(simfleet.FromWorkload(cfg.Requests), engine.DefaultConfig.BlockSize)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Workload: w, Capacity: simfleet.Capacity(w, cfg.Engines, cfg.engineConfig())}
	p.Rate = cfg.Load * p.Capacity
	p.Stretch = 1
	if rec := w.RecordedRate(); rec > 0 && p.Rate > 0 {
		p.Stretch = rec / p.Rate
	}
	return p, nil
}

// Predict is sim/fleet's run of strategy over R routers: the
// configuration `rolter bench routing --engines E --load L --seed S
// --gossip-delay D --kv-delay V --peer-delay P --arrival rr --kv-blocks K` simulates
// (the replay spreads requests over the routers round-robin, so the
// prediction does).
func Predict(ctx context.Context, cfg Config, plan Plan, strategy string, routers int) (Figures, error) {
	res, err := predict(ctx, cfg, plan, strategy, routers)
	if err != nil {
		return Figures{}, err
	}
	return Figures{HitRate: res.HitRate, TTFTP50: ms(res.TTFT.P50), TTFTP90: ms(res.TTFT.P90),
		E2EP50: ms(res.E2E.P50), E2EP90: ms(res.E2E.P90), PerEngine: res.PerEngine}, nil
}

// predict is Predict's simulation, every request's timing included.
func predict(ctx context.Context, cfg Config, plan Plan, strategy string, routers int) (simfleet.Result, error) {
	return simfleet.Run(ctx, simfleet.Config{Strategy: strategy, Engines: cfg.Engines, Routers: routers,
		Engine: cfg.engineConfig(), GossipDelay: cfg.GossipDelay, ResidencyDelay: cfg.ResidencyDelay, PeerDelay: cfg.PeerDelay, Rate: plan.Rate,
		Arrival: simfleet.RoundRobinArrival, Seed: cfg.Seed}, plan.Workload)
}

// Run measures and predicts every (strategy, routers) of cfg, router
// count by router count, and returns the rows in that order.
func Run(ctx context.Context, cfg Config) ([]Row, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	plan, err := NewPlan(cfg)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rolter-bench-fleet-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	cfg.progress("bench fleet: %d requests, %d engines, capacity %.2f req/s, load %.2f → %.2f req/s (engine time), speed %g, prediction's gossip delay %v, kv delay %v and peer delay %v, client clock %v, work dir %s",
		len(cfg.Requests), cfg.Engines, plan.Capacity, cfg.Load, plan.Rate, cfg.Speed, cfg.GossipDelay, cfg.ResidencyDelay, cfg.PeerDelay, cfg.ClientClock, dir)
	var rows []Row
	for _, r := range cfg.Routers {
		for _, s := range cfg.Strategies {
			row := Row{Strategy: s, Routers: r, Requests: len(cfg.Requests), GossipDelay: cfg.GossipDelay,
				ResidencyDelay: cfg.ResidencyDelay, PeerDelay: cfg.PeerDelay}
			pred, err := predict(ctx, cfg, plan, s, r)
			if err != nil {
				return rows, fmt.Errorf("bench fleet: predicting %s with %d routers: %w", s, r, err)
			}
			row.Predicted = Figures{HitRate: pred.HitRate, TTFTP50: ms(pred.TTFT.P50), TTFTP90: ms(pred.TTFT.P90),
				E2EP50: ms(pred.E2E.P50), E2EP90: ms(pred.E2E.P90), PerEngine: pred.PerEngine}
			start := time.Now()
			m, err := measure(ctx, cfg, plan, s, r, filepath.Join(dir, fmt.Sprintf("%s-r%d", s, r)), pred.Timings)
			if err != nil {
				return rows, fmt.Errorf("bench fleet: %s with %d routers: %w", s, r, err)
			}
			row.Measured, row.Failed, row.EngineTTFTMean, row.Wall = m.figures, m.failed, m.engineTTFTMean, time.Since(start)
			row.ClientTTFTMean, row.Client, row.RequestPath, row.LateP99 = m.clientTTFTMean, m.client, m.pathMean, m.lateP99
			cfg.progress("bench fleet: %s R=%d measured hit %.1f%% ttft p50 %.0f p90 %.0f ms per engine %v; "+
				"predicted hit %.1f%% p50 %.0f p90 %.0f ms per engine %v; mean ttft client %.0f engine %.0f ms (%d failed, %v)",
				s, r, 100*row.Measured.HitRate, row.Measured.TTFTP50, row.Measured.TTFTP90, row.Measured.PerEngine,
				100*row.Predicted.HitRate, row.Predicted.TTFTP50, row.Predicted.TTFTP90, row.Predicted.PerEngine,
				row.ClientTTFTMean, row.EngineTTFTMean, row.Failed, row.Wall.Round(time.Second))
			rows = append(rows, row)
		}
	}
	return rows, nil
}
