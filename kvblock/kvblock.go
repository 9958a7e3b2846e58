// Package kvblock owns rolter's block keys: the chained 64-bit key of each
// full block of a prompt's token ids, computed identically by the sidecar
// (from the token ids in an engine's BlockStored events) and by the router
// (from the token ids a caller supplies). Engine block hashes are not
// reproducible outside the engine, so the mesh speaks only these keys.
//
// Key(i) = mix(Key(i-1), extra, tokens of block i), with Key(-1) = Root.
// The hash is a fixed, documented function (64-bit multiply-xorshift over
// each token, then a splitmix64 finaliser), stable across processes,
// platforms and releases: changing it is a wire-protocol change.
//
// The package also names the three KV-cache event kinds (EventKind), the
// one definition the simulator's encoder and the sidecar's decoder share.
package kvblock

// DefaultBlockSize is vLLM's default KV block size in tokens.
const DefaultBlockSize = 16

// Root is the parent key of a chain's first block.
const Root uint64 = 0x52_4f_4c_54_45_52_00_01 // "ROLTER\0\1"

const (
	prime1 = 0x9E3779B97F4A7C15
	prime2 = 0xC2B2AE3D27D4EB4F
)

func finalize(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 27
	h *= 0x94D049BB133111EB
	h ^= h >> 31
	return h
}

// Extra folds the extra keys of a block (LoRA adapter name, cache salt)
// into one 64-bit value; 0 means none. Requests for different adapters or
// salts never share keys.
func Extra(lora, salt string) uint64 {
	if lora == "" && salt == "" {
		return 0
	}
	h := uint64(prime2)
	for i := 0; i < len(lora); i++ {
		h = (h ^ uint64(lora[i])) * prime1
	}
	h = (h ^ 0xFF) * prime1 // separator: ("ab","c") ≠ ("a","bc")
	for i := 0; i < len(salt); i++ {
		h = (h ^ uint64(salt[i])) * prime1
	}
	return finalize(h) | 1
}

// Next returns the key of a block whose parent key is parent, with the
// block's token ids tokens and extra keys extra.
func Next(parent, extra uint64, tokens []uint32) uint64 {
	h := parent ^ prime2
	h = (h ^ extra) * prime1
	for _, t := range tokens {
		h = (h ^ uint64(t)) * prime1
		h ^= h >> 29
	}
	return finalize(h ^ uint64(len(tokens)))
}

// Keys appends to dst the keys of every full block of tokens (a trailing
// partial block has no key, as in vLLM) and returns the extended slice.
func Keys(dst []uint64, tokens []uint32, blockSize int, extra uint64) []uint64 {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	parent := Root
	if blockSize == DefaultBlockSize {
		for i := 0; i+DefaultBlockSize <= len(tokens); i += DefaultBlockSize {
			parent = next16(parent, extra, (*[DefaultBlockSize]uint32)(tokens[i:i+DefaultBlockSize]))
			dst = append(dst, parent)
		}
		return dst
	}
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		parent = Next(parent, extra, tokens[i:i+blockSize])
		dst = append(dst, parent)
	}
	return dst
}

// next16 is Next for a block of the default size. Its fixed length keeps
// the loop's state in registers (Next's, inlined into Keys, went through
// the stack): a 100 000-token prompt's keys cost half the instructions.
func next16(parent, extra uint64, tokens *[DefaultBlockSize]uint32) uint64 {
	h := parent ^ prime2
	h = (h ^ extra) * prime1
	for _, t := range tokens {
		h = (h ^ uint64(t)) * prime1
		h ^= h >> 29
	}
	return finalize(h ^ DefaultBlockSize)
}
