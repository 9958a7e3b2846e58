package strategies

import (
	"sync/atomic"

	"github.com/rolter/rolter/adaptive"
)

// PolicyHolder publishes the current policy to every adaptive balancer; the
// control plane stores a new value and the next pick reads it.
type PolicyHolder struct {
	p atomic.Pointer[adaptive.Policy]
}

// NewPolicyHolder returns a holder with p stored.
func NewPolicyHolder(p adaptive.Policy) *PolicyHolder {
	h := &PolicyHolder{}
	h.Store(p)
	return h
}

// Load returns the current sanitized policy.
func (h *PolicyHolder) Load() adaptive.Policy {
	if h == nil {
		return adaptive.Policy{}
	}
	if p := h.p.Load(); p != nil {
		return *p
	}
	return adaptive.Policy{}
}

// Store sanitizes and publishes p.
func (h *PolicyHolder) Store(p adaptive.Policy) {
	s := p.Sanitized()
	h.p.Store(&s)
}
