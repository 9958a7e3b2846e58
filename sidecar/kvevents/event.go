// Package kvevents owns the wire format of vLLM's KV-cache events: it decodes
// one msgpack event batch (the third frame of a ZMQ KV-event message) into
// plain Go values. It accepts every encoding found in the field: the batch as
// an array [ts, events, dp_rank] or a map {ts, events, data_parallel_rank};
// events as tagged arrays (any prefix of the field list) or maps with a
// "type" key; block hashes as unsigned or negative 64-bit integers or as
// binary strings (last 8 bytes, big-endian); a root parent as nil or 0;
// lora_name or lora_id. Unknown fields and tags are skipped. Anything else is
// malformed: Decode returns an error wrapping ErrMalformed and never panics.
//
// The package does no I/O and keeps no state beyond a Decoder's reusable
// buffers; it imports only msgpack and kvblock (for the event kinds).
package kvevents

import (
	"errors"

	"github.com/rolter/rolter/kvblock"
)

// ErrMalformed is wrapped by every decoding error: the payload is not a
// KV-event batch this package can read. Callers count and drop it.
var ErrMalformed = errors.New("malformed kv event batch")

// Medium values as vLLM spells them. An event without a medium is on the GPU.
const (
	MediumGPU = "GPU"
	MediumCPU = "CPU"
)

// Event is one decoded KV-cache event. Slices point into the Decoder's
// buffers and are valid until its next Decode.
type Event struct {
	Kind kvblock.EventKind
	// Hashes are the engine's block hashes (low 64 bits), in chain order.
	Hashes []uint64
	// Parent is the engine hash of the block before Hashes[0]; HasParent is
	// false for the first block of a chain (parent nil or 0).
	Parent    uint64
	HasParent bool
	// Tokens are the token ids of all blocks of the event (len = len(Hashes)
	// × BlockSize); nil when the engine sent none (CPU-tier stores).
	Tokens    []uint32
	BlockSize int
	// LoRAName is the adapter's name (newer engines); LoRAID its integer id
	// (older engines, HasLoRAID). Both empty: no adapter.
	LoRAName  string
	LoRAID    int64
	HasLoRAID bool
	// Medium is "GPU", "CPU" or whatever tier the engine names; "" = GPU.
	Medium string
	// Remote is set for locality "REMOTE" (newer engines): the block lives
	// outside this engine and is not part of its residency.
	Remote bool
	// OpaqueFrom is the index of the first block whose extra_keys carry
	// something other than the LoRA name (multimodal hashes, a cache salt):
	// such blocks, and every block chained after them, hash differently in
	// the engine and cannot be keyed from token ids alone. -1 when none.
	OpaqueFrom int
}

// Batch is one decoded event batch (one engine scheduler step).
type Batch struct {
	TS        float64
	Events    []Event
	DPRank    int64
	HasDPRank bool
}
