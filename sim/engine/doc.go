// Package engine owns the vLLM engine model of the simulator: a
// continuous-batching scheduler with chunked prefill, a paged prefix cache
// with vLLM's eviction order, LoRA adapter residency, an optional LMCache
// CPU tier and a step-time model, all driven in virtual time. Nothing in
// it sleeps or reads a clock: the HTTP simulator drives it in real time
// (scaled by --speed) and the fleet simulator drives it in discrete-event
// time, through the same Submit / Step / AdvanceTo calls.
//
// # Scheduling (vLLM v1)
//
// Each step first gives every running sequence its next tokens (one for a
// decoding sequence, the next prefill chunk otherwise) within the token
// budget MaxNumBatchedTokens, allocating KV blocks as tokens are computed;
// when blocks run out the most recently admitted running sequence is
// preempted and recomputed later. If nothing was preempted, waiting
// requests are admitted first-come first-served while the batch has fewer
// than MaxNumSeqs sequences, budget left and KV room; a request whose
// adapter would exceed MaxLoras distinct adapters in the batch is skipped
// for the step. A prompt's leading full blocks already cached are not
// recomputed; as in vLLM at most (len(prompt)-1) tokens can hit, so the
// last token is always computed. A request's first token is sampled at the
// end of the step that computes its last prompt token.
//
// # Prefix cache
//
// Blocks are keyed by rolter's chained block key (package kvblock) over the
// block's tokens with the adapter name as extra key, so adapters never
// share blocks. A block freed by its last user goes to the tail of the
// free queue (a request's blocks last-first); allocation takes from the
// head and evicts what the block cached. The counters follow vLLM's
// prefix_cache_queries / prefix_cache_hits: prompt tokens looked up and
// tokens found, per admission. KV events are emitted per step: one
// BlockStored per request with the blocks it completed (with their token
// ids and the parent hash), one BlockRemoved per evicted block. Engine
// block hashes are SHA-256 digests unrelated to rolter's keys.
//
// # Step-time model and its sources
//
// DefaultModel resembles Llama-3.1-8B-Instruct, BF16, on one H100-80GB SXM
// with vLLM v1 defaults (max_num_seqs 256, max_num_batched_tokens 8192,
// block size 16):
//
//   - Base 6 ms per step: the batch-1 inter-token latency of an 8B model
//     on an H100 is bounded below by reading 16 GB of weights at 3.35 TB/s
//     (≈4.8 ms); published vLLM serving benchmarks of Llama-3.1-8B on one
//     H100 (the vLLM v0.6.0 performance blog, Sep 2024; the Azure HPC blog
//     "Performance of Llama 3.1 8B AI Inference using vLLM on ND-H100-v5",
//     Aug 2025) report low-load TPOT of about 6-7 ms.
//   - PrefillToken 60 µs (≈16.7k prompt tokens/s): 16 GFLOP per token at
//     roughly 27% of the H100's 989 dense BF16 TFLOPS, in line with the
//     ~100-150 ms TTFT those benchmarks show for 2k-token prompts.
//   - DecodeSeq 50 µs per decoding sequence: sampling, and the
//     non-attention work that grows with batch size; with ContextToken it
//     puts a 64-sequence decode step near 10 ms, as the high-concurrency
//     TPOT in the same benchmarks.
//   - ContextToken 40 ns per token of context read by attention: one token
//     of Llama-3.1-8B KV is 128 KiB (32 layers × 8 KV heads × 128 dims ×
//     K and V × 2 bytes), read at 3.35 TB/s.
//   - LoadedToken 6 µs per token loaded from the CPU tier (PCIe 5 at
//     ~25 GB/s for 128 KiB plus overhead), a tenth of recomputing it.
//
// KVBlocks defaults to 28000 (≈450k tokens: 80 GB × 0.9 − 16 GB weights −
// activations, over 128 KiB per token).
package engine
