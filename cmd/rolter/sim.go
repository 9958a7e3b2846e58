package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/rolter/rolter/localfleet"
	"github.com/rolter/rolter/sim"
	"github.com/rolter/rolter/sim/kvevents"
	"github.com/rolter/rolter/sim/workload"
)

// runSim is `rolter sim` (a simulated vLLM engine) and `rolter sim replay`
// (the trace replayer and synthetic load generator).
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "replay" {
		return runSimReplay(ctx, args[1:], stdout, stderr)
	}
	cfg := sim.DefaultConfig()
	fs := newFlagSet("sim", stderr)
	fs.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr, "address of the OpenAI-compatible API, /metrics and /sim admin endpoints")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	fs.IntVar(&cfg.Engine.BlockSize, "block-size", cfg.Engine.BlockSize, "KV block size in tokens")
	fs.IntVar(&cfg.Engine.KVBlocks, "kv-blocks", cfg.Engine.KVBlocks, "GPU KV cache capacity in blocks")
	fs.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "maximum sequences per batch")
	fs.IntVar(&cfg.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.Engine.MaxNumBatchedTokens, "token budget per step (chunked prefill)")
	fs.IntVar(&cfg.Engine.MaxModelLen, "max-model-len", cfg.Engine.MaxModelLen, "maximum prompt + output tokens")
	fs.IntVar(&cfg.Engine.MaxLoras, "max-loras", cfg.Engine.MaxLoras, "LoRA adapters resident at once")
	loraMs := fs.Int("lora-load-ms", int(cfg.Engine.LoraLoad/time.Millisecond), "cost of loading a cold adapter, ms")
	loraModules := fs.String("lora-modules", "", "comma-separated adapters served from the start")
	fs.BoolVar(&cfg.LoraAny, "lora-any", false, "serve any model name as a LoRA adapter without loading it first")
	fs.Float64Var(&cfg.Speed, "speed", cfg.Speed, "run N times faster than real time")
	fs.BoolVar(&cfg.Engine.Instant, "instant", false, "no modelled delay at all (router-overhead benchmarks)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fault injector")
	fs.StringVar(&cfg.KVEvents, "kv-events", "", "KV events PUB endpoint, e.g. tcp://*:5557 (binds) or tcp://127.0.0.1:5557 (connects, per vLLM); empty: off")
	fs.StringVar(&cfg.KVEventsReplay, "kv-events-replay", "", "KV events replay ROUTER endpoint (binds), e.g. tcp://127.0.0.1:5558")
	kvFormat := fs.String("kv-events-format", "array", "event encoding: array (vLLM ≤ mid-2026) or map (v0.26+)")
	kvHash := fs.String("kv-events-hash", "int", "block hash encoding: int (uint64) or bytes (32-byte)")
	kvDial := fs.String("kv-events-dial", "auto", "PUB socket: auto (vLLM rule), bind or connect")
	fs.StringVar(&cfg.KVTopic, "kv-events-topic", cfg.KVTopic, "topic frame of every KV event message")
	fs.Uint64Var(&cfg.KVFirstSeq, "kv-events-seq-start", 0, "first sequence number (vLLM: 0)")
	fs.IntVar(&cfg.DPRank, "data-parallel-rank", 0, "data_parallel_rank sent in every batch (negative: nil)")
	fs.BoolVar(&cfg.LMCache, "lmcache", false, "simulate an LMCache CPU tier: GET /lmcache and lmcache:* gauges")
	fs.IntVar(&cfg.Engine.CPUTierBlocks, "lmcache-cpu-blocks", 20000, "LMCache CPU tier capacity in blocks (with --lmcache)")
	fs.Float64Var(&cfg.Faults.ErrorRate, "fault-error-rate", 0, "fraction of requests answered --fault-status")
	fs.IntVar(&cfg.Faults.Status, "fault-status", 500, "HTTP status of the --fault-error-rate answers (e.g. 503: overloaded)")
	fs.Float64Var(&cfg.Faults.RateLimitRate, "fault-429-rate", 0, "fraction of requests answered 429 with Retry-After")
	fs.IntVar(&cfg.Faults.RetryAfter, "fault-retry-after", cfg.Faults.RetryAfter, "Retry-After seconds of injected 429s")
	fs.Float64Var(&cfg.Faults.HangRate, "fault-hang-rate", 0, "fraction of requests that hang before the first token")
	fs.Float64Var(&cfg.Faults.DieRate, "fault-die-rate", 0, "fraction of requests whose connection dies mid-stream")
	fs.Float64Var(&cfg.Faults.Slowdown, "fault-slowdown", 0, "multiply every step's duration (> 1 slows down)")
	// Stream resume tests: where dying streams die, and what was sent.
	fs.IntVar(&cfg.Faults.DieAfterTokens, "fault-die-after-tokens", 0, "streams picked by --fault-die-rate die right after this many tokens (0: half-way)")
	fs.StringVar(&cfg.GenerationLog, "generation-log", "", "append one JSON line per generation (request id, text sent, outcome) to this file")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Faults.Validate(); err != nil {
		return fmt.Errorf("%w: faults: %v", errUsage, err)
	}
	cfg.Engine.LoraLoad = time.Duration(*loraMs) * time.Millisecond
	if *loraModules != "" {
		cfg.LoraModules = strings.Split(*loraModules, ",")
	}
	var err error
	if cfg.KVEncoding.Format, err = kvevents.ParseFormat(*kvFormat); err != nil {
		return fmt.Errorf("%w: --kv-events-format: %v", errUsage, err)
	}
	switch *kvHash {
	case "int":
	case "bytes":
		cfg.KVEncoding.BytesHashes = true
	default:
		return fmt.Errorf("%w: --kv-events-hash must be int or bytes", errUsage)
	}
	switch *kvDial {
	case "auto":
		cfg.KVDial = kvevents.DialAuto
	case "bind":
		cfg.KVDial = kvevents.DialBind
	case "connect":
		cfg.KVDial = kvevents.DialConnect
	default:
		return fmt.Errorf("%w: --kv-events-dial must be auto, bind or connect", errUsage)
	}
	if cfg.KVEventsReplay != "" && cfg.KVEvents == "" {
		return fmt.Errorf("%w: --kv-events-replay needs --kv-events", errUsage)
	}
	if cfg.Speed <= 0 {
		return fmt.Errorf("%w: --speed must be positive", errUsage)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	return sim.Serve(ctx, cfg, log, func(addr string) {
		fmt.Fprintf(stdout, "rolter sim: %s on http://%s/v1 (speed %g)\n", cfg.Model, addr, cfg.Speed)
	})
}

