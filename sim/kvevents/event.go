// Package kvevents owns the simulator's side of vLLM's KV-cache event
// stream: the event records an engine produces, their msgpack encoding in
// both field encodings (tagged arrays and tagged maps) with integer or
// 32-byte block hashes, the three-frame message layout, the sequence
// numbering and replay buffer of a publisher, and the fault hooks the
// reliability tests use (skipped sequence numbers, sequence restarts).
//
// The encoding and the Publisher are pure Go and testable without ZMQ; the
// ZMQ PUB and ROUTER sockets (sockets.go) come from internal/zmqsock, the
// module's only cgo code. A build without cgo reports ErrNoCgo when
// sockets are asked for.
package kvevents

import "github.com/rolter/rolter/kvblock"

// Digest is an engine block hash as the engine computes it (32 bytes, like
// vLLM's sha256-based hashes). On the wire it is either the full 32 bytes
// or its last 8 bytes read big-endian as an unsigned integer.
type Digest [32]byte

// Uint64 returns the integer form of d: its last 8 bytes, big-endian.
func (d Digest) Uint64() uint64 {
	var v uint64
	for _, b := range d[24:] {
		v = v<<8 | uint64(b)
	}
	return v
}

// Event is one KV-cache event. Fields not used by a Kind are ignored.
type Event struct {
	Kind kvblock.EventKind
	// Hashes are the engine hashes of the blocks stored or removed.
	Hashes []Digest
	// Parent is the hash of the block before Hashes[0]; HasParent is false
	// for the first block of a chain (sent as nil).
	Parent    Digest
	HasParent bool
	// TokenIDs holds the tokens of every stored block, in order
	// (len = len(Hashes) × BlockSize).
	TokenIDs  []uint32
	BlockSize int
	// LoraName is the adapter the blocks belong to ("" for the base model);
	// LoraID is its integer id (0 for none), sent in the array encoding.
	LoraName string
	LoraID   int
	// Medium is where the blocks live ("GPU" unless set).
	Medium string
}

func (e *Event) medium() string {
	if e.Medium == "" {
		return "GPU"
	}
	return e.Medium
}
