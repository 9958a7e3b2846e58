// Package workload owns the traffic the simulator and the benchmarks
// replay: the Mooncake trace format (hash ids of 512-token blocks turned
// into deterministic token blocks, so requests sharing hash ids share
// token prefixes), synthetic generators (multi-turn chat over shared
// system prompts, RAG over Zipf-popular documents, a LoRA mix with Zipf
// over many adapters), and an open-loop HTTP replayer with a latency
// report. Generators are deterministic for a seed and produce transport-
// independent Requests that carry both chat messages and token ids, so
// the discrete-event fleet simulator can use them without HTTP.
package workload

import (
	"sort"
	"time"

	"github.com/rolter/rolter/sim/tokenizer"
)

// Request is one request of a workload.
type Request struct {
	// At is the send time, from the start of the workload.
	At time.Duration
	// Messages is the chat form of the prompt.
	Messages []tokenizer.Message
	// Tokens is the prompt's token ids: the chat template applied to
	// Messages and tokenized, or the trace's block tokens.
	Tokens []uint32
	// Text, when set, is the completions form of the prompt (tokenizing it
	// gives Tokens).
	Text      string
	MaxTokens int
	// Model is the adapter to use ("" = the target's base model).
	Model string
	// Session groups the turns of one conversation.
	Session string
	// ID, when set, is sent as the X-Request-Id header (which rolter
	// router passes on and rolter sim's generation log records).
	ID string
}

// fromMessages fills Tokens from Messages.
func fromMessages(r Request) Request {
	r.Tokens = tokenizer.Encode(nil, tokenizer.Render(r.Messages))
	return r
}

func sortByTime(rs []Request) {
	sort.SliceStable(rs, func(i, j int) bool { return rs[i].At < rs[j].At })
}
