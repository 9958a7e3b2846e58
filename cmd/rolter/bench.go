package main

import (
	"context"
	"fmt"
	"io"
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
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stderr, benchUsage)
			return nil
		}
		fmt.Fprintln(stderr, benchUsage)
		return fmt.Errorf("%w: bench needs routing, overhead, gossip or fleet", errUsage)
	}
	return subs[args[0]](ctx, args[1:], stdout, stderr)
}

const benchUsage = `usage: rolter bench <routing|overhead|gossip|fleet> [flags]

  routing   discrete-event fleet simulation: every strategy and an oracle, hit rate, TTFT, throughput
  overhead  open-loop load against a sim directly, through rolter router and through nginx
  gossip    sidecars and routers on loopback: convergence, bandwidth, memory
  fleet     real routers, sims and sidecars replaying a trace, beside what routing predicts for them`
