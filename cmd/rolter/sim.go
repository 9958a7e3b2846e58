package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/rolter/rolter/internal/cli"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim"
	"github.com/rolter/rolter/sim/workload"
)

// runSim is `rolter sim` (a simulated vLLM engine, package sim) and
// `rolter sim replay` (the trace replayer and synthetic load generator,
// package sim/workload).
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "replay" {
		var o workload.ReplayFlags
		fs := newFlagSet("sim replay", stderr)
		o.RegisterFlags(fs)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		return o.Run(ctx, localfleet.ReplayClient(o.Timeout), stdout)
	}
	fs := newFlagSet("sim", stderr)
	flags := sim.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := flags.Resolve()
	if err != nil {
		return cli.Usage(err)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return sim.Serve(ctx, cfg, log, func(addr string) {
		fmt.Fprintf(stdout, "rolter sim: %s on http://%s/v1 (speed %g)\n", cfg.Model, addr, cfg.Speed)
	})
}
