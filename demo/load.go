package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rolter/rolter/data/mooncake"
	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim/workload"
)

// load is one background stream of requests, replayed in rounds.
type load struct {
	what string
	cfg  workload.ReplayConfig
	reqs []workload.Request
}

// loop replays the requests round after round until ctx ends.
func (l load) loop(ctx context.Context) {
	for ctx.Err() == nil && len(l.reqs) > 0 {
		workload.Replay(ctx, l.cfg, l.reqs)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// traceRequests is how much of the trace a round replays.
const traceRequests = 1200

// loads builds the background traffic: the Mooncake trace (token-id
// prompts sharing prefixes) on "precise" spread over the routers, a LoRA
// mix on the "lora" group, synthetic chats on "cache" and "adaptive".
func (d *demo) loads(stdout io.Writer) []load {
	target := func(i int) string { return d.plan.Routers[i%Routers].APIURL() }
	client := localfleet.ReplayClient(5 * time.Minute)
	var out []load
	path := d.opts.Trace
	var recs []workload.TraceRecord
	var err error
	if path == "" {
		path = mooncake.Name
		recs, err = workload.ReadTrace(mooncake.Open(), traceRequests)
	} else {
		var f *os.File
		if f, err = os.Open(path); err == nil {
			recs, err = workload.ReadTrace(f, traceRequests)
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stdout, "  load: cannot read the trace %s (%v); using synthetic chat instead\n", path, err)
		recs = nil
	}
	if len(recs) > 0 {
		reqs := workload.FromTrace(recs, false)
		parts := make([][]workload.Request, Routers)
		for i, r := range reqs {
			parts[i%Routers] = append(parts[i%Routers], r)
		}
		for i, p := range parts {
			out = append(out, load{
				what: fmt.Sprintf("Mooncake trace %s (%d requests per round, speed %g) -> model precise via %s",
					path, len(p), d.opts.ReplaySpeed, target(i)),
				cfg:  workload.ReplayConfig{Target: target(i), Mode: workload.ModeCompletions, Model: "precise", Speed: d.opts.ReplaySpeed, ConcurrencyCap: 4, Client: client},
				reqs: p,
			})
		}
	} else {
		reqs, _ := workload.Synthetic("chat", 11, 300, 0.5) // a known generator and a positive count: no error
		out = append(out, load{
			what: "no readable trace: synthetic chat, 0.5 req/s -> model precise via " + target(0),
			cfg:  workload.ReplayConfig{Target: target(0), Mode: workload.ModeChat, Model: "precise", Speed: 1, ConcurrencyCap: 4, Client: client},
			reqs: reqs,
		})
	}
	lora := workload.LoraMix{Seed: 7, Requests: 300, Adapters: 6, ZipfS: 1.1, PrefixTokens: 256, PromptTokens: 64,
		OutputTokens: 48, Rate: 0.25}.Generate()
	for i := range lora {
		lora[i].Model = "lora/" + lora[i].Model
	}
	out = append(out, load{
		what: "LoRA mix, 0.25 req/s -> models lora/adapter-000..lora/adapter-005 via " + target(1),
		cfg:  workload.ReplayConfig{Target: target(1), Mode: workload.ModeChat, Speed: 1, ConcurrencyCap: 4, Client: client},
		reqs: lora,
	})
	for i, model := range []string{"cache", "adaptive"} {
		reqs, _ := workload.Synthetic("chat", uint64(21+i), 300, 0.25)
		out = append(out, load{
			what: fmt.Sprintf("synthetic multi-turn chat, 0.25 req/s -> model %s via %s", model, target(i+2)),
			cfg:  workload.ReplayConfig{Target: target(i + 2), Mode: workload.ModeChat, Model: model, Speed: 1, ConcurrencyCap: 4, Client: client},
			reqs: reqs,
		})
	}
	return out
}
