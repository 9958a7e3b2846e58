package main

import (
	"context"
	"fmt"
	"io"
)

// runBench is `rolter bench <routing|overhead|gossip>`.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	subs := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"routing":  runBenchRouting,
		"overhead": runBenchOverhead,
		"gossip":   runBenchGossip,
	}
	if len(args) == 0 || subs[args[0]] == nil {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stderr, benchUsage)
			return nil
		}
		fmt.Fprintln(stderr, benchUsage)
		return fmt.Errorf("%w: bench needs routing, overhead or gossip", errUsage)
	}
	return subs[args[0]](ctx, args[1:], stdout, stderr)
}

const benchUsage = `usage: rolter bench <routing|overhead|gossip> [flags]

  routing   discrete-event fleet simulation: every strategy and an oracle, hit rate, TTFT, throughput
  overhead  open-loop load against a sim directly, through rolter router and through nginx
  gossip    sidecars and routers on loopback: convergence, bandwidth, memory`
