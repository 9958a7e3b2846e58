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
	DefaultMaxWaiting   = 8
	DefaultMaxKVUsage   = 0.95
	DefaultTTL          = 15 * time.Second
	DefaultSheddableTTL = 10 * time.Second
	DefaultMaxQueue     = 256
	DefaultPromoteAfter = 5 * time.Second
	DefaultPromoteEvery = 4
	DefaultQuantum      = 2048
)

// DefaultConfig returns the defaults: saturated at 8 waiting on the
// engine or 95% KV usage; 256 waiters per band; a TTL of 15 s (critical,
// standard) and 10 s (sheddable); promotion after 5 s per band step, for
// at most one release in 4; a quantum of 2048 prompt tokens.
func DefaultConfig() Config {
	c := Config{Thresholds: Thresholds{MaxWaiting: DefaultMaxWaiting, MaxKVUsage: DefaultMaxKVUsage},
		PromoteAfter: DefaultPromoteAfter, PromoteEvery: DefaultPromoteEvery, Quantum: DefaultQuantum}
	for b := range c.Bands {
		c.Bands[b] = BandLimits{MaxQueue: DefaultMaxQueue, TTL: DefaultTTL}
	}
	c.Bands[Sheddable].TTL = DefaultSheddableTTL
	return c
}
