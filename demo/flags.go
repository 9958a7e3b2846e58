package demo

import (
	"flag"
	"time"

	"github.com/rolter/rolter/localfleet"
)

// RegisterFlags adds `rolter demo`'s flags for o's fields, with their
// defaults, to fs, and turns the engines' KV events on in a cgo build.
// Bin is the caller's to set.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	o.KVEvents = localfleet.CgoBuild()
	fs.IntVar(&o.BasePort, "base-port", 4000, "first port: routers use base..base+23 (r1's API on base, admin on base+1), "+
		"engines base+100..base+134")
	fs.Float64Var(&o.SimSpeed, "speed", 10, "simulated engines run N times faster than a real GPU")
	fs.StringVar(&o.Trace, "trace", "", "Mooncake trace replayed in the background "+
		"(default: the Mooncake conversation trace embedded in the binary)")
	fs.Float64Var(&o.ReplaySpeed, "replay-speed", 0.2, "background trace speed (1 = the trace's own rate, about 3.4 req/s)")
	fs.BoolVar(&o.Load, "load", true, "send gentle background traffic so the dashboard's numbers move")
	fs.BoolVar(&o.Sidecars, "sidecars", true, "run a sidecar beside every engine (KV events, LMCache and load over gossip)")
	fs.DurationVar(&o.ReadyTimeout, "ready-timeout", 60*time.Second, "give up when the fleet is not ready by then")
}
