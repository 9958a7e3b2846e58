package fleet

import (
	"errors"
	"math"
	"time"

	"github.com/rolter/rolter/router/admission"
	"github.com/rolter/rolter/strategies"
)

// Burst is a load pattern for admission: Base × capacity for Warm, Peak ×
// capacity for Hold, then Base again for Cool; arrivals are a Poisson
// process at that rate, and request i's band is i mod 3 (critical,
// standard, sheddable in turn: a third each).
type Burst struct {
	Base, Peak       float64 // fractions of fleet capacity
	Warm, Hold, Cool time.Duration
}

// DefaultBurst is the acceptance pattern of docs/admission.md: 0.5 of
// capacity for 30 s, 1.5 for a minute, 0.5 for 30 s.
var DefaultBurst = Burst{Base: 0.5, Peak: 1.5, Warm: 30 * time.Second, Hold: time.Minute, Cool: 30 * time.Second}

// Flat is the same span at Base throughout: the reference the targets
// compare the burst's critical TTFT with.
func (b Burst) Flat() Burst {
	return Burst{Base: b.Base, Peak: b.Base, Warm: b.Warm, Hold: b.Hold, Cool: b.Cool}
}

// Requests is how many requests the pattern needs at capacity (req/s),
// rounded up.
func (b Burst) Requests(capacity float64) int {
	n := capacity * (b.Base*(b.Warm+b.Cool).Seconds() + b.Peak*b.Hold.Seconds())
	return int(math.Ceil(n))
}

// ErrBurst marks a burst that cannot be laid out.
var ErrBurst = errors.New("fleet: bad burst")

// Apply lays reqs (their content, in order) out on the pattern at
// capacity req/s with seeded Poisson arrivals and assigns the bands. It
// returns the requests that fit the pattern's span (at most len(reqs)).
func (b Burst) Apply(reqs []Request, capacity float64, seed uint64) ([]Request, error) {
	if capacity <= 0 || b.Base <= 0 || b.Peak <= 0 || b.Warm < 0 || b.Hold < 0 || b.Cool < 0 {
		return nil, ErrBurst
	}
	rng := strategies.NewRand(seed)
	end := b.Warm + b.Hold + b.Cool
	rate := func(t time.Duration) float64 {
		if t >= b.Warm && t < b.Warm+b.Hold {
			return b.Peak * capacity
		}
		return b.Base * capacity
	}
	out := make([]Request, 0, len(reqs))
	t := time.Duration(0)
	for i := range reqs {
		// Exponential gaps at the rate in force when the gap starts.
		gap := -math.Log(1-rng.Float64()) / rate(t)
		t += time.Duration(gap * float64(time.Second))
		if t >= end {
			break
		}
		r := reqs[i]
		r.At = t
		r.Band = [3]admission.Band{admission.Critical, admission.Standard, admission.Sheddable}[i%3]
		out = append(out, r)
	}
	return out, nil
}
