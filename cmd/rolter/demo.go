package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rolter/rolter/demo"
	"github.com/rolter/rolter/localfleet"
)

// runDemo is `rolter demo` (package demo): the whole mesh on loopback,
// ready to try, until SIGINT/SIGTERM (ctx).
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := demo.Options{KVEvents: localfleet.CgoBuild()}
	fs := newFlagSet("demo", stderr)
	fs.IntVar(&o.BasePort, "base-port", 4000, "first port: routers use base..base+23 (r1's API on base, admin on base+1), "+
		"engines base+100..base+134")
	fs.Float64Var(&o.SimSpeed, "speed", 10, "simulated engines run N times faster than a real GPU")
	fs.StringVar(&o.Trace, "trace", "", "Mooncake trace replayed in the background "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.Float64Var(&o.ReplaySpeed, "replay-speed", 0.2, "background trace speed (1 = the trace's own rate, about 3.4 req/s)")
	fs.BoolVar(&o.Load, "load", true, "send gentle background traffic so the dashboard's numbers move")
	fs.BoolVar(&o.Sidecars, "sidecars", true, "run a sidecar beside every engine (KV events, LMCache and load over gossip)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 60*time.Second, "give up when the fleet is not ready by then")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Bin, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the rolter binary: %w", err)
	}
	err = demo.Run(ctx, o, stdout, stderr)
	if errors.Is(err, demo.ErrOptions) || errors.Is(err, localfleet.ErrPortRange) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}
