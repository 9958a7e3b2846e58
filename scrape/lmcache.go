package scrape

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// DefaultLMCacheCapacity is LMCache's default max_local_cpu_size (5 GB),
// the denominator of the lmcache:local_cache_usage gauge form.
const DefaultLMCacheCapacity = 5 << 30

// ErrNoLMCacheSignal: the LMCache answer carries neither contract.
var ErrNoLMCacheSignal = errors.New("no LMCache occupancy signal")

// LMCacheSignal is the LMCache CPU tier's state.
type LMCacheSignal struct {
	Occupancy float64 // [0,1]
	Available bool
}

// Gauge names of LMCache's local CPU tier usage, in bytes.
var namesLMCacheUsage = []string{"lmcache:local_cache_usage", "lmcache:local_cache_usage_bytes"}

// ParseLMCache reads either form of the LMCache signal: the JSON contract
// {"occupancy": 0..1, "cache_available": bool}, or Prometheus text with the
// lmcache:local_cache_usage gauge (bytes) read over capacity bytes. An
// occupancy outside [0,1] is clamped; a non-number is an error.
func ParseLMCache(body []byte, capacity int64) (LMCacheSignal, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var v struct {
			Occupancy      *float64 `json:"occupancy"`
			CacheAvailable *bool    `json:"cache_available"`
		}
		if err := json.Unmarshal(trimmed, &v); err != nil {
			return LMCacheSignal{}, fmt.Errorf("%w: %w", ErrScrape, err)
		}
		if v.Occupancy == nil || math.IsNaN(*v.Occupancy) {
			return LMCacheSignal{}, fmt.Errorf("%w: %w: JSON without occupancy", ErrScrape, ErrNoLMCacheSignal)
		}
		s := LMCacheSignal{Occupancy: clamp01(*v.Occupancy), Available: true}
		if v.CacheAvailable != nil {
			s.Available = *v.CacheAvailable
		}
		return s, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		return LMCacheSignal{}, fmt.Errorf("%w: %w", ErrScrape, err)
	}
	used, ok := sumOf(fams, namesLMCacheUsage)
	if !ok {
		return LMCacheSignal{}, fmt.Errorf("%w: %w", ErrScrape, ErrNoLMCacheSignal)
	}
	if capacity <= 0 {
		capacity = DefaultLMCacheCapacity
	}
	return LMCacheSignal{Occupancy: clamp01(used / float64(capacity)), Available: true}, nil
}
