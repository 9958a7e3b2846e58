package sim

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rolter/rolter/sim/kvevents"
)

// Flags are the command line of `rolter sim`: a Config the flags set, and
// the flags whose values Resolve converts into it.
type Flags struct {
	cfg                                   Config
	loraLoadMs                            int
	loraModules, kvFormat, kvHash, kvDial string
}

// RegisterFlags adds `rolter sim`'s flags to fs, with DefaultConfig's
// defaults, and returns what they set.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{cfg: DefaultConfig()}
	cfg := &f.cfg
	fs.StringVar(&cfg.HTTPAddr, "http", cfg.HTTPAddr, "address of the OpenAI-compatible API, /metrics and /sim admin endpoints")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	fs.IntVar(&cfg.Engine.BlockSize, "block-size", cfg.Engine.BlockSize, "KV block size in tokens")
	fs.IntVar(&cfg.Engine.KVBlocks, "kv-blocks", cfg.Engine.KVBlocks, "GPU KV cache capacity in blocks")
	fs.IntVar(&cfg.Engine.MaxNumSeqs, "max-num-seqs", cfg.Engine.MaxNumSeqs, "maximum sequences per batch")
	fs.IntVar(&cfg.Engine.MaxNumBatchedTokens, "max-num-batched-tokens", cfg.Engine.MaxNumBatchedTokens, "token budget per step (chunked prefill)")
	fs.IntVar(&cfg.Engine.MaxModelLen, "max-model-len", cfg.Engine.MaxModelLen, "maximum prompt + output tokens")
	fs.IntVar(&cfg.Engine.MaxLoras, "max-loras", cfg.Engine.MaxLoras, "LoRA adapters resident at once")
	fs.IntVar(&f.loraLoadMs, "lora-load-ms", int(cfg.Engine.LoraLoad/time.Millisecond), "cost of loading a cold adapter, ms")
	fs.StringVar(&f.loraModules, "lora-modules", "", "comma-separated adapters served from the start")
	fs.BoolVar(&cfg.LoraAny, "lora-any", false, "serve any model name as a LoRA adapter without loading it first")
	fs.Float64Var(&cfg.Speed, "speed", cfg.Speed, "run N times faster than real time")
	fs.BoolVar(&cfg.Engine.Instant, "instant", false, "no modelled delay at all (router-overhead benchmarks)")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the fault injector")
	fs.StringVar(&cfg.KVEvents, "kv-events", "", "KV events PUB endpoint, e.g. tcp://*:5557 (binds) or tcp://127.0.0.1:5557 (connects, per vLLM); empty: off")
	fs.StringVar(&cfg.KVEventsReplay, "kv-events-replay", "", "KV events replay ROUTER endpoint (binds), e.g. tcp://127.0.0.1:5558")
	fs.StringVar(&f.kvFormat, "kv-events-format", "array", "event encoding: array (vLLM ≤ mid-2026) or map (v0.26+)")
	fs.StringVar(&f.kvHash, "kv-events-hash", "int", "block hash encoding: int (uint64) or bytes (32-byte)")
	fs.StringVar(&f.kvDial, "kv-events-dial", "auto", "PUB socket: auto (vLLM rule), bind or connect")
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
	fs.BoolVar(&cfg.ClientClock, "client-clock", false, "a request with an "+SentAtHeader+" header (Unix ns, the client's clock: same host only) arrives at the engine when it was sent, not when its HTTP path delivered it (rolter bench fleet)")
	fs.StringVar(&cfg.GenerationLog, "generation-log", "", "append one JSON line per generation (request id, text sent, outcome) to this file")
	return f
}

// Resolve converts and checks the parsed flags. Every error it returns
// is the command line's and names the flag.
func (f *Flags) Resolve() (Config, error) {
	cfg := f.cfg
	if err := cfg.Faults.Validate(); err != nil {
		return cfg, fmt.Errorf("faults: %v", err)
	}
	cfg.Engine.LoraLoad = time.Duration(f.loraLoadMs) * time.Millisecond
	if f.loraModules != "" {
		cfg.LoraModules = strings.Split(f.loraModules, ",")
	}
	var err error
	if cfg.KVEncoding.Format, err = kvevents.ParseFormat(f.kvFormat); err != nil {
		return cfg, fmt.Errorf("--kv-events-format: %v", err)
	}
	switch f.kvHash {
	case "int":
	case "bytes":
		cfg.KVEncoding.BytesHashes = true
	default:
		return cfg, errors.New("--kv-events-hash must be int or bytes")
	}
	switch f.kvDial {
	case "auto":
		cfg.KVDial = kvevents.DialAuto
	case "bind":
		cfg.KVDial = kvevents.DialBind
	case "connect":
		cfg.KVDial = kvevents.DialConnect
	default:
		return cfg, errors.New("--kv-events-dial must be auto, bind or connect")
	}
	if cfg.KVEventsReplay != "" && cfg.KVEvents == "" {
		return cfg, errors.New("--kv-events-replay needs --kv-events")
	}
	if cfg.Speed <= 0 {
		return cfg, errors.New("--speed must be positive")
	}
	return cfg, nil
}
