package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/sim/engine"
)

// runBenchBurst is `rolter bench routing --burst` (bench/routing's
// RunBurst): the strategies default to power_of_two.
func runBenchBurst(ctx context.Context, f routingFlags, stdout io.Writer) error {
	if f.strategies == "" {
		f.strategies = "power_of_two"
	}
	names, err := strategyList(f.strategies)
	if err != nil {
		return err
	}
	routers, err := intList(f.routers)
	if err != nil {
		return fmt.Errorf("%w: --routers: %v", errUsage, err)
	}
	rows, err := benchrouting.RunBurst(ctx, benchrouting.BurstOptions{Workload: f.workload, Strategies: names, Routers: routers,
		Engines: f.engines, Engine: engine.Config{CPUTierBlocks: f.cpuTier, KVBlocks: f.kvBlocks}, GossipDelay: f.gossipDelay,
		PeerDelay: f.peerDelay, Seed: f.seed, Isolated: !f.mesh, Parallel: f.parallel,
		Thresholds: admission.Thresholds{MaxLoad: f.admitMaxLoad, MaxQueuedPrefill: f.admitMaxPrefill}}, stdout)
	if errors.Is(err, benchrouting.ErrBurstWorkload) {
		return fmt.Errorf("%w: %w", errUsage, err)
	} else if err != nil {
		return err
	}
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	return nil
}
