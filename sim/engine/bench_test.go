package engine

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkStep measures one scheduler step of a busy engine (64 decoding
// sequences and a stream of new prompts), the fleet simulator's inner loop.
func BenchmarkStep(b *testing.B) {
	e := New(Config{MaxNumSeqs: 64})
	next := 0
	prompt := seqTokens(0, 512)
	b.ReportAllocs()
	for b.Loop() {
		if len(e.waiting) < 8 {
			_ = e.Submit(Request{ID: strconv.Itoa(next), Tokens: prompt, MaxTokens: 64, Arrival: e.Now()})
			next++
		}
		if _, ok := e.Step(); !ok {
			e.AdvanceTo(e.Now() + time.Millisecond)
		}
	}
}
