// Package sim owns `rolter sim`: a simulated vLLM engine for machines
// without a GPU. It serves vLLM's OpenAI-compatible HTTP surface
// (/v1/completions with text or token-id prompts, /v1/chat/completions,
// SSE streaming with include_usage, /v1/models, /tokenize, /health, LoRA
// load/unload), vLLM's Prometheus metrics, KV-cache events over ZMQ
// (package kvevents), an LMCache occupancy signal, and fault injection for
// the reliability tests.
//
// Chat requests honour vLLM's continue_final_message and
// add_generation_prompt: a continued final message is left open in the
// chat template, so the engine extends it instead of answering it. With
// --generation-log every generation appends one JSON line (Generation):
// the request's X-Request-Id, the text sent, how it ended.
//
// The behaviour lives in package engine, a virtual-time model of the vLLM
// scheduler and prefix cache; this package is a thin real-time driver over
// it (driver.go): each step's modelled duration, divided by --speed, is
// slept before its tokens are delivered, and "instant" mode uses a zero
// step model for router-overhead benchmarks. Text is tokenized by package
// tokenizer, a deterministic prefix-stable stand-in. Package workload
// replays traces and generates synthetic workloads against any
// OpenAI-compatible target.
//
// Admin endpoints (no authentication: bind the sim to loopback):
//
//	GET  /sim/faults        current faults
//	POST /sim/faults        merge {error_rate, status, rate_limit_rate,
//	                        retry_after_seconds, hang_rate, die_rate, slowdown,
//	                        die_after_tokens}
//	                        (status: of the error_rate answers, default 500)
//	POST /sim/kv/skip       {"n": N}: drop the next N batches from the live
//	                        socket, keep them for replay
//	POST /sim/kv/restart    restart the KV event sequence (engine restart)
//	POST /sim/kv/clear      drop every cached block (AllBlocksCleared)
//	POST /sim/crash         stop serving at once; the process exits non-zero
//	GET  /sim/stats         engine counters and prefix-cache hit rate
//	GET  /lmcache           {occupancy, cache_available} (with --lmcache)
package sim
