package strategies

// Routers share what their balancers learn (cache_aware prefix observations,
// pipeline session pins) as 64-bit keys; the importing router matches a key
// against its own request and hands the matching prefix or session to the
// balancer's ObservePrefixRemote / PinSession hook. The keys must agree
// between routers, and between the router and the fleet simulator that
// models it, so this file is their one definition.

// SharedPrefixMin is the shortest prompt prefix that is shared. Prefixes are
// shared at powers of two from it, plus the whole prompt: a router serving a
// prompt that shares one of these prefixes with a prompt another router
// served finds it (a shared system prompt, an earlier turn).
const SharedPrefixMin = 64

// PrefixHash is one shared cut of a prompt and its key.
type PrefixHash struct {
	Cut  int
	Hash uint64
}

// The key is FNV-1a 64 over kind, pool, a 0 separator and the prefix,
// computed in one pass over the prompt. Changing it is a wire change.
const fnvOffset, fnvPrime = 14695981039346656037, 1099511628211

func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

func shareSeed(kind byte, pool string) uint64 {
	h := (fnvOffset ^ uint64(kind)) * fnvPrime
	return fnvAdd(h, pool) * fnvPrime // then the 0 separator
}

// AppendPrefixHashes appends every shared cut of prompt, with its key, for
// the balancer of pool (a route's model or a group's slug).
func AppendPrefixHashes(dst []PrefixHash, pool, prompt string) []PrefixHash {
	h, done := shareSeed('p', pool), 0
	for cut := SharedPrefixMin; cut < len(prompt); cut *= 2 {
		h = fnvAdd(h, prompt[done:cut])
		done = cut
		dst = append(dst, PrefixHash{cut, h})
	}
	if len(prompt) > 0 {
		dst = append(dst, PrefixHash{len(prompt), fnvAdd(h, prompt[done:])})
	}
	return dst
}

// SessionHash is the shared key of session key (x-session-id) in pool.
func SessionHash(pool, key string) uint64 { return fnvAdd(shareSeed('s', pool), key) }
