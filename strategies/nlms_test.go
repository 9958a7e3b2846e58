package strategies

import (
	"math"
	"testing"
	"time"
)

// samples and noiseMs: how many completions the model sees, and the
// uniform noise (±ms) on each.
const samples, noiseMs = 3000, 5.0

func TestNLMSRecoversCoefficients(t *testing.T) {
	tests := []struct {
		name       string
		w0, w1, w2 float64
		maxQueue   int
		maxKTok    float64
	}{
		{"typical", 40, 25, 120, 30, 8},
		{"queue dominated", 15, 80, 10, 60, 2},
		{"prefill dominated", 200, 5, 400, 10, 32},
		{"small queues", 30, 12, 60, 4, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s TargetStats
			r := NewRand(11)
			for range samples {
				q := uint64(r.IntN(tc.maxQueue + 1))
				k := r.Float64() * tc.maxKTok
				ms := tc.w0 + tc.w1*float64(q) + tc.w2*k + (r.Float64()-0.5)*2*noiseMs
				s.Begin()
				s.End(Outcome{Success: true, Latency: time.Duration(ms * float64(time.Millisecond)), QueueDepth: q, PromptTokens: int(k * 1000)})
			}
			w0, w1, w2 := s.Coefficients()
			for _, c := range []struct{ got, want float64 }{{w0, tc.w0}, {w1, tc.w1}, {w2, tc.w2}} {
				if math.Abs(c.got-c.want) > 0.05*c.want {
					t.Errorf("coefficients (%.2f, %.2f, %.2f), want (%.0f, %.0f, %.0f) within 5%%", w0, w1, w2, tc.w0, tc.w1, tc.w2)
					break
				}
			}
		})
	}
}

func TestPredictGatesAndClamps(t *testing.T) {
	var s TargetStats
	for k := range MinPredictSamples {
		if _, ok := s.Predict(1, 1); ok {
			t.Fatalf("predicted after %d samples", k)
		}
		s.Begin()
		s.End(Outcome{Success: true, Latency: 100 * time.Millisecond, QueueDepth: 1, PromptTokens: 1000})
	}
	if _, ok := s.Predict(1, 1); !ok {
		t.Fatal("no prediction after MinPredictSamples successes")
	}
	// Failures teach nothing.
	before0, before1, before2 := s.Coefficients()
	for range 100 {
		s.Begin()
		s.End(Outcome{Success: false, Latency: time.Millisecond, QueueDepth: 50})
	}
	if a, b, c := s.Coefficients(); a != before0 || b != before1 || c != before2 || s.Samples() != MinPredictSamples {
		t.Fatal("a failed attempt changed the model")
	}
	// A stream held open for a week is one clamped sample, not a poisoned
	// model: after it, ordinary samples bring predictions back.
	s.End(Outcome{Success: true, Latency: 7 * 24 * time.Hour, QueueDepth: 1, PromptTokens: 1000})
	w0, w1, w2 := s.Coefficients()
	if w0 > maxCoefficient || w1 > maxCoefficient || w2 > maxCoefficient {
		t.Fatalf("coefficients escaped their clamp: %v %v %v", w0, w1, w2)
	}
	for range 2000 {
		s.End(Outcome{Success: true, Latency: 100 * time.Millisecond, QueueDepth: 1, PromptTokens: 1000})
	}
	if ms, _ := s.Predict(1, 1); math.Abs(ms-100) > 5 {
		t.Errorf("prediction %.1f ms after recovery, want ≈ 100", ms)
	}
}