// runSimReplay is `rolter sim replay`.
func runSimReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim replay", stderr)
	trace := fs.String("trace", "", "Mooncake trace (JSON lines: timestamp, input_length, output_length, hash_ids)")
	synthetic := fs.String("synthetic", "", "generate instead of replaying: chat, rag or lora")
	target := fs.String("target", "http://127.0.0.1:8000", "base URL of the engine or router")
	speed := fs.Float64("speed", 1, "replay N times faster than the trace")
	limit := fs.Int("limit", 0, "replay at most N requests (0: all; synthetic: default 500)")
	mode := fs.String("mode", "completions", "completions (token-id prompts) or chat (text messages)")
	capFlag := fs.Int("concurrency-cap", 0, "bound requests in flight (0: pure open loop)")
	model := fs.String("model", "", "model name to send (empty: the target's default)")
	rate := fs.Float64("rate", 5, "synthetic: requests per second")
	seed := fs.Uint64("seed", 1, "synthetic: seed")
	timeout := fs.Duration("timeout", 10*time.Minute, "per-request timeout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	m := workload.Mode(*mode)
	if m != workload.ModeCompletions && m != workload.ModeChat {
		return fmt.Errorf("%w: --mode must be completions or chat", errUsage)
	}
	var reqs []workload.Request
	switch {
	case *trace != "" && *synthetic != "":
		return fmt.Errorf("%w: give --trace or --synthetic, not both", errUsage)
	case *trace != "":
		f, err := os.Open(*trace)
		if err != nil {
			return err
		}
		recs, err := workload.ReadTrace(f, *limit)
		f.Close()
		if err != nil {
			return err
		}
		reqs = workload.FromTrace(recs, m == workload.ModeChat)
	case *synthetic != "":
		n := *limit
		if n <= 0 {
			n = 500
		}
		var err error
		if reqs, err = workload.Synthetic(*synthetic, *seed, n, *rate); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	default:
		return fmt.Errorf("%w: --trace or --synthetic is required", errUsage)
	}
	span := time.Duration(0)
	if len(reqs) > 0 {
		span = reqs[len(reqs)-1].At
	}
	fmt.Fprintf(stdout, "replaying %d requests spanning %.1fs (%.1fs at speed %g) against %s, mode %s\n",
		len(reqs), span.Seconds(), span.Seconds() / *speed, *speed, *target, m)
	q0, h0, haveCounters := workload.PrefixCacheCounters(ctx, nil, *target)
	results := workload.Replay(ctx, workload.ReplayConfig{
		Target: *target, Mode: m, Model: *model, Speed: *speed, ConcurrencyCap: *capFlag,
		Client: localfleet.ReplayClient(*timeout),
	}, reqs)
	rep := workload.Summarize(results)
	rep.Print(stdout, *speed)
	if haveCounters {
		if q1, h1, ok := workload.PrefixCacheCounters(ctx, nil, *target); ok && q1 > q0 {
			fmt.Fprintf(stdout, "target prefix cache: %.0f of %.0f queried tokens hit (%.1f%%)\n", h1-h0, q1-q0, 100*(h1-h0)/(q1-q0))
		}
	}
	return nil
}
