package config

import (
	"math"
	"time"
)

// Admission is the [admission] section: when every eligible engine of a
// pool is saturated, requests wait in the router's queue (by priority
// band, fair across keys) instead of piling onto engine queues. See
// docs/admission.md for the rules.
type Admission struct {
	// Enabled turns admission control on (default false: every request is
	// forwarded at once, as before).
	Enabled bool `toml:"enabled" json:"enabled"`
	// MaxEngineLoad saturates an engine at this many requests (running +
	// waiting as the router sees it: its own in-flight plus the mesh's
	// estimate of the rest); 0 disables the signal (default 0).
	MaxEngineLoad uint64 `toml:"max_engine_load" json:"max_engine_load"`
	// MaxWaiting saturates an engine whose sidecar reports this many
	// waiting requests (default 8; 0 disables).
	MaxWaiting uint64 `toml:"max_waiting" json:"max_waiting"`
	// MaxKVUsage saturates an engine whose sidecar reports this KV-cache
	// usage, in (0,1] (default 0.95; 0 disables).
	MaxKVUsage float64 `toml:"max_kv_usage" json:"max_kv_usage"`
	// MaxQueuedPrefillTokens saturates an engine with this many prompt
	// tokens queued for prefill: this router's and the others' estimate
	// of what is still waiting for a first token (default 1024; 0
	// disables).
	MaxQueuedPrefillTokens uint64 `toml:"max_queued_prefill_tokens" json:"max_queued_prefill_tokens"`
	// PromoteAfter is the starvation guard: a waiter that has waited this
	// long per band step leaves before the band above (default 5s; 0s
	// disables).
	PromoteAfter Duration `toml:"promote_after" json:"promote_after"`
	// PromoteEvery bounds promotion to one release in this many (default
	// 4), so long-waiting lower bands cannot take over a busy band above.
	PromoteEvery int `toml:"promote_every" json:"promote_every"`
	// QuantumTokens is the fair-share quantum, in prompt tokens, each flow
	// of a band gets per round (default 2048).
	QuantumTokens int `toml:"quantum_tokens" json:"quantum_tokens"`
	// RetryAfter is the Retry-After of a 429 (queue full) and of a 503
	// (waited the TTL) (default 1s).
	RetryAfter Duration `toml:"retry_after" json:"retry_after"`
	// Critical, Standard and Sheddable bound each band's queue per pool per
	// router.
	Critical  AdmissionBand `toml:"critical" json:"critical"`
	Standard  AdmissionBand `toml:"standard" json:"standard"`
	Sheddable AdmissionBand `toml:"sheddable" json:"sheddable"`
	// ReadOnly is set on a section rolter.toml declares: the file owns it
	// and the admin API refuses to change it.
	ReadOnly bool `toml:"-" json:"readonly"`
}

// AdmissionBand is one band's [admission.<band>] table.
type AdmissionBand struct {
	// MaxQueue is the most requests the band holds per pool per router
	// (default 256); one more gets 429.
	MaxQueue int `toml:"max_queue" json:"max_queue"`
	// TTL is the longest a request waits (default 15s; sheddable 10s);
	// then it gets 503.
	TTL Duration `toml:"ttl" json:"ttl"`
	// Fill is the share of the engine thresholds (load, waiting, queued
	// prefill) the band may fill, in (0, 1]: lower bands leave engines
	// room for the bands above (default critical 1, standard 0.75,
	// sheddable 0.5; 0 takes the band's default).
	Fill float64 `toml:"fill" json:"fill"`
}

// DefaultAdmission returns the [admission] defaults.
func DefaultAdmission() Admission {
	band := func(ttl time.Duration, fill float64) AdmissionBand {
		return AdmissionBand{MaxQueue: 256, TTL: d(ttl), Fill: fill}
	}
	return Admission{MaxWaiting: 8, MaxKVUsage: 0.95, MaxQueuedPrefillTokens: 1024, PromoteAfter: d(5 * time.Second), PromoteEvery: 4, QuantumTokens: 2048,
		RetryAfter: d(time.Second), Critical: band(15*time.Second, 1), Standard: band(15*time.Second, 0.75),
		Sheddable: band(10*time.Second, 0.5)}
}

// Bands returns the band tables lowest first (sheddable, standard,
// critical).
func (a Admission) Bands() [3]AdmissionBand {
	return [3]AdmissionBand{a.Sheddable, a.Standard, a.Critical}
}

// Check validates the section; the admin API uses it too.
func (a Admission) Check(add func(field, msg string)) {
	if math.IsNaN(a.MaxKVUsage) || a.MaxKVUsage < 0 || a.MaxKVUsage > 1 {
		add("max_kv_usage", "must be in [0, 1]")
	}
	if a.PromoteAfter.Duration < 0 {
		add("promote_after", "must be a duration ≥ 0 (0: no promotion)")
	}
	if a.PromoteEvery < 1 {
		add("promote_every", "must be ≥ 1")
	}
	if a.QuantumTokens < 1 {
		add("quantum_tokens", "must be ≥ 1")
	}
	if a.RetryAfter.Duration < time.Second {
		add("retry_after", "must be at least 1s")
	}
	for name, b := range map[string]AdmissionBand{"critical": a.Critical, "standard": a.Standard, "sheddable": a.Sheddable} {
		if b.MaxQueue < 0 {
			add(name+".max_queue", "must be ≥ 0 (0: the band never queues)")
		}
		if b.TTL.Duration <= 0 {
			add(name+".ttl", "must be a positive duration")
		}
		if math.IsNaN(b.Fill) || b.Fill < 0 || b.Fill > 1 {
			add(name+".fill", "must be in (0, 1] (0: the band's default)")
		}
	}
}

// ValidPriority reports whether s names a band for a key's max_priority
// ("" is the default, standard).
func ValidPriority(s string) bool {
	switch s {
	case "", "critical", "standard", "sheddable":
		return true
	}
	return false
}
