package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	benchgossip "github.com/rolter/rolter/bench/gossip"
)

// runBenchGossip is `rolter bench gossip` (package bench/gossip):
// convergence, bandwidth, memory and view accuracy of the gossip mesh.
func runBenchGossip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c benchgossip.Config
	fs := newFlagSet("bench gossip", stderr)
	fs.IntVar(&c.Sidecars, "sidecars", 64, "number of sidecars (one engine each)")
	fs.IntVar(&c.Routers, "routers", 3, "number of routers")
	fs.IntVar(&c.Blocks, "blocks", 50000, "resident blocks per engine")
	fs.IntVar(&c.EventsPerSec, "events-per-sec", 1000, "block events per second per engine (half stores, half evictions)")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "steady-state measurement time")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed")
	fs.Float64Var(&c.Loss, "loss", 0, "outbound UDP packet loss on every node, [0,1]")
	fs.BoolVar(&c.Insecure, "insecure", false, "run without gossip encryption")
	fs.BoolVar(&c.Identity, "identity", false, "give every member a certificate (gossip identity): every message carries a MAC")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	err := benchgossip.Run(ctx, c, stdout)
	if errors.Is(err, benchgossip.ErrConfig) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}
