package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	benchfleet "github.com/rolter/rolter/bench/fleet"
	benchgossip "github.com/rolter/rolter/bench/gossip"
	"github.com/rolter/rolter/bench/overhead"
	benchrouting "github.com/rolter/rolter/bench/routing"
	"github.com/rolter/rolter/internal/cli"
)

// runBench is `rolter bench <routing|overhead|gossip|fleet>`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	subs := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"routing":  runBenchRouting,
		"overhead": runBenchOverhead,
		"gossip":   runBenchGossip,
		"fleet":    runBenchFleet,
	}
	if len(args) == 0 || subs[args[0]] == nil {
		fmt.Fprintln(stderr, benchUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return nil
		}
		return cli.Usagef("bench needs routing, overhead, gossip or fleet")
	}
	return subs[args[0]](ctx, args[1:], stdout, stderr)
}

const benchUsage = `usage: rolter bench <routing|overhead|gossip|fleet> [flags]

  routing   discrete-event fleet simulation: every strategy and an oracle, hit rate, TTFT, throughput
  overhead  open-loop load against a sim directly, through rolter router and through nginx
  gossip    sidecars and routers on loopback: convergence, bandwidth, memory
  fleet     real routers, sims and sidecars replaying a trace, beside what routing predicts for them`

// runBenchRouting is `rolter bench routing` (package bench/routing).
func runBenchRouting(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o benchrouting.Options
	fs := newFlagSet("bench routing", stderr)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return o.Run(ctx, stdout)
}

// runBenchOverhead is `rolter bench overhead` (package bench/overhead).
func runBenchOverhead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o overhead.Options
	fs := newFlagSet("bench overhead", stderr)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return o.Run(ctx, stdout)
}

// runBenchFleet is `rolter bench fleet` (package bench/fleet): the fleet
// simulator's predictions checked against real routers, sims and sidecars.
func runBenchFleet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o benchfleet.Options
	fs := newFlagSet("bench fleet", stderr)
	o.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return o.Run(ctx, stdout, stderr)
}

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
		return cli.Usage(err)
	}
	return err
}
