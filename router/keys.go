package router

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"

	"github.com/rolter/rolter/router/admission"
)

// apiKey is a configured client key: only its SHA-256 is held.
type apiKey struct {
	name   string
	sum    [sha256.Size]byte
	models []string // allowlist; empty = every model
	// providers is the provider allowlist; nil = every provider.
	providers map[string]bool
	// maxBand caps the priority band the key's requests may ask for;
	// fairness lets them name their fairness flow (admission.go).
	maxBand  admission.Band
	fairness bool
}

// allowsProvider reports whether k's requests may land on provider. A nil
// key (open router) and a key without a provider allowlist allow all.
func (k *apiKey) allowsProvider(provider string) bool {
	return k == nil || k.providers == nil || k.providers[provider]
}

// authenticate returns the key presenting the bearer token of auth (the
// request's Authorization header). With no key
// configured the router is open and returns nil, nil. Every configured
// key is compared (in constant time) so the time taken does not reveal
// which one matched.
func (s *snapshot) authenticate(auth string) (*apiKey, error) {
	if len(s.keys) == 0 {
		return nil, nil
	}
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <key>", ErrUnauthorized)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	found := -1
	for i := range s.keys {
		if subtle.ConstantTimeCompare(sum[:], s.keys[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, ErrUnauthorized
	}
	return &s.keys[found], nil
}

// allows reports whether k may use the address model. Allowlist entries
// are exact addresses ("llama", "fleet/qwen"), "prefix/*" for every model
// of a provider group or provider pin, or "*". A nil key (open router) and
// an empty allowlist allow everything.
func (k *apiKey) allows(model string) bool {
	if k == nil || len(k.models) == 0 {
		return true
	}
	for _, m := range k.models {
		if m == "*" || m == model {
			return true
		}
		if prefix, ok := strings.CutSuffix(m, "/*"); ok {
			if p, _, found := strings.Cut(model, "/"); found && p == prefix {
				return true
			}
		}
	}
	return false
}
