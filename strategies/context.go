package strategies

import "unsafe"

// MaxPromptBytes bounds RouteContext.Prompt: the router passes the
// conversation's first 32 KiB of text, and the whole prompt's size and
// identity in PromptLen and PromptDigest.
const MaxPromptBytes = 32 << 10

// RouteContext is what a strategy may know about the request being routed.
// The router builds one per request; strategies read it and never retain it
// (nor any slice in it) past the call.
type RouteContext struct {
	// Model is the public model name the caller addressed.
	Model string
	// SessionKey is the x-session-id header, empty when absent.
	SessionKey string
	// Prompt is the conversation's text bounded to MaxPromptBytes. A prompt
	// given only as token ids (a completions prompt of ids, or ids in
	// x-rolter-vllm-token-ids with no text) has no text; Prompt is then
	// TokenPrompt(TokenIDs), so prefix affinity matches leading ids as it
	// matches leading text.
	Prompt string
	// PromptLen is the byte length of the whole conversation's text (of
	// the whole TokenPrompt when Prompt is one).
	PromptLen int
	// PromptDigest is a stable 64-bit digest of the whole conversation: its
	// text plus the identity of its images, tool calls and tool results, or
	// of the raw body when the router could not read one. The router makes
	// it only for strategies that ReadsPromptDigest lists; for the others
	// it is 0.
	PromptDigest uint64
	// PromptTokens estimates the prompt's token count (exact when TokenIDs
	// is set); predicted_latency reads it.
	PromptTokens int
	// TokenIDs are the prompt's token ids when the caller supplied them
	// (x-rolter-vllm-token-ids, or a completions prompt given as ids).
	TokenIDs []uint32
	// BlockKeys are the kvblock keys of TokenIDs' full blocks, computed once
	// by the router for precise_cache_aware; nil without token ids.
	BlockKeys []uint64
	// Adapter is the LoRA adapter the request addresses: set only on
	// passthrough provider-group routes, where the requested model differs
	// from the route's own model.
	Adapter string
	// Retry is set when the pick is for a later attempt of the request (its
	// earlier pick failed or could not be admitted). Rotating strategies
	// (round_robin, weighted) do not advance on a retry, so a target that
	// fails does not shift where the next request's rotation starts.
	Retry bool
	// QueuedPrefill, when not nil, holds per target (indexed like loads)
	// the prompt tokens the router knows to be waiting for prefill there:
	// for each request in flight to the target that has not yet produced
	// its first token, its prompt tokens minus the prefix the target held
	// when it was picked, summed over this router's requests and the other
	// routers' as the mesh last reported them. precise_cache_aware then
	// weighs load as prefill work rather than request counts. nil: unknown
	// (loads alone measure load).
	QueuedPrefill []uint64
}

// tokenDigits is the alphabet TokenPrompt writes ids in: 64 ASCII digits.
const tokenDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz+/"

// TokenKeyBytes is how many bytes of TokenPrompt one token id takes.
const TokenKeyBytes = 6

// TokenPrompt is the affinity text of a prompt known only by its token
// ids: each id as TokenKeyBytes base-64 ASCII digits (36 bits, enough for
// any uint32), bounded to MaxPromptBytes (the first 5461 ids). Two prompts
// share a prefix of k whole ids exactly when their TokenPrompts share a
// prefix of 6k bytes, so cache_aware, the pipeline's prefix scorer and the
// mesh's shared prefix keys work on it unchanged; it is valid UTF-8 like
// any prompt text.
func TokenPrompt(ids []uint32) string {
	n := min(len(ids), MaxPromptBytes/TokenKeyBytes)
	if n == 0 {
		return ""
	}
	b := make([]byte, TokenKeyBytes*n)
	for i, id := range ids[:n] {
		d := (*[TokenKeyBytes]byte)(b[TokenKeyBytes*i:])
		v := uint64(id)
		d[0] = tokenDigits[v>>30&63]
		d[1] = tokenDigits[v>>24&63]
		d[2] = tokenDigits[v>>18&63]
		d[3] = tokenDigits[v>>12&63]
		d[4] = tokenDigits[v>>6&63]
		d[5] = tokenDigits[v&63]
	}
	// b is written once, here, and never again: the string is its bytes,
	// not a second 32 KiB copy.
	return unsafe.String(&b[0], len(b))
}
