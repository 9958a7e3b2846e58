package workload

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/rolter/rolter/internal/cli"
)

// ReplayFlags are the command line of `rolter sim replay`: a trace or a
// synthetic workload, and how to send it.
type ReplayFlags struct {
	Trace, Synthetic, Target, Mode, Model string
	Speed, Rate                           float64
	Limit, ConcurrencyCap                 int
	Seed                                  uint64
	// Timeout bounds each request; the caller's client applies it.
	Timeout time.Duration
}

// RegisterFlags adds the command's flags, with their defaults, to fs.
func (o *ReplayFlags) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Trace, "trace", "", "Mooncake trace (JSON lines: timestamp, input_length, output_length, hash_ids)")
	fs.StringVar(&o.Synthetic, "synthetic", "", "generate instead of replaying: chat, rag or lora")
	fs.StringVar(&o.Target, "target", "http://127.0.0.1:8000", "base URL of the engine or router")
	fs.Float64Var(&o.Speed, "speed", 1, "replay N times faster than the trace")
	fs.IntVar(&o.Limit, "limit", 0, "replay at most N requests (0: all; synthetic: default 500)")
	fs.StringVar(&o.Mode, "mode", "completions", "completions (token-id prompts) or chat (text messages)")
	fs.IntVar(&o.ConcurrencyCap, "concurrency-cap", 0, "bound requests in flight (0: pure open loop)")
	fs.StringVar(&o.Model, "model", "", "model name to send (empty: the target's default)")
	fs.Float64Var(&o.Rate, "rate", 5, "synthetic: requests per second")
	fs.Uint64Var(&o.Seed, "seed", 1, "synthetic: seed")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "per-request timeout")
}

// Run is `rolter sim replay`: it replays the requests against the target
// with client and prints the report, and the target's prefix-cache hit
// rate over the run when it exports one, to w. Unusable flags are
// cli.ErrUsage errors.
func (o ReplayFlags) Run(ctx context.Context, client *http.Client, w io.Writer) error {
	m := Mode(o.Mode)
	if m != ModeCompletions && m != ModeChat {
		return cli.Usagef("--mode must be completions or chat")
	}
	var reqs []Request
	switch {
	case o.Trace != "" && o.Synthetic != "":
		return cli.Usagef("give --trace or --synthetic, not both")
	case o.Trace != "":
		f, err := os.Open(o.Trace)
		if err != nil {
			return err
		}
		recs, err := ReadTrace(f, o.Limit)
		f.Close()
		if err != nil {
			return err
		}
		reqs = FromTrace(recs, m == ModeChat)
	case o.Synthetic != "":
		n := o.Limit
		if n <= 0 {
			n = 500
		}
		var err error
		if reqs, err = Synthetic(o.Synthetic, o.Seed, n, o.Rate); err != nil {
			return cli.Usage(err)
		}
	default:
		return cli.Usagef("--trace or --synthetic is required")
	}
	span := time.Duration(0)
	if len(reqs) > 0 {
		span = reqs[len(reqs)-1].At
	}
	fmt.Fprintf(w, "replaying %d requests spanning %.1fs (%.1fs at speed %g) against %s, mode %s\n",
		len(reqs), span.Seconds(), span.Seconds()/o.Speed, o.Speed, o.Target, m)
	q0, h0, haveCounters := PrefixCacheCounters(ctx, nil, o.Target)
	results := Replay(ctx, ReplayConfig{
		Target: o.Target, Mode: m, Model: o.Model, Speed: o.Speed, ConcurrencyCap: o.ConcurrencyCap, Client: client,
	}, reqs)
	rep := Summarize(results)
	rep.Print(w, o.Speed)
	if haveCounters {
		if q1, h1, ok := PrefixCacheCounters(ctx, nil, o.Target); ok && q1 > q0 {
			fmt.Fprintf(w, "target prefix cache: %.0f of %.0f queried tokens hit (%.1f%%)\n", h1-h0, q1-q0, 100*(h1-h0)/(q1-q0))
		}
	}
	return nil
}
