package strategies

import (
	"math/rand/v2"
	"sync"
)

// lockedRand is a seeded PCG source safe for concurrent use.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// NewRand returns a seeded, concurrency-safe Rand.
func NewRand(seed uint64) Rand {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	v := l.r.IntN(n)
	l.mu.Unlock()
	return v
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	v := l.r.Float64()
	l.mu.Unlock()
	return v
}
