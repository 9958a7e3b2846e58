package admission

import (
	"strings"
	"time"
)

// Band is a request's priority. Higher bands leave the queue first.
type Band uint8

// The bands, lowest first.
const (
	Sheddable Band = iota
	Standard
	Critical
	// NumBands is the number of bands.
	NumBands = 3
)

// Header is the request header naming a request's band.
const Header = "x-rolter-priority"

// FairnessHeader is the request header naming a request's flow within its
// band, honoured only for keys that allow it (otherwise the flow is the
// key).
const FairnessHeader = "x-rolter-fairness-id"

var bandNames = [NumBands]string{"sheddable", "standard", "critical"}

// String returns the band's name as the header spells it.
func (b Band) String() string {
	if int(b) < len(bandNames) {
		return bandNames[b]
	}
	return "unknown"
}

// ParseBand reads a band name (case-insensitive, surrounding space
// ignored). ok is false for anything else.
func ParseBand(s string) (b Band, ok bool) {
	s = strings.TrimSpace(s)
	for i, n := range bandNames {
		if strings.EqualFold(s, n) {
			return Band(i), true
		}
	}
	return Standard, false
}

// Cap returns b lowered to max: a key whose maximum band is standard
// sending critical gets standard.
func (b Band) Cap(max Band) Band { return min(b, max) }

// BandLimits bound one band's queue.
type BandLimits struct {
	// MaxQueue is the most waiters the band holds per pool per router; a
	// request arriving at a full band is rejected (429).
	MaxQueue int
	// TTL is the longest a waiter waits; then it leaves with 503.
	TTL time.Duration
	// Fill is the share of the engine thresholds this band may fill: an
	// engine is saturated for the band once its load, waiting queue or
	// queued prefill reaches Fill × the threshold (Config.For). Lower bands fill less, so an engine keeps
	// room, and a short queue, for the bands above. 0 means 1.
	Fill float64
}

// Config is one pool's admission configuration.
type Config struct {
	Thresholds
	Bands [NumBands]BandLimits
	// PromoteAfter is the starvation guard: a waiter that has waited
	// PromoteAfter × (bands between it and the highest non-empty band)
	// leaves before that band's waiters. 0 disables promotion.
	PromoteAfter time.Duration
	// PromoteEvery bounds what promotion takes from the bands above: at
	// most one release in PromoteEvery goes to a promoted waiter (≤ 1:
	// every release may).
	PromoteEvery int
	// Quantum is the deficit round-robin quantum in cost units (a
	// request's cost is its estimated prompt tokens, at least 1).
	Quantum int
}

// Defaults of the [admission] section (docs/configuration.md).
const (
	DefaultMaxWaiting = 8
	DefaultMaxKVUsage = 0.95
	// DefaultMaxQueuedPrefill is the prompt tokens queued for prefill on
	// one engine at which it is saturated: about one prefill chunk of a
	// chat turn, so a request admitted next waits behind little prefill.
	DefaultMaxQueuedPrefill = 1024
	DefaultTTL              = 15 * time.Second
	DefaultSheddableTTL     = 10 * time.Second
	DefaultMaxQueue         = 256
	DefaultPromoteAfter     = 5 * time.Second
	DefaultPromoteEvery     = 4
	DefaultQuantum          = 2048
	// The bands' default fills: standard up to 3/4 of each threshold,
	// sheddable up to 1/2, critical up to the threshold itself.
	DefaultCriticalFill  = 1.0
	DefaultStandardFill  = 0.75
	DefaultSheddableFill = 0.5
)

// For returns the thresholds band b sees: Thresholds.Scaled by the
// band's Fill.
func (c Config) For(b Band) Thresholds {
	if b >= NumBands {
		b = Standard
	}
	return c.Thresholds.Scaled(c.Bands[b].Fill)
}

// Room reports whether engine e takes a request released under band b:
// e is below every threshold For(b).
func (c Config) Room(b Band, e Engine) bool { return c.For(b).Headroom(e) > 0 }

// DefaultConfig returns the defaults: saturated at 8 waiting on the
// engine or 95% KV usage; 256 waiters per band; a TTL of 15 s (critical,
// standard) and 10 s (sheddable); promotion after 5 s per band step, for
// at most one release in 4; a quantum of 2048 prompt tokens.
func DefaultConfig() Config {
	c := Config{Thresholds: Thresholds{MaxWaiting: DefaultMaxWaiting, MaxKVUsage: DefaultMaxKVUsage,
		MaxQueuedPrefill: DefaultMaxQueuedPrefill},
		PromoteAfter: DefaultPromoteAfter, PromoteEvery: DefaultPromoteEvery, Quantum: DefaultQuantum}
	for b := range c.Bands {
		c.Bands[b] = BandLimits{MaxQueue: DefaultMaxQueue, TTL: DefaultTTL}
	}
	c.Bands[Sheddable].TTL = DefaultSheddableTTL
	c.Bands[Critical].Fill = DefaultCriticalFill
	c.Bands[Standard].Fill = DefaultStandardFill
	c.Bands[Sheddable].Fill = DefaultSheddableFill
	return c
}
